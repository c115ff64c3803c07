"""A failed check, pointed at its tile: the first stored block that differs from its
reference, where it was stored (line, PE, iteration), the largest error, and the loads
that fed it, by tensor slice.

Pure (no Textual, no printing). The reference is a function of a block, as a scenario
gives it (``Scenario(reference=...)``: ``reference(tensor name, bounds)`` returns what
the block should hold, and optionally the input slices it is computed from); the
values stored are read back from the HBM the run left (``read(addr, shape, dtype)``).
Stores are taken in the order they were issued; the loads that fed a store are those
its PE waited for since its previous store (the trace names the direct operands of a
command, not what a computed tensor came from: a tile loop's loads, waited in the
iteration that stores the tile). When the reference names the slices it used, each
waited slice it did not use is paired with one it used and the kernel did not wait
for: an off-by-one prefetch index reads ``waited K[192:256, :] where the reference used
K[128:192, :]``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kbdebug.replay.slices import TensorSlice
from kbdebug.replay.values import StoreValue, Values, WaitedValue

__all__ = ["WrongBlock", "first_wrong_block"]

#: A reference: (tensor name, per-dimension (start, stop)) -> the block's reference
#: (anything with ``want`` and optionally ``reads``, ``rtol``, ``atol``), or None.
Reference = Callable[[str, tuple[tuple[int, int], ...]], Any]
#: The run's HBM: (addr, shape, dtype name) -> the values there.
Read = Callable[[int, tuple[int, ...], str], np.ndarray]

DEFAULT_RTOL = DEFAULT_ATOL = 2e-2


@dataclass(frozen=True)
class WrongBlock:
    """The first stored block that differs from its reference."""

    store: StoreValue
    #: How many times the store's PE stored at its line before (0: the first time).
    iteration: int
    #: The largest absolute error, and where in the tensor it is.
    error: float
    at: tuple[int, ...]
    got: float
    want: float
    #: The loads and receives its PE waited for since its previous store.
    fed_by: tuple[WaitedValue, ...]
    #: The input slices the reference says it used (empty when it does not say).
    reads: tuple[str, ...]
    #: Where the app opens: just after the store's issue event.
    position: int

    def mismatches(self) -> list[tuple[str, str]]:
        """(slice waited, slice the reference used) for each waited slice the reference
        did not use, paired in order with one of the same tensor it used and was not
        waited for."""
        waited = [str(w.slice) for w in self.fed_by if w.slice is not None]
        used = [_spaced(r) for r in self.reads]
        extra = [w for w in waited if _bare(w) not in {_bare(u) for u in used}]
        missing = [u for u in used if _bare(u) not in {_bare(w) for w in waited}]
        out = []
        for w in extra:
            tensor = w.split("[", 1)[0]
            match = next((u for u in missing if u.split("[", 1)[0] == tensor), None)
            if match is not None:
                missing.remove(match)
                out.append((w, match))
        return out

    def stop_text(self) -> str:
        """Where the app stops for it: ``the first wrong block O[16:32, :] (store at
        kernel.py:22 on PE 0)``."""
        s = self.store
        line = f"{s.loc.file.rsplit('/', 1)[-1]}:{s.loc.line} " if s.loc is not None else ""
        return f"the first wrong block {s.where} (store at {line}on PE {s.pe})"

    def lines(self) -> list[str]:
        """What ``kbdebug run`` prints under a failed check."""
        s = self.store
        where = f" at {s.loc.file}:{s.loc.line} ({s.loc.function})" if s.loc is not None else ""
        index = f"{s.slice.tensor.name}[{', '.join(map(str, self.at))}]"
        out = [
            f"first wrong block: {s.where}, stored{where} on PE {s.pe}, "
            f"iteration {self.iteration} (that store's {_ordinal(self.iteration + 1)} time "
            f"on PE {s.pe})",
            f"  largest error {self.error:.4g} at {index}: "
            f"got {self.got:.4g}, want {self.want:.4g}",
        ]
        mismatches = self.mismatches()
        if mismatches:
            for waited, used in mismatches:
                out.append(f"  its loads: waited {waited} where the reference used {used}")
        elif self.fed_by:
            shown = ", ".join(_fed(w) for w in self.fed_by[:6])
            more = f" and {len(self.fed_by) - 6} more" if len(self.fed_by) > 6 else ""
            same = " (the slices the reference used)" if self.reads else ""
            out.append(f"  its loads{same}: waited {shown}{more}")
        else:
            out.append(f"  its loads: none waited on PE {s.pe} since its previous store")
        return out


def first_wrong_block(replay: Any, reference: Reference, read: Read) -> WrongBlock | None:
    """The first store (in issue order) whose block is not within tolerance of
    ``reference``, None when every block the reference knows is right (or the trace
    names no tensor: a trace from before format 1.5)."""
    values = Values.of(replay)
    index = replay.index
    stores = [s for s in values.stores() if s.op == "store" and s.slice is not None]
    if not stores:
        return None
    seen: Counter[tuple[int, Any]] = Counter()
    for store in stores:
        key = (store.pe, None if store.loc is None else (store.loc.file, store.loc.line))
        iteration = seen[key]
        seen[key] += 1
        ref = reference(store.slice.tensor.name, store.slice.bounds)
        if ref is None:
            continue
        want = np.asarray(getattr(ref, "want", ref), dtype=np.float64)
        got = np.asarray(read(store.addr, store.shape, store.dtype), dtype=np.float64)
        if got.size != want.size:
            continue
        got, want = got.reshape(-1), want.reshape(-1)
        rtol = getattr(ref, "rtol", DEFAULT_RTOL)
        atol = getattr(ref, "atol", DEFAULT_ATOL)
        if np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
            continue
        error = np.abs(got - want)
        error = np.where(np.isnan(error), np.inf, error)
        worst = int(np.argmax(error))
        issue = int(index.commands.issue[store.cmd])
        return WrongBlock(
            store=store,
            iteration=iteration,
            error=float(error[worst]),
            at=_in_tensor(store.slice, worst),
            got=float(got[worst]),
            want=float(want[worst]),
            fed_by=tuple(_fed_by(values, index, store, issue, stores)),
            reads=tuple(getattr(ref, "reads", ()) or ()),
            position=issue + 1,
        )
    return None


def _fed_by(
    values: Values, index: Any, store: StoreValue, issue: int, stores: list[StoreValue]
) -> list[WaitedValue]:
    """What ``store``'s PE waited for between its previous store's issue and this one's."""
    before = [
        int(index.commands.issue[s.cmd])
        for s in stores
        if s.pe == store.pe and int(index.commands.issue[s.cmd]) < issue
    ]
    since = max(before, default=-1)
    ends = index.futures.wait_end
    return [
        w
        for w in values.waited()
        if w.pe == store.pe and w.future >= 0 and since < int(ends[w.future]) < issue
    ]


def _in_tensor(block: TensorSlice, offset: int) -> tuple[int, ...]:
    """The element ``offset`` (row-major) of ``block`` as an index of its tensor."""
    inside = np.unravel_index(offset, block.shape)
    return tuple(int(start + i) for (start, _), i in zip(block.bounds, inside, strict=True))


def _fed(waited: WaitedValue) -> str:
    where = f" ({waited.wait_loc.file}:{waited.wait_loc.line})" if waited.wait_loc else ""
    return f"{waited.where or waited.op}{where}"


def _bare(text: str) -> str:
    return "".join(text.split())


def _spaced(text: str) -> str:
    """``K[128:192,:]`` as the debugger writes it: ``K[128:192, :]``."""
    name, bracket, rest = _bare(text).partition("[")
    if not bracket:
        return name
    return f"{name}[{', '.join(rest.rstrip(']').split(','))}]"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
