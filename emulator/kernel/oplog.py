"""OpLog: every command a launch issued, in issue order, kept as two integer columns."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, overload

import numpy as np


class OpRecord(NamedTuple):
    """One op-log entry: a command of a given category and op issued at ``time`` on ``pe``."""

    time: int
    pe: int
    category: str
    op: str


#: Distinct (category, op) pairs one log can hold (the emulator has six).
_MAX_OPS = 256


class OpLog(Sequence[OpRecord]):
    """A sequence of OpRecord that stores 16 bytes an entry (a list of OpRecord tuples
    takes about 120): a long run issues millions of commands, and its log is all the
    emulator keeps of them. Compares equal to a list of the same records."""

    __slots__ = ("_times", "_pe_ops", "_codes", "_pairs")

    def __init__(self) -> None:
        #: Issue cycle of each entry.
        self._times = array("q")
        #: ``pe * _MAX_OPS + code`` of each entry; ``code`` indexes ``_pairs``.
        self._pe_ops = array("q")
        #: Code of each (category, op) pair seen, and the pairs by code.
        self._codes: dict[tuple[str, str], int] = {}
        self._pairs: list[tuple[str, str]] = []

    def append(self, time: int, pe: int, category: str, op: str) -> None:
        """Add the entry of a command of ``category`` and ``op`` issued at ``time`` on ``pe``."""
        code = self._codes.get((category, op))
        if code is None:
            code = self._new_code(category, op)
        self._times.append(time)
        self._pe_ops.append(pe * _MAX_OPS + code)

    def _new_code(self, category: str, op: str) -> int:
        if len(self._pairs) >= _MAX_OPS:
            raise ValueError(f"an op log holds at most {_MAX_OPS} distinct (category, op) pairs")
        code = self._codes[(category, op)] = len(self._pairs)
        self._pairs.append((category, op))
        return code

    def counts(self) -> Counter[tuple[str, str]]:
        """Entries by (category, op)."""
        codes = np.frombuffer(self._pe_ops, dtype=np.int64) % _MAX_OPS
        by_code = np.bincount(codes, minlength=len(self._pairs)).tolist()
        return Counter({pair: n for pair, n in zip(self._pairs, by_code, strict=True) if n})

    def _record(self, i: int) -> OpRecord:
        pe, code = divmod(self._pe_ops[i], _MAX_OPS)
        return OpRecord(self._times[i], pe, *self._pairs[code])

    def __len__(self) -> int:
        return len(self._times)

    @overload
    def __getitem__(self, index: int) -> OpRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[OpRecord]: ...

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._record(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("op log index out of range")
        return self._record(index)

    def __iter__(self) -> Iterator[OpRecord]:
        pairs = self._pairs
        for time, pe_op in zip(self._times, self._pe_ops, strict=True):
            pe, code = divmod(pe_op, _MAX_OPS)
            yield OpRecord(time, pe, *pairs[code])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OpLog | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __repr__(self) -> str:
        return f"<OpLog of {len(self):,} commands>"
