"""Trace and EventTables: what the trace reader hands back."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from emulator.trace.schema import FIELDS, Kind, SourceLoc


@dataclass
class Trace:
    """A whole trace as read from a .kbt file.

    ``events`` holds one list per event, ``[kind, time, pe, *fields]`` in file
    order, with ``time`` absolute, str fields as indices into ``strings``, loc
    fields as indices into ``locs`` (-1 for None), shapes as lists of ints and
    bools as bools. ``decode`` turns one back into what was passed to ``emit``.
    """

    header: dict[str, Any]  # {} if the file ends inside the header
    version: tuple[int, int] | None  # None if the file ends inside the header
    sources: dict[str, str]
    strings: list[str]
    locs: list[SourceLoc]
    events: list[list[Any]]
    # {"status", "events", "end_time", "error", "error_loc"} with error_loc a
    # SourceLoc or None; None if the run's footer was never written.
    footer: dict[str, Any] | None
    truncated: bool  # the footer is missing: the writer was killed or never ended
    truncated_at: int | None  # byte offset where the whole records end, if truncated
    source: str = "<trace>"  # the path read, or "<bytes>": for errors found later
    # Format 1.5: the digest of each future's tensor (emulator.trace.digests.Digest) by
    # future id, and the named tensors of the header (TensorDef), both empty before 1.5.
    digests: dict[int, Any] = field(default_factory=dict)
    tensors: list[Any] = field(default_factory=list)

    def decode(self, i: int) -> tuple[Any, ...]:
        """Event ``i`` as ``(Kind, time, pe, *fields)`` with strings, locs and shapes resolved."""
        record = self.events[i]
        kind = Kind(record[0])
        fields = [kind, record[1], record[2]]
        strings, locs = self.strings, self.locs
        for (_, tag), value in zip(FIELDS[kind], record[3:], strict=True):
            if tag == "str":
                value = strings[value]
            elif tag == "loc":
                value = None if value == -1 else locs[value]
            elif tag == "shape":
                value = tuple(value)
            fields.append(value)
        return tuple(fields)

    def iter_decoded(self) -> Iterator[tuple[Any, ...]]:
        """Every event, decoded as by ``decode``."""
        for i in range(len(self.events)):
            yield self.decode(i)


@dataclass
class EventTables:
    """A batch of events as int64 arrays, for a caller that indexes a trace.

    ``kinds`` holds each event's kind, in file order. ``tables`` maps each kind in
    the batch to ``(at, rows)``: the positions of its events in the batch, and their
    records as the rows of an int64 array, ``[kind, time, pe, *fields]`` as
    ``Trace.events`` holds them (time absolute, ids as ids, bools as 0 or 1) but for
    an ISSUE's shape, which is there the index of the shape in ``shapes``.
    """

    kinds: np.ndarray
    tables: dict[int, tuple[np.ndarray, np.ndarray]]
    shapes: list[tuple[int, ...]]

    def __len__(self) -> int:
        return len(self.kinds)

    @classmethod
    def from_records(cls, records: Sequence[Sequence[Any]]) -> EventTables:
        """The tables of valid event records, lists or tuples ``[kind, time, pe, *fields]``.

        Raises OverflowError if an int does not fit in an int64.
        """
        n = len(records)
        kinds = np.fromiter(map(_first, records), dtype=np.int8, count=n)
        order = np.argsort(kinds, kind="stable")
        bounds = np.searchsorted(kinds[order], _KIND_EDGES)
        tables = {}
        shapes: list[tuple[int, ...]] = []
        for kind in np.flatnonzero(np.diff(bounds)).tolist():
            at = order[bounds[kind] : bounds[kind + 1]]
            group = itemgetter(*at.tolist())(records) if len(at) > 1 else (records[at[0]],)
            if kind == Kind.ISSUE:
                rows, shapes = _issue_rows(group)
            else:
                width = _WIDTHS[kind]
                rows = np.fromiter(
                    chain.from_iterable(group), dtype=np.int64, count=len(group) * width
                ).reshape(len(group), width)
            tables[kind] = (at, rows)
        return cls(kinds, tables, shapes)


_first = itemgetter(0)
_KIND_EDGES = np.arange(max(Kind) + 2)
_WIDTHS = {int(kind): 3 + len(fields) for kind, fields in FIELDS.items()}
_SHAPE_AT = 3 + [name for name, _ in FIELDS[Kind.ISSUE]].index("shape")
_issue_shape = itemgetter(_SHAPE_AT)
_issue_ints = itemgetter(*(at for at in range(_WIDTHS[Kind.ISSUE]) if at != _SHAPE_AT))


def _issue_rows(
    issues: Sequence[Sequence[Any]],
) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """ISSUE records as rows with their shapes as ids, and the shapes those ids index."""
    m = len(issues)
    ints = np.fromiter(
        chain.from_iterable(map(_issue_ints, issues)),
        dtype=np.int64,
        count=m * (_WIDTHS[Kind.ISSUE] - 1),
    ).reshape(m, -1)
    keys = list(map(tuple, map(_issue_shape, issues)))
    ids = {shape: i for i, shape in enumerate(dict.fromkeys(keys))}
    rows = np.empty((m, _WIDTHS[Kind.ISSUE]), dtype=np.int64)
    rows[:, :_SHAPE_AT] = ints[:, :_SHAPE_AT]
    rows[:, _SHAPE_AT] = np.fromiter(map(ids.__getitem__, keys), dtype=np.int64, count=m)
    rows[:, _SHAPE_AT + 1 :] = ints[:, _SHAPE_AT:]
    return rows, list(ids)
