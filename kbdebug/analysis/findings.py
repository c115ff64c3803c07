"""Findings: the line that serialised a pipeline, and what fixing it is worth.

Every finding is an edit of the launch's dataflow graph
(:mod:`kbdebug.analysis.model`): a rule spots a pattern in a PE's program (a
load waited right after its issue, a wait long before the value's first use,
...), the edit is its fix (the issue moved up, the wait moved to the first use
or dropped, composite calls merged), and :mod:`kbdebug.analysis.retime`
re-times the whole mesh with it. The **saving** is the launch's end-cycle gain
with the same line fixed on every PE that has the finding (``pe_saving``: this
PE's own gain). A finding is reported only when its saving reaches
``MIN_SHARE`` of its PE's kernel time, so a kernel at its bound gets none, and
since the bound is a lower bound of every edit, no saving exceeds achieved
minus bound. Fixes that only pay together (the A and B tiles of one GEMM step,
both late) are one finding naming both lines, with their joint saving.

Each stalled wait's avoidable stall (beyond the earliest arrival the model
allows) is charged to one cause, in this order: KB104 (the wait), KB103 (the
issue order), KB101/KB102/KB107 (the load's placement), KB108, KB109; what no
rule explains is KB106's.

What a finding holds, and its ids, are in :mod:`kbdebug.analysis.finding`; its words
(message and suggestion) in :mod:`kbdebug.analysis.wording`; the edits of waits,
stores and composites in :mod:`kbdebug.analysis.wait_edits`.

KB101 blocking-load
    A blocking ``tl.load`` whose transfer could run under the work before its
    use: re-timed as a ``tl.load_async`` issued ``ahead`` tiles before it.
KB102 wait-right-after-issue
    A ``tl.load_async`` waited with no work in between, where the issue could
    have moved above earlier work (after the previous tile's wait, never above
    a host read of loaded values: its address may come from them). Keyed by
    the issue.
KB103 queued-behind
    A load that queued on its read channel behind loads needed later (issue
    order differs from wait order): re-timed with its issue moved above theirs.
KB104 wait-before-use
    A wait on a load placed before work that does not need its value: re-timed
    with the wait at the value's first use. Keyed by the wait.
KB106 below-bound
    A PE whose kernel took longer than ``1 / EFFICIENCY_THRESHOLD`` times its
    critical-path bound when the other findings do not explain the gap. Keyed by
    the kernel's ``def`` line; the saving is the unexplained gap (an upper estimate).
KB107 prefetch-too-shallow
    A prefetched load (work between issue and wait) that still stalls: re-timed
    issued deeper, at the depth the re-timing finds (within scratch).
KB108 store-waited-early
    A ``tl.wait`` on a store or send that stalled long before anything needs it:
    dropped when nothing reads the bytes back, moved right before the load that
    reads them back otherwise (a fence already in place is never flagged).
KB109 recv-waited-before-work
    A receive waited before work that does not need the message: re-timed with
    the wait at the message's first use.
KB110 composite-restarted
    Consecutive ``tl.composite`` calls over the same B, each continuing the
    previous one's rows: re-timed as one call over all the rows.
KB111 imbalance
    A few PEs do clearly more work than the rest and end after them: names them,
    their work against the median PE's, the launch's end cost and where their steps
    diverge (:mod:`kbdebug.analysis.imbalance`); saves what an even split gains,
    within the launch's balanced bound with what the other findings save.
KB112 send-issued-late
    A send issued below work its data does not need while its receiver waited:
    re-timed right after the line that produces its data; its saving is the
    receivers' (:mod:`kbdebug.analysis.send_edits`).
KB113 hbm-contention
    Stalls for a shared HBM stack: charged to the stack, never a line; information
    about the launch's bound, no finding (:mod:`kbdebug.analysis.contention`).

A line found on some PEs is re-timed with its edit on every PE that waits there
(:mod:`kbdebug.analysis.line_edits`). KB104 and KB109 at one wait line on different
PEs are one edit (the wait moved to the first use): one finding, under the rule that
gains more. No edit moves an access across another of the same bytes it follows (the
model's fences and floors), and the lines of a hazard's accesses, or of accesses
outside their tensor, get no finding (:mod:`kbdebug.analysis.unsafe_lines`).
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.analysis.contention import queued_on_stack, stack_explained
from kbdebug.analysis.finding import (
    IMMEDIATE_MAX_WORK,
    RULES,
    Finding,
    WaitCause,
    finding_id,
    line_id,
)
from kbdebug.analysis.imbalance import imbalance_findings
from kbdebug.analysis.model import (
    COMPUTE,
    LOAD,
    NEVER,
    OPAQUE,
    RECV,
    SEND,
    STORE,
    WAIT,
    Model,
    Program,
    _ints,
    build_model,
)
from kbdebug.analysis.retime import simulate_launch
from kbdebug.analysis.stream_edits import MAX_AHEAD, StreamEdits, _Group, merge_by_line
from kbdebug.analysis.unsafe_lines import on_unsafe_line
from kbdebug.analysis.wording import line_count, words
from kbdebug.replay.index import NONE
from kbdebug.replay.timing import event_times

#: A finding is reported when fixing it saves at least this share of its PE's kernel time.
MIN_SHARE = 0.03
#: KB106: bound / achieved below this, unexplained by the other findings, is flagged.
EFFICIENCY_THRESHOLD = 0.9
#: Occurrences whose events a finding lists.
MAX_OCCURRENCE_EVENTS = 50
#: Stream fixes whose gains alone add up to less than this share of their joint gain
#: only pay together: one finding naming every line.
JOINT_SHARE = 0.8

# Charge order of a wait's avoidable stall when several rules touch it.
_PRIORITY = ("KB104", "KB103", "KB101", "KB102", "KB107", "KB108", "KB109", "KB110", "KB112")
_STREAM_RULES = ("KB101", "KB102", "KB107")
#: Rules whose fix moves issues (the others move or drop waits, or merge calls).
ISSUE_RULES = ("KB101", "KB102", "KB103", "KB107")
#: Rules whose fixes of one line are the same edit: the wait moved to the first use.
SAME_EDIT = {"KB104": "wait-to-use", "KB109": "wait-to-use"}

# What a finding is (kbdebug.analysis.finding) stays importable from here.
__all__ = [
    "EFFICIENCY_THRESHOLD",
    "IMMEDIATE_MAX_WORK",
    "MAX_AHEAD",
    "MIN_SHARE",
    "RULES",
    "Finding",
    "WaitCause",
    "find_all",
    "finding_id",
    "line_id",
    "wait_causes",
]


def find_all(replay, model: Model | None = None) -> list[Finding]:
    """Every finding in the trace, ordered by first event (``model``: the trace's, if built)."""
    from kbdebug.analysis import line_edits, send_edits, wait_edits

    model = model if model is not None else build_model(replay.index)
    diagnoses = [_Diagnosis(model, prog) for prog in model.programs.values()]
    if len(model.programs) > 1:
        floor = math.ceil(MIN_SHARE * max(model.end - model.start, 1))
        send_edits.drop_redundant(model, diagnoses, lambda n: _launch_end(model, n), floor)
    # One line's fix changes every PE that runs it: the launch's gain is re-timed with
    # the fix applied on each PE that has the finding. Rules whose fixes of a line are one
    # edit (a wait moved to its value's first use: a load's on one PE, a receive's on
    # another) are one finding, re-timed as that edit on every PE.
    by_line: dict[tuple[str, int], list[tuple[_Diagnosis, _Group]]] = defaultdict(list)
    for d in diagnoses:
        for g, _ in d.groups():
            by_line[(SAME_EDIT.get(g.rule, g.rule), g.loc_id)].append((d, g))
    single = len(model.programs) == 1  # then the launch's gain is the PE's, re-timed already
    if not single:  # a line's edit on every PE that runs it, not just where it was found
        line_edits.spread(diagnoses, by_line)
    gains = {(d.prog.pe, id(g)): gain for d in diagnoses for g, gain in d.groups()}
    launch_gain = {}
    for (_, loc_id), items in by_line.items():
        if single:
            d, g = items[0]
            launch_gain[(g.rule, loc_id)] = gains[(d.prog.pe, id(g))]
            continue
        rule = wait_edits.one_rule(items, lambda edits: _launch_gain(model, edits))
        edits = wait_edits.edits_of(items)
        lengths, _ = simulate_launch(model, edits, model.recorded)
        launch_gain[(rule, loc_id)] = _launch_end(model, model.recorded) - _launch_end(
            model, lengths
        )
        # One edit, one finding: it holds on each PE it changes once it pays on any.
        launch_gain[(rule, loc_id, "floor")] = min(d.floor() for d, _ in items)
        # Each PE's own gain is the one it gets with the line fixed on every PE (what one
        # PE's fix alone gives is less on a ring; a send's own PE gains nothing from it).
        for pe, n in lengths.items():
            launch_gain[(rule, loc_id, pe)] = max(model.recorded[pe] - min(n, NEVER), 0)
    # What every finding's fix explains of each PE's gap, all applied together on the mesh
    # (a PE slowed by its neighbour's late send is explained by the neighbour's finding).
    edits = {d.prog.pe: d.edit(*(g for g, _ in d.groups())) for d in diagnoses if d.groups()}
    explained: dict[int, int] = {}
    if edits and not single:  # one PE: its joint gain (d.joint) is what its fixes explain
        lengths, _ = simulate_launch(model, edits, model.recorded)
        explained = {pe: model.recorded[pe] - min(n, NEVER) for pe, n in lengths.items()}
    # A few PEs ending well after the rest: KB111 claims what the others leave on them,
    # and KB106 names only what KB111 leaves in turn.
    left = {d.prog.pe: max(getattr(d, "joint", 0), explained.get(d.prog.pe, 0)) for d in diagnoses}
    # What sharing an HBM stack costs a PE is the stack's (KB113), never its kernel's.
    for pe, cost in stack_explained(model).items():
        left[pe] = max(left.get(pe, 0), cost)
    findings, claimed = imbalance_findings(model, left, MIN_SHARE)
    for d in diagnoses:
        findings.extend(d.findings(launch_gain, left[d.prog.pe] + claimed.get(d.prog.pe, 0)))
    findings.sort(key=lambda f: (f.events[0] if f.events else f.start, f.id))
    return findings


def wait_causes(replay, model: Model | None = None) -> list[WaitCause]:
    """Every stalled wait with its avoidable stall and the rule it is charged to."""
    model = model if model is not None else build_model(replay.index)
    out: list[WaitCause] = []
    for prog in model.programs.values():
        out.extend(_Diagnosis(model, prog).wait_causes())
    out.sort(key=lambda w: w.event)
    return out


def _launch_end(model: Model, lengths: dict[int, int]) -> int:
    return max(
        (min(p.start + lengths.get(pe, p.achieved), NEVER) for pe, p in model.programs.items()),
        default=0,
    )


def _launch_gain(model: Model, edits: dict) -> int:
    """Cycles the launch's end moves earlier with ``edits`` (per PE) applied together."""
    base = model.recorded
    lengths, _ = simulate_launch(model, edits, base)
    return _launch_end(model, base) - _launch_end(model, lengths)


# --- one PE ---------------------------------------------------------------------------


class _Diagnosis(StreamEdits):
    """The findings of one PE's program."""

    def __init__(self, model: Model, prog: Program):
        self.model = model
        self.index = model.index
        self.prog = prog
        index = self.index
        cmds = index.commands
        self.loc = cmds.loc
        self.blocking = cmds.blocking
        n = len(prog)
        self.n = n
        kinds = prog.kind
        # Chain work (issue and compute cycles) before each step.
        step_kinds = np.frombuffer(kinds, dtype=np.int8) if n else np.zeros(0, np.int8)
        step_cycles = np.frombuffer(prog.cycles, dtype=np.int64) if n else np.zeros(0, np.int64)
        computes = np.isin(step_kinds, (COMPUTE, OPAQUE))
        cost = np.where(computes, step_cycles, 0)
        cost[np.isin(step_kinds, (LOAD, STORE, SEND, RECV))] = prog.hw.issue
        self.work = np.concatenate([[0], np.cumsum(cost, dtype=np.int64)])
        self.compute_steps = np.concatenate([[0], np.cumsum(computes, dtype=np.int64)])
        step_cmds = np.frombuffer(prog.cmd, dtype=np.int64) if n else np.zeros(0, np.int64)
        # Per command: the step that issued it (the last, were it issued twice), and the
        # first that waited on it.
        issues = np.flatnonzero(np.isin(step_kinds, (LOAD, STORE, SEND, RECV)))
        self.issue_step: dict[int, int] = dict(
            zip(step_cmds[issues].tolist(), issues.tolist(), strict=True)
        )
        waits = np.flatnonzero(step_kinds == WAIT)
        waited = step_cmds[waits]
        first = np.sort(np.unique(waited, return_index=True)[1])
        self.wait_step: dict[int, int] = dict(
            zip(waited[first].tolist(), waits[first].tolist(), strict=True)
        )
        # Per step: the last step no issue may move above (host reads, receive waits and,
        # for a load, the waits of stores it reads back).
        self.barrier_before = prog.floor
        self.bound = model.bound_lengths[prog.pe]
        self.recorded = model.recorded[prog.pe]
        t_end = event_times(index, index.futures.wait_end)
        fut_of = cmds.future
        self.stall: dict[int, int] = {}
        self.avoidable: dict[int, int] = {}
        for c, s in self.wait_step.items():
            f = int(fut_of[c]) if 0 <= c < len(fut_of) else NONE
            if f < 0 or f >= len(t_end):
                continue
            begin, end = prog.at[s], int(t_end[f])
            if end < 0:  # never resolved (deadlock, cut)
                continue
            self.stall[c] = end - begin
            earliest = prog.earliest.get(c, begin)
            self.avoidable[c] = max(0, end - max(begin, earliest))

    # --- shared -------------------------------------------------------------------

    def edit(self, *groups: _Group):
        """The fix of ``groups`` together: (order of steps, commands, cycles)."""
        pos = np.arange(self.n, dtype=np.float64)
        drops: set[int] = set()
        cmds = None
        cycles = None
        for g in groups:
            for s, key in g.moves.items():
                pos[s] = key
            drops |= g.drops
            if g.repoint:
                cmds = list(self.prog.cmd) if cmds is None else cmds
                for s, c in g.repoint.items():
                    cmds[s] = c
            if g.cycles:
                if cycles is None:
                    cycles = np.frombuffer(self.prog.cycles, dtype=np.int64).copy()
                for s, value in g.cycles.items():
                    cycles[s] = value
        order = np.argsort(pos, kind="stable")
        if drops:
            order = order[~np.isin(order, np.fromiter(drops, dtype=np.int64, count=len(drops)))]
        return order, cmds, None if cycles is None else _ints(cycles)

    def gain(self, *groups: _Group) -> int:
        """Cycles this PE's kernel saves with the fixes of ``groups`` applied together."""
        if not groups:
            return 0
        pe = self.prog.pe
        lengths, _ = simulate_launch(self.model, {pe: self.edit(*groups)}, self.model.recorded)
        return self.recorded - min(lengths[pe], NEVER)

    def floor(self) -> int:
        return max(1, math.ceil(MIN_SHARE * max(self.prog.achieved, 1)))

    def loads(self) -> list[int]:
        return [c for k, c in zip(self.prog.kind, self.prog.cmd, strict=True) if k == LOAD]

    # --- findings -----------------------------------------------------------------

    def groups(self) -> list[tuple[_Group, int]]:
        """Every group worth reporting with its saving on this PE, each wait in one group
        at most; fixes that only pay together are one group."""
        if not hasattr(self, "_groups"):
            self._groups = self._find_groups()
        return self._groups

    def _find_groups(self) -> list[tuple[_Group, int]]:
        from kbdebug.analysis import send_edits, wait_edits
        from kbdebug.analysis.line_edits import waits_together

        found: list[tuple[_Group, int]] = []
        # Waits a reported group fixes: a group below the floor is never reported, so it
        # holds none (a later rule's group may still report them).
        taken: set[int] = set()
        floor = self.floor()

        def add(groups: list[_Group]) -> None:
            for g in groups:
                g.cmds = [c for c in g.cmds if c not in taken]
                if not g.cmds or on_unsafe_line(self, g.cmds):
                    continue
                gain = self.gain(g)
                if gain > 0:
                    found.append((g, gain))
                    if gain >= floor:
                        taken.update(g.cmds)

        # A wait placed before work that does not need its value, and a load issued late:
        # where both fixes touch the same waits, the one that gains more is the finding.
        # Waits on the newest pending load first are re-timed taking the loads in issue
        # order (each tile's work with it) as well as at their first uses.
        early = wait_edits.out_of_order_groups(self)
        if self.prog.knows_reads:
            early += wait_edits.early_wait_groups(self, "KB104")
            early += wait_edits.early_wait_groups(self, "KB101")
        # A load that queued behind later-needed loads is KB103's only when reordering
        # the issues pays more than issuing it ahead (then the order is the mistake).
        queued = {g.loc_id: g for g in self.queued_groups()}
        streams: list[tuple[_Group, int]] = []
        for g in self.stream_groups(set()):
            rival = queued.get(g.loc_id)
            gain = self.gain(g)
            if rival is not None:
                rival_gain = self.gain(rival) if rival.cmds else 0
                # A tie goes to KB103: reordering the issues is the smaller edit.
                if rival_gain >= 0.98 * gain:
                    continue
                del queued[g.loc_id]
            streams.append((g, gain))
        streams = self.streams_together([(g, self.gain(g)) for g, _ in merge_by_line(streams)])
        candidates = [(g, self.gain(g)) for g in [*early, *queued.values()]] + streams

        # The larger gain wins; a fix of the issues wins a tie with one of the waits.
        def rank(x: tuple[_Group, int]) -> tuple[int, bool]:
            return -x[1], x[0].rule not in ISSUE_RULES

        for g, gain in sorted(candidates, key=rank):
            # A fix that touches waits another one already covers is not a second finding;
            # one on a hazard's line would keep the race (the hazard comes first).
            if gain <= 0 or any(c in taken for c in g.cmds) or on_unsafe_line(self, g.cmds):
                continue
            found.append((g, gain))
            if gain >= floor:
                taken.update(g.cmds)
        add(wait_edits.store_wait_groups(self))
        if self.prog.knows_reads:
            # Receives waited side by side before work none of them feeds move together.
            add(waits_together(self, wait_edits.early_wait_groups(self, "KB109", True)))
        else:
            add(wait_edits.early_receive_groups(self))
        add(wait_edits.composite_groups(self))
        # An issue moved up to a store wait that KB108 moves or drops would read the
        # stored bytes before they land: that fix only holds with the early wait.
        fenced_by = {c for g, _ in found if g.rule == "KB108" for c in g.cmds}
        found = [
            (g, gain)
            for g, gain in found
            if g.rule not in ISSUE_RULES
            or not any(st in fenced_by for c in g.cmds for st in self.prog.fences.get(c, ()))
        ]
        reported = [(g, gain) for g, gain in found if gain >= self.floor()]
        # What the reported findings explain together (KB106 names what they leave); a
        # finding whose fix adds less than the floor on top of the others' is another way
        # to the same cycles, not a second finding.
        self.joint = self.gain(*(g for g, _ in reported)) if reported else 0
        if len(reported) > 1:
            for item in sorted(reported, key=lambda x: x[1]):
                rest = [x for x in reported if x is not item]
                without = self.gain(*(g for g, _ in rest))
                if self.joint - without < self.floor():
                    reported, self.joint = rest, without
        # A late send holds back the PEs that receive it, never this one: its gain is
        # theirs, and it explains none of this PE's own gap. One PE's fix alone may gain
        # little where every stage's send is late: the floor applies to the line fixed
        # on every PE (the launch's gain).
        late_sends = send_edits.late_send_groups(self) if len(self.model.programs) > 1 else []
        return reported + late_sends

    def findings(
        self, launch_gain: dict[tuple, int] | None = None, explained: int = 0
    ) -> list[Finding]:
        out = []
        floor = self.floor()
        for g, gain in self.groups():
            key = (g.rule, g.loc_id)
            saving = gain if launch_gain is None else launch_gain.get(key, gain)
            # The launch ends no sooner (another PE ends later): nothing worth reporting.
            if saving < (floor if launch_gain is None else launch_gain.get((*key, "floor"), floor)):
                continue
            own = gain if launch_gain is None else launch_gain.get((*key, self.prog.pe), gain)
            out.append(self._finding(g, saving, own))
        below = self._below_bound(max(self.joint, explained))
        if below is not None:
            out.append(below)
        return out

    def wait_causes(self) -> list[WaitCause]:
        charged: dict[int, str] = {}
        for g, _ in sorted(self.groups(), key=lambda x: _PRIORITY.index(x[0].rule)):
            for c in g.cmds:
                charged.setdefault(c, g.rule)
        fut = self.index.commands.future
        stacked = queued_on_stack(self.prog, self.index)
        out = []
        for c, stall in self.stall.items():
            if stall <= 0:
                continue
            avoidable = self.avoidable.get(c, 0)
            out.append(
                WaitCause(
                    future=int(fut[c]),
                    pe=self.prog.pe,
                    event=self.prog.event[self.wait_step[c]],
                    stall=stall,
                    avoidable=avoidable,
                    rule=("KB113" if c in stacked else charged.get(c)) if avoidable > 0 else None,
                )
            )
        return out

    def _finding(self, g: _Group, saving: int, pe_saving: int) -> Finding:
        index, prog = self.index, self.prog
        cmds, futs = index.commands, index.futures
        loc = index.loc(g.loc_id)
        rows = g.cmds[:MAX_OCCURRENCE_EVENTS]
        events: set[int] = set()
        for c in rows:
            if c in self.issue_step:
                events.add(prog.event[self.issue_step[c]])
            elif g.rule == "KB110" and 0 <= c < len(cmds.issue) and cmds.issue[c] >= 0:
                events.add(int(cmds.issue[c]))
            f = int(cmds.future[c])
            if 0 <= f < len(futs.wait_begin):
                events.update(int(e) for e in (futs.wait_begin[f], futs.wait_end[f]) if e >= 0)
        times = event_times(index, np.array(sorted(events), dtype=np.int64))
        stall = sum(self.stall.get(c, 0) for c in g.cmds)
        if g.rule == "KB112":
            from kbdebug.analysis.send_edits import send_words

            message, suggestion = send_words(self, g, loc)
        else:
            message, suggestion = words(self, g, loc, stall)
        achieved = max(prog.achieved, 1)
        return Finding(
            id=finding_id(g.rule, index, loc, prog.pe),
            rule=g.rule,
            title=RULES[g.rule],
            pe=prog.pe,
            start=int(times.min()) if len(times) else prog.start,
            end=int(times.max()) if len(times) else prog.end,
            events=tuple(sorted(events)),
            loc=loc,
            message=message,
            suggestion=suggestion,
            saving=int(saving),
            share=saving / achieved,
            count=line_count(self, g),
            stall=int(stall),
            call_loc=getattr(loc, "caller", None),
            line_id=line_id(g.rule, loc, prog.pe),
            pe_saving=int(pe_saving),
            also=tuple(x for x in (index.loc(i) for i in g.also) if x is not None),
        )

    def _below_bound(self, explained: int) -> Finding | None:
        prog, index = self.prog, self.index
        achieved, bound = prog.achieved, self.bound
        if not (self.model.complete and prog.complete):
            return None
        if achieved <= 0 or bound / achieved >= EFFICIENCY_THRESHOLD:
            return None
        unexplained = achieved - bound - explained
        if unexplained < max(self.floor(), (1 - EFFICIENCY_THRESHOLD) * achieved):
            return None
        c = index.columns
        starts = np.flatnonzero((c.kind == Kind.KERNEL_START) & (c.pe == prog.pe))
        first = int(starts[0]) if len(starts) else 0
        loc = index.loc(int(c.loc[first])) if len(starts) else None
        last = int(np.searchsorted(c.time, prog.end, side="right")) - 1
        events = tuple(sorted({first, max(last, first)}))
        return Finding(
            id=finding_id("KB106", index, loc, prog.pe),
            rule="KB106",
            title=RULES["KB106"],
            pe=prog.pe,
            start=prog.start,
            end=prog.end,
            events=events,
            loc=loc,
            message=(
                f"PE{prog.pe} took {achieved:,} cycles where its critical path allows "
                f"{bound:,} ({bound / achieved:.0%}); {unexplained:,} cycles are not explained "
                f"by the other findings"
            ),
            suggestion=(
                "look for waits on data whose loads could be issued earlier or in wait order; "
                "step to the stalled waits (w, c) to see where the time goes"
            ),
            saving=int(unexplained),
            share=unexplained / achieved,
            line_id=line_id("KB106", loc, prog.pe),
            pe_saving=int(unexplained),
        )
