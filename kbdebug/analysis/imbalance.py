"""KB111 imbalance: a few PEs do more work than the rest and end after them.

A PE is **late** when it ends at least :data:`LATE_SHARE` of the typical (median)
kernel time after the median PE's end, and it is **imbalanced** when it is late and
its **work** (the cycles its steps hold an engine, a channel or a link, plus an issue
slot per transfer) is at least :data:`WORK_RATIO` times the median PE's. A PE whose
messages others wait on is late by the end of the PEs it **holds back** (those whose
last long receive stall waited on it, directly or through receives), against the
PEs' ends less their receive stalls: a split-K reduction's root with the remainder
ends first, and the launch ends when it lets the others. A PE late
only by where it sits in a dependency chain (the last stage of a pipeline, the root
of a reduction tree) does the same work as the others and is not imbalanced: its
lateness is the chain's critical path, which the per-PE bound already counts. The
imbalanced PEs must be fewer than half of the launch (then they are the exception).

The work comes in **units**: the iterations of the late PE's most repeated command
(each PE's count of it), or, when the late PEs do not run it more often than a
typical PE, work cycles. An even split gives every PE at most ``ceil(total units /
PEs)`` of them, and a PE's time (and bound) grows by the late PEs' time (and bound)
per extra unit over a typical PE's:

- the **balanced bound** (:attr:`Imbalance.balanced_end`) is the least end cycle the
  launch could reach with that split: the latest bound end of the PEs that are not
  imbalanced, or a PE's bound with the even share of units, whichever is later. The
  launch's efficiency is taken against it
  (:func:`kbdebug.analysis.model.launch_efficiency`), so a launch whose PEs each sit
  at their own bound, the work split unevenly, reads below 100 %;
- the **spread end** (:attr:`Imbalance.spread_end`) is the same with the recorded
  kernel times: when the launch would end were the late PEs' extra work moved to
  the others, as the kernel runs today; and no sooner than the launch re-timed with
  that split (:func:`kbdebug.analysis.retime.simulate_launch`: the late PEs without
  their last iterations over the even share, the others slower by theirs), which keeps
  what the PEs wait on each other for (a reduction chain's receive, add and send). A
  late PE whose runs of the line come between its messages (a pipeline's stage) does
  them per message: they move with the message, a share of each to the other stages
  (:mod:`kbdebug.analysis.imbalance_rounds`), so every later stage waits for them.

The PEs a late PE holds back stand for no end of their own in either: theirs follows
the late PE's, which ends sooner by its units over the even share at its own cycles
per unit, the chain's tail after it kept (for the bound, its bound per unit down to
the fewest units an even split leaves a PE).

KB111's **saving** is the recorded end minus the spread end, never more than the
end the other findings' fixes leave (re-timed together) minus the balanced bound:
with what those findings explain it stays within end - balanced bound, and a
launch at its balanced bound gets none. A late PE's own gain (``pe_saving``) is its
end minus the spread end: the work leaves the PE, so its per-PE bound, which takes
its work as given, does not cap it. A late PE's own gap to its per-PE bound
left unexplained is KB111's story (returned as its claim, so KB106 does not name it
twice); a late PE slowed by its own bug, with no more work, gets that bug's finding.

One finding per imbalanced PE, all at the kernel's ``def`` line (the site of the
work's split), so :mod:`kbdebug.analysis.across_pes` makes them one finding naming
every late PE; its first event is where the PE's steps diverge from a typical PE's.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field
from statistics import median_low

import numpy as np

from emulator.trace.schema import Kind, SourceLoc
from kbdebug.analysis.finding import RULES, Finding, finding_id, line_id
from kbdebug.analysis.imbalance_rounds import RoundSplit, round_split_edits
from kbdebug.analysis.model import COMPUTE, LOAD, NEVER, OPAQUE, RECV, SEND, STORE, WAIT, Model
from kbdebug.analysis.retime import simulate_launch

__all__ = [
    "LATE_SHARE",
    "MIN_PES",
    "WORK_RATIO",
    "Imbalance",
    "imbalance_findings",
    "imbalance_of",
]

#: A PE ending this share of the median kernel time after the median PE's end is late.
LATE_SHARE = 0.1
#: A late PE is imbalanced when its work is at least this many times the median PE's.
WORK_RATIO = 1.25
#: Fewer PEs than this have no typical PE to compare with.
MIN_PES = 3


@dataclass(frozen=True)
class Imbalance:
    """The imbalanced PEs of a launch and what an even split of the work allows."""

    #: The late PEs with more work than the median PE, and every other PE.
    late: tuple[int, ...]
    others: tuple[int, ...]
    #: Per PE: its work in cycles (engine, channel and link holds, issue slots).
    work: dict[int, int]
    median_work: int
    #: Per PE: its work's units (``unit_line``'s count, or its work cycles).
    units: dict[int, int]
    #: The line whose iterations are the units (a location id; -1: work cycles).
    unit_line: int
    #: The most units a PE holds with the work split evenly.
    even_units: int
    #: A PE that is not imbalanced, with the median units (the rates are against it).
    typical: int
    #: The least end cycle of the launch with the work split evenly (its bound).
    balanced_end: int
    #: The end cycle of the launch with the work split evenly, as the kernel runs now.
    spread_end: int
    #: Per late PE: the end cycle of the launch it holds back, its own or, when PEs wait
    #: on its messages (directly or through receives), the latest of theirs.
    held_ends: dict[int, int] = field(default_factory=dict)
    #: When a late PE's extra work comes round by round between its messages (a
    #: pipeline's stage): the split of each round's units the spread end re-times.
    per_round: RoundSplit | None = None


def imbalance_of(model: Model) -> Imbalance | None:
    """The launch's imbalance; None when no late PE does clearly more work (or the run
    did not complete, or has fewer than :data:`MIN_PES` PEs)."""
    programs = model.programs
    if not model.complete or len(programs) < MIN_PES:
        return None
    ends = {pe: p.end for pe, p in programs.items()}
    median_end = median_low(ends.values())
    margin = max(1, math.ceil(LATE_SHARE * median_low(p.achieved for p in programs.values())))
    work = {pe: _work(model, pe) for pe in programs}
    median_work = median_low(work.values())
    heavy = [pe for pe in programs if work[pe] >= WORK_RATIO * max(median_work, 1)]
    # A PE with more work may end first and still set the launch's end: the PEs waiting
    # on its messages (a split-K reduction's root) end when it lets them.
    held, stalled = _held(model, heavy, margin)
    held_ends = {pe: max(ends[q] for q in held[pe]) for pe in heavy}
    # Against the PEs' own ends: a PE waiting on the late PE's messages ends with it, so
    # where PEs wait on receives, what they end at without those stalls is the yardstick.
    if any(len(held[pe]) > 1 for pe in heavy):
        median_end = median_low(ends[pe] - stalled.get(pe, 0) for pe in programs)
    late = tuple(sorted(pe for pe in heavy if held_ends[pe] - median_end >= margin))
    if not late or 2 * len(late) >= len(programs):
        return None
    others = tuple(pe for pe in sorted(programs) if pe not in late)
    latest = max(late, key=lambda pe: (held_ends[pe], pe))
    unit_line, units = _units(model, late, latest, work)
    # A typical PE: the middle one of the others by units, then by kernel time.
    by_units = sorted(others, key=lambda pe: (units[pe], programs[pe].achieved, pe))
    typical = by_units[(len(by_units) - 1) // 2]
    extra = sum(units[pe] - units[typical] for pe in late)
    if extra <= 0:
        return None
    total = sum(units.values())
    even = math.ceil(total / len(programs))
    bounds = model.bound_lengths

    # The PEs a late PE holds back end with it: their recorded ends and bounds wait on
    # its work, which the split moves, so they stand for no end of their own.
    waiting = {q for pe in late for q in held[pe] if q != pe}

    def rate_of(length, run: bool) -> float:
        """The cycles of ``length`` (``run``: the kernel times, else the bounds) a unit of
        work takes: the late PEs' length per extra unit over the typical PE's."""
        if typical not in waiting:
            return max(0.0, sum(length(pe) - length(typical) for pe in late) / extra)
        # The typical PE's length waits on the late PEs: as the kernel runs, against its
        # run less its receive stalls (which leaves out the start-up both pay); for the
        # bound, the late PEs' own per unit (the most a unit can take of it).
        rate = sum(length(pe) for pe in late) / max(sum(units[pe] for pe in late), 1)
        if run:
            own = length(typical) - stalled.get(typical, 0)
            per_unit = sum(length(pe) - own for pe in late) / extra
            rate = per_unit if per_unit > 0 else rate
        return rate

    def split_ends(length, run: bool) -> dict[int, float]:
        """Each PE's end with the work split evenly, its length grown (or, on a late PE,
        shrunk) by ``rate_of(length, run)`` per unit; a PE that is not imbalanced never
        gives units away."""
        rate = rate_of(length, run)
        out = {}
        for pe, prog in programs.items():
            delta = even - units[pe]
            if pe not in late:
                delta = max(0, delta)
            out[pe] = prog.start + length(pe) + delta * rate
        return out

    bound_end = max(p.start + bounds[pe] for pe, p in programs.items())
    with_bounds = split_ends(lambda pe: bounds[pe], run=False)
    kept = [pe for pe in others if pe not in waiting] or list(late)
    # Some PE holds the even share: the least of the PEs' bounds with it is a bound, and
    # no PE that keeps its work ends before its own bound.
    balanced = max(
        max((programs[pe].start + bounds[pe] for pe in kept if pe not in late), default=0),
        math.floor(min(v for pe, v in with_bounds.items() if pe not in waiting)),
    )
    by_split = split_ends(lambda pe: programs[pe].achieved, run=True)
    spread = math.ceil(max(v for pe, v in by_split.items() if pe not in waiting))
    run_rate = rate_of(lambda pe: programs[pe].achieved, run=True)
    for pe in late:
        if len(held[pe]) == 1:
            continue
        # Held back through receives: the launch ends that long after the late PE's own
        # end, less its share of units gone at its own cycles per unit. Its bound gives
        # up at most its bound per unit for each unit down to the least an even split
        # leaves a PE (a lower bound's side); its run, the units over the even share.
        prog, units_here = programs[pe], max(units[pe], 1)
        tail = held_ends[pe] - prog.end
        bound_tail = max(programs[q].start + bounds[q] for q in held[pe]) - prog.start
        fewest = total // len(programs)
        balanced = max(
            balanced,
            math.floor(prog.start + bound_tail - (units[pe] - fewest) * bounds[pe] / units_here),
        )
        gone = max(0, units[pe] - even) * run_rate
        spread = max(spread, math.ceil(prog.end - gone + tail))
    # The PEs' ends moved one by one leave out what they wait on each other for (a
    # reduction chain's receive, add and send): re-timed together with each PE's work
    # moved, the launch ends no sooner than that.
    # A late PE's work done round by round between its messages (a pipeline's stage)
    # moves with its round: another PE does it on that message, and every PE after it
    # in the chain waits for it.
    per_round = round_split_edits(model, late, units, unit_line, stalled)
    if per_round is not None:
        lengths, _ = simulate_launch(model, per_round.edits, model.recorded)
        retimed = max(p.start + lengths[pe] for pe, p in programs.items())
    else:
        retimed = _retimed_end(model, late, units, even, unit_line, run_rate)
    if retimed is not None:
        spread = max(spread, retimed)
    return Imbalance(
        late=late,
        others=others,
        work=work,
        median_work=median_work,
        units=units,
        unit_line=unit_line,
        even_units=even,
        typical=typical,
        balanced_end=min(bound_end, balanced),
        spread_end=min(model.end, spread),
        held_ends={pe: held_ends[pe] for pe in late},
        per_round=per_round,
    )


def _retimed_end(
    model: Model,
    late: tuple[int, ...],
    units: dict[int, int],
    even: int,
    unit_line: int,
    rate: float,
) -> int | None:
    """The launch's end re-timed, all PEs together, with the work split evenly: a late
    PE runs without its steps of its last iterations over the even share (an iteration
    ends at a step of the unit line), another PE takes ``rate`` cycles per unit it gains
    on its first compute step from the line's last step on (its loop's last); what
    follows (a receive, a send) re-times after them. None when the units are not a
    line's iterations, a PE's steps of the line cannot be told apart by iteration, or
    the dropped steps send a message."""
    if unit_line < 0 or rate <= 0:
        return None
    locs = np.asarray(model.index.commands.loc, dtype=np.int64)
    edits = {}
    for pe, prog in model.programs.items():
        delta = even - units[pe]
        if pe not in late:
            delta = max(0, delta)
        if delta == 0:
            continue
        kinds = np.frombuffer(prog.kind, dtype=np.int8)
        cmds = np.asarray(prog.cmd, dtype=np.int64)
        valid = (cmds >= 0) & (cmds < len(locs)) & (kinds != WAIT)
        on_line = valid.copy()
        on_line[valid] = locs[cmds[valid]] == unit_line
        if delta > 0:
            # The loop's last compute: the first at or after the line's last step.
            lines = np.flatnonzero(on_line)
            work = np.flatnonzero(np.isin(kinds, (COMPUTE, OPAQUE)))
            work = work[work >= lines[-1]] if len(lines) else work[:0]
            if not len(work):
                return None
            cycles = np.asarray(prog.cycles, dtype=np.int64).copy()
            cycles[work[0]] += round(delta * rate)
            edits[pe] = (range(len(prog)), None, cycles)
            continue
        steps = np.flatnonzero(on_line)
        per_unit, rest = divmod(len(steps), max(units[pe], 1))
        if rest or not per_unit:
            return None
        # The dropped iterations: after the last step of the one that stays last, through
        # the last step of the line; waits on commands they issued go with them.
        first = int(steps[even * per_unit - 1]) + 1 if even else 0
        last = int(steps[-1])
        if np.any(kinds[first : last + 1] == SEND):
            return None  # another PE waits on what it sends there
        dropped = set(cmds[first : last + 1][kinds[first : last + 1] != WAIT].tolist())
        keep = np.ones(len(prog), dtype=bool)
        keep[first : last + 1] = False
        keep &= ~((kinds == WAIT) & np.isin(cmds, list(dropped)))
        edits[pe] = (np.flatnonzero(keep).tolist(), None, None)
    lengths, _ = simulate_launch(model, edits, model.recorded)
    return max(p.start + lengths[pe] for pe, p in model.programs.items())


def _held(model: Model, pes: list[int], margin: int) -> tuple[dict[int, set[int]], dict[int, int]]:
    """(per PE of ``pes``: itself and the PEs whose end waits on it, directly or through
    receives; per PE, the cycles it stalled on receives). A PE whose last receive wait
    stalling at least ``margin`` cycles waited on a message of another is held back by
    that sender (the rest of its run follows)."""
    held_by: dict[int, set[int]] = {}
    stalled: dict[int, int] = {}
    if not pes:
        return {}, stalled
    for pe, prog in model.programs.items():
        last = None
        for s, (k, c) in enumerate(zip(prog.kind, prog.cmd, strict=True)):
            if k == WAIT and prog.at[s] < prog.delivery.get(c, -1) < NEVER:
                stall = prog.delivery[c] - prog.at[s]
                stalled[pe] = stalled.get(pe, 0) + stall
                if stall >= margin:
                    last = c
        sender = model.sender.get(prog.match.get(last, -1)) if last is not None else None
        if sender is not None and sender != pe:
            held_by.setdefault(sender, set()).add(pe)
    out = {}
    for pe in pes:
        seen, todo = {pe}, [pe]
        while todo:
            for q in held_by.get(todo.pop(), ()):
                if q not in seen:
                    seen.add(q)
                    todo.append(q)
        out[pe] = seen
    return out, stalled


def _work(model: Model, pe: int) -> int:
    """Cycles ``pe``'s steps hold an engine, a channel or a link, plus an issue slot per
    transfer: what the PE has to do, however well it overlaps it."""
    prog = model.programs[pe]
    if not len(prog):
        return 0
    kinds = np.frombuffer(prog.kind, dtype=np.int8)
    cycles = np.frombuffer(prog.cycles, dtype=np.int64)
    held = int(cycles[np.isin(kinds, (LOAD, STORE, SEND, COMPUTE, OPAQUE))].sum())
    return held + prog.hw.issue * int(np.isin(kinds, (LOAD, STORE, SEND, RECV)).sum())


def _units(
    model: Model, late: tuple[int, ...], latest: int, work: dict[int, int]
) -> tuple[int, dict[int, int]]:
    """(the line whose iterations are the work's units, each PE's count of them): the
    latest PE's most repeated command (a line and its op: a line that issues a GEMM and
    a store counts once an iteration; the first in program order among equals), when
    every imbalanced PE runs it more often than the median PE; else (-1, work cycles)."""
    index = model.index
    c = index.columns
    ops = np.asarray(index.commands.op, dtype=np.int64)
    counts: dict[int, Counter] = {}
    first_seen: dict[tuple[int, int], int] = {}
    for pe in model.programs:
        events = np.asarray(
            index.pe_loc_events[pe] if pe < len(index.pe_loc_events) else [], dtype=np.int64
        )
        events = events[c.kind[events] == Kind.ISSUE]
        cmds = c.cmd[events].astype(np.int64)
        op = np.where((cmds >= 0) & (cmds < len(ops)), ops[np.clip(cmds, 0, None)], -1)
        keys = list(zip(c.loc[events].tolist(), op.tolist(), strict=True))
        counts[pe] = Counter(keys)
        if pe == latest:
            for i, key in enumerate(keys):
                first_seen.setdefault(key, i)
    if not counts[latest]:
        return -1, dict(work)
    key = min(counts[latest], key=lambda k: (-counts[latest][k], first_seen[k]))
    units = {pe: counts[pe].get(key, 0) for pe in model.programs}
    typical = median_low(units.values())
    if any(units[pe] <= typical for pe in late):
        return -1, dict(work)
    return int(key[0]), units


def imbalance_findings(
    model: Model, explained: dict[int, int], min_share: float
) -> tuple[list[Finding], dict[int, int]]:
    """(KB111's findings, one per imbalanced PE whose extra work delays the launch's end;
    each such PE's claim: its gap to its own bound no other finding explains).

    ``explained``: per PE, the cycles of achieved - bound the other findings explain
    (re-timed together); ``min_share``: a finding's least saving, as a share of its
    PE's kernel time.
    """
    imbalance = imbalance_of(model)
    if imbalance is None:
        return [], {}
    programs = model.programs
    bounds = model.bound_lengths
    ends = {pe: p.end for pe, p in programs.items()}
    # Where the launch ends with the other findings' fixes: the saving and theirs
    # together never go below the balanced bound.
    fixed_end = max(
        p.start + max(bounds[pe], p.achieved - explained.get(pe, 0)) for pe, p in programs.items()
    )
    saving = max(0, min(model.end - imbalance.spread_end, fixed_end - imbalance.balanced_end))
    held = {pe: imbalance.held_ends.get(pe, ends[pe]) for pe in imbalance.late}
    latest = max(imbalance.late, key=lambda pe: held[pe])
    if saving < max(1, math.ceil(min_share * max(programs[latest].achieved, 1))):
        return [], {}
    # A late PE held back through receives gains what the launch does: its own end moves
    # as much as the end of the PEs that wait on it.
    gains = {
        pe: min(saving, held[pe] - imbalance.spread_end)
        for pe in imbalance.late
        if held[pe] > imbalance.spread_end
    }
    claims = {pe: max(0, programs[pe].achieved - bounds[pe] - explained.get(pe, 0)) for pe in gains}
    others = list(imbalance.others)
    shape = _Shape(model, others, ends)
    message = shape.message(imbalance, max(ends[pe] for pe in others), saving)
    # One line at 80 columns: the message says where the steps part and what it saves.
    if imbalance.per_round is None:
        suggestion = "spread the work evenly over the PEs (the remainder one per PE)"
    else:
        suggestion = "move each message's extra work to the other stages, an even share on each"
    findings = []
    for pe in sorted(gains):
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
                suggestion=suggestion,
                saving=int(saving),
                share=saving / max(prog.achieved, 1),
                pe_saving=int(gains[pe]),
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


def _pe_list(pes: tuple[int, ...], n_pes: int) -> str:
    """``the 4 PEs`` when ``pes`` are all of them, else ``PEs 1, 2 and 3``."""
    if len(pes) == n_pes:
        return f"the {n_pes} PEs"
    head = ", ".join(map(str, pes[:-1]))
    return f"PEs {head} and {pes[-1]}" if head else f"PE {pes[-1]}"


def _where(model: Model, loc_id: int) -> str:
    loc = model.index.loc(loc_id)
    return "?" if loc is None else f"{os.path.basename(loc.file) or loc.file}:{loc.line}"


class _Shape:
    """Each PE's steps' lines against a typical PE's, and the words of the finding."""

    def __init__(self, model: Model, others: list[int], ends: dict[int, int]):
        self.model = model
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

    def message(self, imbalance: Imbalance, next_end: int, saving: int) -> str:
        """The late PEs, their work against the median PE's, the cost, where their steps
        diverge and what the even split saves."""
        model = self.model
        late = imbalance.late
        ends = {pe: model.programs[pe].end for pe in late}
        held = {pe: imbalance.held_ends.get(pe, ends[pe]) for pe in late}
        pe = max(late, key=lambda p: held[p])
        if held[pe] > ends[pe]:
            who = (
                f"the launch waits for PE {pe} through its messages: it ends at cycle "
                f"{ends[pe]:,}, the PEs waiting on it (directly or through receives) as late "
                f"as {held[pe]:,}"
            )
        elif len(late) == 1:
            who = f"PE {pe} ends {ends[pe] - next_end:,} cycles after the other PEs"
        else:
            who = (
                "PEs " + ", ".join(map(str, late)) + f" end up to {ends[pe] - next_end:,} "
                "cycles after the other PEs"
            )
        if held[pe] == ends[pe]:
            who += f" (their last at cycle {next_end:,})"
        work, median = imbalance.work[pe], imbalance.median_work
        text = (
            f"{who}: PE {pe}'s steps "
            f"hold engines, channels and issue slots for {work:,} cycles against the median "
            f"PE's {median:,} ({work / max(median, 1):.1f}x)"
        )
        units = imbalance.units
        line = _where(model, imbalance.unit_line) if imbalance.unit_line >= 0 else ""
        if line:
            text += f", and it runs {line} {units[pe]:,} times against {units[imbalance.typical]:,}"
        event, step = self.divergence(pe)
        if event >= 0:
            where = _where(model, int(model.index.columns.loc[event]))
            # With the split per message too, the line just named is said once, so the
            # message fits the findings pane at 80 columns.
            same = where == line and imbalance.per_round is not None
            _, theirs = self._steps(self.typical)
            if step >= len(theirs):
                text += f"; its steps match PE {self.typical}'s for {step:,} steps, then it " + (
                    "runs that line" if same else f"goes on at {where}"
                )
            else:
                text += f"; its steps part from PE {self.typical}'s at step {step:,}, " + (
                    "on that line" if same else f"at {where}"
                )
        n_pes = len(model.programs)
        rounds = imbalance.per_round
        if line and rounds is not None:
            # Short: the line and its runs are named above, and the pane has 80 columns.
            each = ("" if rounds.uniform else "up to ") + f"{rounds.round_units:,}"
            split = (
                f"{each} runs for each of its {rounds.rounds:,} messages: at most "
                f"{rounds.cap:,} on each of {_pe_list(rounds.takers, n_pes)}"
            )
        elif line:
            split = (
                f"the {sum(units.values()):,} runs of {line} over {n_pes} PEs, at most "
                f"{imbalance.even_units:,} on each"
            )
        else:
            split = f"the work over {n_pes} PEs"
        return text + f"; split evenly ({split}), the launch would end {saving:,} cycles sooner"
