"""KB111 imbalance: a few PEs end well after the rest, and what differs on them.

A PE is **late** when it ends at least :data:`LATE_SHARE` of the typical (median)
kernel time after the median PE's end, and the late PEs are fewer than half of
the launch (then they are the exception, not the rule). Their **cost** to the
launch is its end minus the next-latest PE's end: what it would save if they
ended with the others.

The model cannot re-time moving work between PEs (that is another program), so
the finding claims only what the model vouches for: on each late PE, at most its
lateness and at most the part of achieved - bound that the other findings leave
unexplained (a late PE slowed by its own bug is that bug's finding, counted
once; KB106 then names only what KB111 leaves). Its **saving** is the launch's
end with each late PE's claim taken off, against the recorded end; a launch at
its bound, or a late PE whose gap other findings explain, gets none. The cost in
full, the PEs' work and stall against the median PE's, and the first line where
their steps diverge from a typical PE's are in the message.

One finding per late PE, all at the kernel's ``def`` line (the site of the work's
split), so :mod:`kbdebug.analysis.across_pes` makes them one finding naming every
late PE; its first event is where the PE's steps diverge.
"""

from __future__ import annotations

import math
import os
from statistics import median_low

import numpy as np

from emulator.trace.schema import Kind, SourceLoc
from kbdebug.analysis.finding import RULES, Finding, finding_id, line_id
from kbdebug.analysis.model import Model

__all__ = ["LATE_SHARE", "MIN_PES", "imbalance_findings"]

#: A PE ending this share of the median kernel time after the median PE's end is late.
LATE_SHARE = 0.1
#: Fewer PEs than this have no typical PE to compare with.
MIN_PES = 3


def imbalance_findings(
    model: Model, explained: dict[int, int], min_share: float
) -> tuple[list[Finding], dict[int, int]]:
    """(KB111's findings, one per late PE with a claim; each late PE's claim in cycles).

    ``explained``: per PE, the cycles of achieved - bound the other findings explain
    (re-timed together); ``min_share``: a finding's least saving, as a share of its
    PE's kernel time.
    """
    programs = model.programs
    if not model.complete or len(programs) < MIN_PES:
        return [], {}
    ends = {pe: p.end for pe, p in programs.items()}
    median_end = median_low(ends.values())
    typical = median_low(p.achieved for p in programs.values())
    margin = max(1, math.ceil(LATE_SHARE * typical))
    late = sorted(pe for pe, end in ends.items() if end - median_end >= margin)
    if not late or 2 * len(late) >= len(programs):
        return [], {}
    others = [pe for pe in programs if pe not in late]
    next_end = max(ends[pe] for pe in others)
    bounds = model.bound_lengths
    claims: dict[int, int] = {}
    for pe in late:
        prog = programs[pe]
        headroom = prog.achieved - bounds[pe] - explained.get(pe, 0)
        claims[pe] = max(0, min(ends[pe] - next_end, headroom))
    after = max(next_end, *(ends[pe] - claims[pe] for pe in late))
    saving = max(ends.values()) - after
    latest = max(late, key=lambda pe: ends[pe])
    if saving < max(1, math.ceil(min_share * max(programs[latest].achieved, 1))):
        return [], {}
    claims = {pe: c for pe, c in claims.items() if c > 0}
    shape = _Shape(model, others, ends)
    message = shape.message(late, next_end, claims)
    findings = []
    for pe in sorted(claims):
        prog = programs[pe]
        loc, start_event = _kernel_def(model, pe)
        diverge = shape.divergence(pe)
        # The debugger stops first where the PE's steps part from the others'.
        events = tuple(e for e in (diverge[0] if diverge[0] >= 0 else start_event,) if e >= 0)
        findings.append(
            Finding(
                id=finding_id("KB111", model.index, loc, pe),
                rule="KB111",
                title=RULES["KB111"],
                pe=pe,
                start=prog.start,
                end=prog.end,
                events=events,
                loc=loc,
                message=message,
                suggestion=(
                    "split the work evenly over the PEs (rows, tiles, experts per PE) or "
                    "move the late PEs' extra work to the others; step to the first event "
                    "to see where their steps part from the others'"
                ),
                saving=int(saving),
                share=saving / max(prog.achieved, 1),
                pe_saving=int(claims[pe]),
                line_id=line_id("KB111", loc, pe),
            )
        )
    return findings, claims


