"""What the mesh pane shows of each PE: its kernel's span, stall, end and efficiency, and
its stall share over each stretch of the launch, as numpy arrays built once per trace.

The stall of every PE is one sorted array of intervals (a PE's stalled tl.waits, keyed
by PE then cycle), so the stall share of all PEs over any columns of cycles is one
``searchsorted``; the shares are computed once per strip width (a resize), never per
repaint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbdebug.analysis.model import PEBound
from kbdebug.replay import Replay
from kbdebug.ui.panes.lanes import kernel_ends

#: The orders the mesh pane's rows cycle through.
SORTS = ("pe", "end", "stall", "efficiency")


@dataclass(frozen=True)
class PEFigures:
    """One PE's row: when its kernel started and ended, how much it stalled."""

    pe: int
    start: int
    end: int
    stalled: int
    #: bound / achieved from the analysis; None until it is in, or when not claimed.
    efficiency: float | None

    @property
    def stall_share(self) -> float:
        """The share of its kernel's cycles the PE spent stalled in waits."""
        return self.stalled / max(self.end - self.start, 1)


class MeshData:
    """Every PE's figures and stall share per column of the launch, from one trace."""

    def __init__(self, replay: Replay) -> None:
        index = replay.index
        c, f = index.columns, index.futures
        #: The index the figures are of.
        self.index = index
        self.n_pes = index.n_pes
        last = int(c.time[-1]) if index.n_events else 0
        #: The launch's last cycle: the strip spans 0 .. end_time.
        self.end_time = max(int(replay.end_time), last, 1)
        #: (rows, cols) of the mesh, from the trace header (1 x n_pes when it says none).
        self.shape = mesh_shape(index.header, self.n_pes)
        spans = kernel_ends(replay)
        self.start = np.array([spans.get(p, (0, 0, ""))[0] for p in range(self.n_pes)], np.int64)
        # A PE that ran no kernel ends at 0: last in the order by end, never "ends last".
        self.end = np.array([spans.get(p, (0, 0, ""))[1] for p in range(self.n_pes)], np.int64)
        #: Whether each PE ran a kernel (one that did not has no row figures).
        self.ran = np.array([p in spans for p in range(self.n_pes)], dtype=bool)
        # Stalled waits, and waits that never ended (deadlock, cut), as the kernel lane.
        stalled = np.flatnonzero((f.wait_begin >= 0) & ((f.stall > 0) | (f.wait_end < 0)))
        begin = c.time[f.wait_begin[stalled]].astype(np.int64)
        ended = f.wait_end[stalled]
        finish = np.where(ended >= 0, c.time[np.maximum(ended, 0)], self.end_time)
        pe = c.pe[f.wait_begin[stalled]].astype(np.int64)
        keep = (pe >= 0) & (pe < self.n_pes)
        self._build(pe[keep], begin[keep], finish[keep].astype(np.int64))
        #: Stalled cycles per PE over the whole launch.
        whole = self._covered(self._keys(np.array([0, self.end_time])))
        self.stalled = np.rint(whole[:, 1] - whole[:, 0]).astype(np.int64)
        self.efficiency = np.full(self.n_pes, np.nan)
        #: Whether the analysis's bounds are in (until then no efficiency is known).
        self.bounds_in = False
        self._shares: dict[int, np.ndarray] = {}
        self._orders: dict[str, np.ndarray] = {}

    def _build(self, pe: np.ndarray, begin: np.ndarray, finish: np.ndarray) -> None:
        """Sort the intervals by PE then start, in one key space (``pe * span + cycle``),
        make each PE's disjoint, and keep their running total."""
        self._span = self.end_time + 2
        lo = pe * self._span + np.clip(begin, 0, self.end_time)
        hi = pe * self._span + np.clip(finish, 0, self.end_time)
        order = np.argsort(lo, kind="stable")
        lo, hi = lo[order], np.maximum(hi[order], lo[order])
        # An interval that starts inside an earlier one of the same PE covers only what
        # lies past it (an earlier PE's intervals end below this PE's keys).
        if len(hi) > 1:
            reach = np.maximum.accumulate(hi)
            lo[1:] = np.maximum(lo[1:], reach[:-1])
            hi = np.maximum(hi, lo)
        self._lo, self._hi = lo, hi
        self._before = np.concatenate([[0], np.cumsum(hi - lo)])

    def _keys(self, edges: np.ndarray) -> np.ndarray:
        """``edges`` (cycles) as keys, one row per PE."""
        pes = np.arange(self.n_pes, dtype=np.float64)[:, None]
        return pes * self._span + np.asarray(edges, dtype=np.float64)[None, :]

    def _covered(self, keys: np.ndarray) -> np.ndarray:
        """Stalled cycles of each row's PE from cycle 0 to each key's cycle (``_keys``)."""
        lo, hi, before = self._lo, self._hi, self._before
        if not len(lo):
            return np.zeros(keys.shape)
        k = np.searchsorted(lo, keys, side="right") - 1
        kc = np.maximum(k, 0)
        total = before[kc] + np.clip(keys - lo[kc], 0, hi[kc] - lo[kc])
        # Less the earlier PEs' intervals: the running total at this PE's first interval.
        pes = np.arange(self.n_pes, dtype=np.int64)[:, None]
        first = np.searchsorted(lo, pes * self._span, side="left")
        return np.where(k >= first, total - before[first], 0.0)

    def shares(self, width: int) -> np.ndarray:
        """(n_pes, width): each PE's stalled share of each of ``width`` equal columns of
        0 .. end_time; NaN where its kernel did not run."""
        width = max(int(width), 1)
        shares = self._shares.get(width)
        if shares is None:
            edges = np.linspace(0.0, float(self.end_time), width + 1)
            covered = self._covered(self._keys(edges))
            shares = np.diff(covered, axis=1) / np.maximum(np.diff(edges), 1e-9)[None, :]
            outside = (edges[None, 1:] <= self.start[:, None]) | (
                edges[None, :-1] >= self.end[:, None]
            )
            shares[outside | ~self.ran[:, None]] = np.nan
            self._shares = {width: shares}  # one width at a time: the pane's own
        return shares

    def use_bounds(self, bounds: list[PEBound] | None) -> None:
        """Take each PE's end and efficiency from the analysis's bounds (the figures
        report gives)."""
        self.bounds_in = self.bounds_in or bounds is not None
        for bound in bounds or []:
            if 0 <= bound.pe < self.n_pes:
                self.end[bound.pe] = bound.end
                self.start[bound.pe] = bound.start
                self.efficiency[bound.pe] = np.nan if bound.efficiency is None else bound.efficiency
        self._shares.clear()
        self._orders.clear()

    def figures(self, pe: int) -> PEFigures:
        """PE ``pe``'s row figures."""
        eff = float(self.efficiency[pe])
        return PEFigures(
            pe,
            int(self.start[pe]),
            int(self.end[pe]),
            int(self.stalled[pe]),
            None if np.isnan(eff) else eff,
        )

    def stall_shares(self) -> np.ndarray:
        """Each PE's stalled share of its kernel's cycles."""
        return self.stalled / np.maximum(self.end - self.start, 1)

    def order(self, sort: str) -> np.ndarray:
        """The PEs in ``sort`` order: by number, latest end first, most stalled first, or
        least efficient first (an efficiency not known last); ties by PE number."""
        order = self._orders.get(sort)
        if order is None:
            pes = np.arange(self.n_pes)
            if sort == "end":
                order = np.lexsort((pes, -self.end))
            elif sort == "stall":
                order = np.lexsort((pes, -self.stall_shares()))
            elif sort == "efficiency":
                eff = np.where(np.isnan(self.efficiency), np.inf, self.efficiency)
                order = np.lexsort((pes, eff))
            else:
                order = pes
            self._orders[sort] = order = order.astype(np.int64)
        return order

    def position(self, pe: int) -> str:
        """Where ``pe`` sits in a 2-D mesh (``r1c3``), "" in a row of PEs."""
        rows, cols = self.shape
        return f"r{pe // cols}c{pe % cols}" if rows > 1 and cols > 0 else ""


def mesh_shape(header: dict, n_pes: int) -> tuple[int, int]:
    """(rows, cols) of the mesh the trace header gives; (1, n_pes) when it gives none that
    holds every PE."""
    mesh = header.get("mesh") if isinstance(header, dict) else None
    if isinstance(mesh, (list, tuple)) and len(mesh) == 2:
        rows, cols = mesh
        if isinstance(rows, int) and isinstance(cols, int) and rows > 0 and cols > 0:
            if rows * cols >= n_pes:
                return rows, cols
    return 1, max(n_pes, 1)