def _kernel_def(model: Model, pe: int) -> tuple[SourceLoc | None, int]:
    """The kernel's ``def`` line on ``pe`` and its KERNEL_START event (-1: none)."""
    c = model.index.columns
    starts = np.flatnonzero((c.kind == Kind.KERNEL_START) & (c.pe == pe))
    if not len(starts):
        return None, -1
    first = int(starts[0])
    return model.index.loc(int(c.loc[first])), first


class _Shape:
    """Each PE's busy and stalled cycles, and its steps' lines, against a typical PE's."""

    def __init__(self, model: Model, others: list[int], ends: dict[int, int]):
        self.model = model
        index = model.index
        futs = index.futures
        pes = np.asarray(futs.pe, dtype=np.int64)
        ok = (pes >= 0) & (pes < index.n_pes)
        stall = np.bincount(
            pes[ok], weights=np.asarray(futs.stall, dtype=np.int64)[ok], minlength=index.n_pes
        )
        self.stall = {pe: int(stall[pe]) for pe in model.programs}
        self.busy = {pe: max(0, p.achieved - self.stall[pe]) for pe, p in model.programs.items()}
        self.median_busy = median_low(self.busy[pe] for pe in others)
        self.median_stall = median_low(self.stall[pe] for pe in others)
        # The typical PE: the one of the others that ends at their median end.
        by_end = sorted(others, key=lambda pe: (ends[pe], pe))
        self.typical = by_end[(len(by_end) - 1) // 2]

    def _steps(self, pe: int) -> tuple[np.ndarray, np.ndarray]:
        """(events with a source line of ``pe``'s kernel, their line ids)."""
        index = self.model.index
        events = np.asarray(
            index.pe_loc_events[pe] if pe < len(index.pe_loc_events) else [], dtype=np.int64
        )
        c = index.columns
        kept = events[np.isin(c.kind[events], (Kind.ISSUE, Kind.WAIT_BEGIN))]
        return kept, c.loc[kept].astype(np.int64)

    def divergence(self, pe: int) -> tuple[int, int]:
        """(the first event of ``pe`` whose line differs from the typical PE's step at the
        same place, or where ``pe`` goes on past the typical PE's last step; its step
        number); (-1, -1) when the two PEs run the same lines."""
        events, lines = self._steps(pe)
        _, theirs = self._steps(self.typical)
        n = min(len(lines), len(theirs))
        differ = np.flatnonzero(lines[:n] != theirs[:n])
        if len(differ):
            step = int(differ[0])
        elif len(lines) > n:
            step = n
        else:
            return -1, -1
        return int(events[step]), step

    def message(self, late: list[int], next_end: int, claims: dict[int, int]) -> str:
        """What differs on the late PEs, the latest one's figures first, and what the
        saving counts of their cost."""
        model = self.model
        ends = {pe: model.programs[pe].end for pe in late}
        pe = max(late, key=lambda p: ends[p])
        if len(late) == 1:
            who = f"PE {pe} ends {ends[pe] - next_end:,} cycles"
        else:
            who = "PEs " + ", ".join(map(str, late)) + f" end up to {ends[pe] - next_end:,} cycles"
        text = (
            f"{who} after the other PEs (their last at cycle {next_end:,}): PE {pe} worked "
            f"{self.busy[pe]:,} cycles against the median PE's {self.median_busy:,}"
        )
        if self.median_busy:
            text += f" ({self.busy[pe] / self.median_busy:.1f}x)"
        text += f" and stalled {self.stall[pe]:,} against {self.median_stall:,}"
        event, step = self.divergence(pe)
        if event >= 0:
            loc = model.index.loc(int(model.index.columns.loc[event]))
            where = "?" if loc is None else f"{os.path.basename(loc.file) or loc.file}:{loc.line}"
            _, theirs = self._steps(self.typical)
            if step >= len(theirs):
                text += (
                    f"; its steps match PE {self.typical}'s for {step:,} steps, then it goes "
                    f"on at {where}"
                )
            else:
                text += f"; its steps part from PE {self.typical}'s at step {step:,}, at {where}"
        return text + (
            f"; the saving counts the {claims.get(pe, 0):,} cycles of it below PE {pe}'s "
            "critical-path bound that no other finding explains"
        )
