"""Findings: the line that serialised a pipeline, and what fixing it is worth.

Every finding rests on the critical-path model (:mod:`kbdebug.analysis.model`).
A rule first spots a pattern in a PE's program (a load waited right after its
issue, a wait on a store, ...); then the model re-times the PE's kernel with
the fix applied (the issue moved up, the wait moved or dropped) and the
difference is the finding's **estimated saving**. A finding is reported only
when that saving reaches ``MIN_SHARE`` of its PE's kernel time, so a kernel at
its achievable bound gets none.

Each stalled wait's avoidable stall (beyond the earliest arrival the model
allows) is charged to one cause, in this order: KB104 (the wait), KB103 (the
issue order), KB101/KB102/KB107 (the load's placement), KB108, KB109; what no
rule explains is KB106's.

What a finding holds, and its ids, are in :mod:`kbdebug.analysis.finding`; its words
(message and suggestion) in :mod:`kbdebug.analysis.wording`.

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
KB104 out-of-order-wait
    A wait on a newer future while an older one of the same PE is pending:
    re-timed with the waits taking the futures in issue order. Keyed by the wait.
KB106 below-bound
    A PE whose kernel took longer than ``1 / EFFICIENCY_THRESHOLD`` times its
    critical-path bound when the other findings do not explain the gap. Keyed by
    the kernel's ``def`` line; the saving is the unexplained gap (an upper estimate).
KB107 prefetch-too-shallow
    A prefetched load (work between issue and wait) that still stalls because
    one iteration's work is shorter than transfer + latency: re-timed issued
    ``ceil((transfer + latency) / work per iteration)`` tiles ahead.
KB108 store-waited-early
    A ``tl.wait`` on a store's or send's handle that stalled while nothing after
    it reads the stored bytes (no later load overlaps them: then it would be a
    needed fence): re-timed without the wait (the kernel's end drains it).
KB109 recv-waited-before-work
    A ``recv_async`` posted and waited with no work between, followed by work
    before the next wait: re-timed with the wait after that work.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.analysis.finding import (
    IMMEDIATE_MAX_WORK,
    RULES,
    Finding,
    WaitCause,
    finding_id,
    line_id,
    matches,
)
from kbdebug.analysis.model import (
    BARRIER,
    COMPUTE,
    LOAD,
    OPAQUE,
    RECV,
    SEND,
    STORE,
    WAIT,
    Model,
    Program,
    _ints,
    model_of,
)
from kbdebug.analysis.wording import words
from kbdebug.replay.index import NONE
from kbdebug.replay.summary import event_times

#: A finding is reported when fixing it saves at least this share of its PE's kernel time.
MIN_SHARE = 0.03
#: KB106: bound / achieved below this, unexplained by the other findings, is flagged.
EFFICIENCY_THRESHOLD = 0.9
#: Deepest prefetch a re-timing tries (tiles ahead of the wait).
MAX_AHEAD = 16
#: Occurrences whose events a finding lists.
MAX_OCCURRENCE_EVENTS = 50
#: Loads ahead in a channel's queue examined per queued load (KB103).
QUEUE_LOOKBACK = 32

# Groups that gain nothing alone tried together at most (each costs a re-timing).
_MAX_JOINT_TRIALS = 8
# Charge order of a wait's avoidable stall when several rules touch it.
_PRIORITY = ("KB104", "KB103", "KB101", "KB102", "KB107", "KB108", "KB109")

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
    "matches",
    "wait_causes",
]


def find_all(replay) -> list[Finding]:
    """Every finding in the trace, ordered by first event."""
    model = model_of(replay)
    findings: list[Finding] = []
    for prog in model.programs.values():
        findings.extend(_Diagnosis(model, prog).findings())
    findings.sort(key=lambda f: (f.events[0] if f.events else f.start, f.id))
    return findings


def wait_causes(replay) -> list[WaitCause]:
    """Every stalled wait with its avoidable stall and the rule it is charged to."""
    model = model_of(replay)
    out: list[WaitCause] = []
    for prog in model.programs.values():
        out.extend(_Diagnosis(model, prog).wait_causes())
    out.sort(key=lambda w: w.event)
    return out


# --- one PE ---------------------------------------------------------------------------


@dataclass
class _Group:
    """Occurrences of one rule at one line: the commands, and the fix to re-time."""

    rule: str
    loc_id: int
    #: Commands whose waits it covers (loads, stores, receives).
    cmds: list[int]
    #: The fix: steps moved to new sort keys, steps dropped, waits re-pointed (step -> cmd).
    moves: dict[int, float]
    drops: frozenset[int] = frozenset()
    repoint: dict[int, int] | None = None
    #: Rule-specific figures for the message.
    info: dict | None = None


class _Diagnosis:
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
        # Per step: the last barrier before it, a host read or a wait on a store or send
        # issued before that wait (a fence: later loads may read what it wrote).
        barrier = step_kinds == BARRIER
        if len(issues) and len(waits):
            # The latest issue of each waited command before its wait, by one search over
            # (command, step) keys.
            span = n + 1
            keys = np.sort(step_cmds[issues] * span + issues)
            at = np.searchsorted(keys, waited * span + waits) - 1
            found = keys[np.maximum(at, 0)]
            issued = (at >= 0) & (found // span == waited)
            fence = issued & np.isin(step_kinds[found % span], (STORE, SEND))
            barrier[waits[fence]] = True
        last = np.maximum.accumulate(np.where(barrier, np.arange(n), -1)) if n else barrier
        self.barrier_before = _ints(np.append(-1, last[:-1]) if n else last)
        self.recorded = prog.recorded_time
        self.bound = prog.bound_cycles
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

    def gain(self, *groups: _Group) -> int:
        """Cycles the kernel saves with the fixes of ``groups`` applied together."""
        pos = np.arange(self.n, dtype=np.float64)
        drops: set[int] = set()
        cmds = None
        for g in groups:
            for s, key in g.moves.items():
                pos[s] = key
            drops |= g.drops
            if g.repoint:
                cmds = list(self.prog.cmd) if cmds is None else cmds
                for s, c in g.repoint.items():
                    cmds[s] = c
        order = np.argsort(pos, kind="stable")
        if drops:
            order = order[~np.isin(order, np.fromiter(drops, dtype=np.int64, count=len(drops)))]
        return self.recorded - self.prog.simulate(order, cmds)

    def floor(self) -> int:
        return max(1, math.ceil(MIN_SHARE * max(self.prog.achieved, 1)))

    def loads(self) -> list[int]:
        return [c for k, c in zip(self.prog.kind, self.prog.cmd, strict=True) if k == LOAD]

    # --- candidate fixes ----------------------------------------------------------

    def _streams(self) -> dict[tuple[int, int], list[int]]:
        """Loads by the line that issues them and the line that waits on them, in issue
        order. A helper that issues every stream's loads from one line (a pipeline's
        priming issues K0 and V0 from the same call) still has one stream per line
        that consumes them."""
        streams: dict[tuple[int, int], list[int]] = defaultdict(list)
        futures = self.index.futures
        fut_of = self.index.commands.future
        for c in self.loads():
            f = int(fut_of[c])
            waited_at = int(futures.wait_loc[f]) if 0 <= f < len(futures.wait_loc) else NONE
            streams[(int(self.loc[c]), waited_at)].append(c)
        return streams

    def _ahead_moves(self, stream: list[int], ahead: int) -> dict[int, float]:
        """Moves that issue each load of ``stream`` issued ``ahead`` tiles before its wait:
        right after the wait of the load ``ahead`` places earlier in the stream (the
        first ones where the stream's first load is), never above a host read before it,
        never later than it was."""
        keys: dict[int, float] = {}
        for i, c in enumerate(stream):
            s = self.issue_step[c]
            if i >= ahead:
                anchor = self.wait_step.get(stream[i - ahead], self.issue_step[stream[i - ahead]])
                key = anchor + 0.5
            else:
                key = self.barrier_before[s] + 0.5
            key = max(key, self.barrier_before[s] + 0.5)
            if key < s:
                keys[s] = key + i * 1e-6
        return keys

    def _movable_work(self, stream: list[int], i: int) -> int:
        """Chain work the ``i``-th issue of ``stream`` could move above: back to the
        previous load's wait (the first: to the start), never above a host read."""
        s = self.issue_step[stream[i]]
        if i > 0:
            prev = stream[i - 1]
            lo = self.wait_step.get(prev, self.issue_step[prev]) + 1
        else:
            lo = 0
        lo = max(lo, self.barrier_before[s] + 1)
        return int(self.work[s] - self.work[lo]) if lo < s else 0

    def _work_per_iteration(self, stream: list[int]) -> int:
        """Median chain work between consecutive waits of the stream."""
        waits = sorted(self.wait_step[c] for c in stream if c in self.wait_step)
        if len(waits) < 2:
            return 0
        gaps = np.diff(self.work[np.array(waits)])
        return int(np.median(gaps))

    def stream_groups(self, taken: set[int]) -> list[_Group]:
        """KB101, KB102, KB107: loads whose waits stall for want of an earlier issue.

        The streams are re-timed together (two loads of one tile only pay when both
        move), each either one tile ahead or as many as its latency needs.
        """
        lat = self.prog.hw.hbm_latency
        found = []
        for (loc_id, _), stream in self._streams().items():
            waited = [c for c in stream if c in self.stall and c not in taken]
            if not any(self.avoidable.get(c, 0) > 0 for c in waited):
                continue
            chosen = set(waited)
            transfer = int(np.median([self.prog.transfer[c] for c in stream]))
            per_iter = self._work_per_iteration(stream)
            between = [
                int(self.work[self.wait_step[c]] - self.work[self.issue_step[c] + 1])
                for c in waited
            ]
            # Work between where the issue could be (after the previous tile's wait) and
            # where it is: KB102 moves it up; with none, only a deeper prefetch helps.
            movable = float(
                np.median(
                    [self._movable_work(stream, i) for i, c in enumerate(stream) if c in chosen]
                )
            )
            late = movable >= IMMEDIATE_MAX_WORK * (transfer + lat)
            needed = (
                min(MAX_AHEAD, max(1, math.ceil((transfer + lat) / per_iter)))
                if per_iter > 0
                else 1
            )
            rule = "KB101" if self.blocking[stream[0]] else "KB102" if late else "KB107"
            info = {
                "transfer": transfer,
                "work": per_iter,
                "needed": needed,
                "between": int(np.median(between)),
                "movable": int(movable),
            }
            found.append((loc_id, stream, waited, rule, info))
        if not found:
            return []
        best, best_gain = None, -1
        for deep in (False, True):
            groups = []
            for loc_id, stream, waited, rule, info in found:
                ahead = info["needed"] if deep else 1
                moves = self._ahead_moves(stream, ahead)
                groups.append(_Group(rule, loc_id, waited, moves, info={**info, "ahead": ahead}))
            g = self.gain(*groups)
            if g > best_gain * 1.02:
                best, best_gain = groups, g
        # When moving the issues earlier only loses time (every gain below -1), there is
        # nothing to suggest.
        return best or []

    def queued_groups(self) -> list[_Group]:
        """KB103: loads that queued behind later-needed loads on their read channel."""
        index = self.index
        cmds = index.commands
        t_req = event_times(index, cmds.request)
        t_grant = event_times(index, cmds.grant)
        t_rel = event_times(index, cmds.release)
        loads = self.loads()
        need_of = {c: self.wait_step.get(c, 1 << 60) for c in loads}
        culprits: dict[int, int] = {}
        for ch, info in enumerate(index.channels):
            if info.get("kind") != "dma_read" or info.get("pe") != self.prog.pe:
                continue
            on = np.array(
                [c for c in index.channel_cmds[ch].tolist() if c in need_of], dtype=np.int64
            )
            on = on[t_grant[on] >= 0] if len(on) else on
            if len(on) < 2:
                continue
            on = on[np.argsort(t_grant[on], kind="stable")]
            grant, request = t_grant[on], t_req[on]
            transfer = np.array([self.prog.transfer[c] for c in on.tolist()], dtype=np.int64)
            release = np.where(t_rel[on] >= 0, t_rel[on], grant + transfer)
            need = np.array([need_of[c] for c in on.tolist()], dtype=np.int64)
            step = np.array([self.issue_step[c] for c in on.tolist()], dtype=np.int64)
            stalled = np.array([self.stall.get(c, 0) > 0 for c in on.tolist()])
            queued = np.flatnonzero((grant > request) & stalled & ~(self.blocking[on] > 0))
            culprit = np.full(len(queued), -1, dtype=np.int64)
            for d in range(1, QUEUE_LOOKBACK + 1):
                j = queued - d
                ok = (j >= 0) & (culprit < 0)
                if not ok.any():
                    break
                j = np.where(ok, j, 0)
                overlap = np.minimum(release[j], grant[queued]) - np.maximum(
                    grant[j], request[queued]
                )
                hit = ok & (overlap > 0) & (need[j] > need[queued]) & (step[j] < step[queued])
                culprit = np.where(hit, j, culprit)
            for i, j in zip(queued.tolist(), culprit.tolist(), strict=True):
                if j >= 0:
                    culprits[int(on[i])] = int(on[j])
        by_loc: dict[int, list[int]] = defaultdict(list)
        for c in culprits:
            by_loc[int(self.loc[c])].append(c)
        out = []
        for loc_id, group in by_loc.items():
            keys = {}
            for i, c in enumerate(group):
                s = self.issue_step[c]
                key = max(self.issue_step[culprits[c]] - 0.5, self.barrier_before[s] + 0.5)
                if key < s:
                    keys[s] = key + i * 1e-6
            ahead_locs = [int(self.loc[culprits[c]]) for c in group]
            info = {"ahead_loc": max(set(ahead_locs), key=ahead_locs.count)}
            out.append(_Group("KB103", loc_id, group, keys, info=info))
        return out

    def out_of_order_groups(self) -> list[_Group]:
        """KB104: waits on a newer future while an older one is pending."""
        data = [
            c
            for k, c in zip(self.prog.kind, self.prog.cmd, strict=True)
            if k in (LOAD, RECV) and not self.blocking[c]
        ]
        wait_of = {c: self.wait_step.get(c, 1 << 60) for c in data}
        hits: dict[int, list[tuple[int, list[int]]]] = defaultdict(list)
        pending_until = 0
        older: list[int] = []
        for c in data:
            w = wait_of[c]
            if w < (1 << 60) and self.stall.get(c, 0) > 0 and pending_until > w:
                behind = [g for g in older if wait_of[g] > w]
                waited = [wait_of[g] for g in behind if wait_of[g] < (1 << 60)]
                # Work between this wait and the older one's means the newer data was needed
                # first: the issue order is wrong (KB103), not the wait.
                same_line = any(self.loc[g] == self.loc[c] for g in behind)
                used_first = not waited or (
                    self.compute_steps[min(waited)] > self.compute_steps[w + 1]
                )
                if not waited or (used_first and not same_line):
                    pending_until = max(pending_until, w)
                    older.append(c)
                    continue
                wait_loc = int(self.index.futures.wait_loc[self.index.commands.future[c]])
                hits[wait_loc].append((c, behind))
            pending_until = max(pending_until, w)
            older.append(c)
        out = []
        kinds = self.prog.kind
        for loc_id, items in hits.items():
            moves: dict[int, float] = {}
            involved: set[int] = set()
            for c, behind in items:
                w = wait_of[c]
                waited = [g for g in behind if wait_of[g] < (1 << 60)]
                involved.add(c)
                involved.update(waited)
                # Newer data not used before the older wait: the wait belongs after the
                # work that follows the older one (taken to use the older data).
                s = min(wait_of[g] for g in waited) + 1
                while s < self.n and kinds[s] not in (COMPUTE, OPAQUE, WAIT, BARRIER):
                    s += 1
                if s < self.n and kinds[s] in (COMPUTE, OPAQUE):
                    moves[w] = s + 0.5
            # Futures of one issue line waited in the wrong order: each wait takes the
            # oldest pending one instead.
            positions = sorted(wait_of[c] for c in involved)
            futures = sorted(involved, key=lambda c: self.issue_step[c])
            repoint = dict(zip(positions, futures, strict=True))
            pending = items[0][1][0] if items[0][1] else items[0][0]
            group = [c for c, _ in items]
            candidates = [
                _Group("KB104", loc_id, group, moves, info={"pending": pending}),
                _Group("KB104", loc_id, group, {}, repoint=repoint, info={"pending": pending}),
            ]
            out.append(max(candidates, key=lambda g: self.gain(g)))
        return out

    def early_completion_groups(self) -> list[_Group]:
        """KB108: waits on stores and sends that nothing later depends on."""
        cmds = self.index.commands
        loads = self.loads()
        by_loc: dict[int, list[int]] = defaultdict(list)
        for c, s in self.wait_step.items():
            k = self.prog.kind[self.issue_step.get(c, s)]
            if k not in (STORE, SEND) or self.stall.get(c, 0) <= 0:
                continue
            if k == STORE:
                lo, hi = int(cmds.addr[c]), int(cmds.addr[c] + cmds.nbytes[c])
                fence = any(
                    self.issue_step[x] > s
                    and int(cmds.addr[x]) < hi
                    and int(cmds.addr[x] + cmds.nbytes[x]) > lo
                    for x in loads
                )
                if fence:
                    continue
            wait_loc = int(self.index.futures.wait_loc[cmds.future[c]])
            by_loc[wait_loc].append(c)
        out = []
        for loc_id, group in by_loc.items():
            dropped = frozenset(self.wait_step[c] for c in group)
            kind = "send" if self.prog.kind[self.issue_step[group[0]]] == SEND else "store"
            out.append(_Group("KB108", loc_id, group, {}, dropped, info={"kind": kind}))
        return out

    def early_receive_groups(self) -> list[_Group]:
        """KB109: receives waited right after they were posted, work following the wait."""
        cmds = self.index.commands
        kinds = self.prog.kind
        by_loc: dict[int, list[int]] = defaultdict(list)
        later: dict[int, int] = {}
        for c, s in self.wait_step.items():
            post = self.issue_step.get(c)
            if post is None or kinds[post] != RECV or self.stall.get(c, 0) <= 0:
                continue
            if self.compute_steps[s] - self.compute_steps[post + 1] > 0:
                continue
            nxt = s + 1
            while nxt < self.n and kinds[nxt] not in (WAIT, BARRIER):
                nxt += 1
            if self.compute_steps[nxt] - self.compute_steps[s + 1] <= 0:
                continue
            later[s] = nxt
            by_loc[int(self.index.futures.wait_loc[cmds.future[c]])].append(c)
        out = []
        for loc_id, group in by_loc.items():
            keys = {self.wait_step[c]: later[self.wait_step[c]] - 0.5 for c in group}
            out.append(_Group("KB109", loc_id, group, keys, info={}))
        return out

    # --- findings -----------------------------------------------------------------

    def groups(self) -> list[tuple[_Group, int]]:
        """Every group worth reporting with its saving, each wait in one group at most.

        A group's saving is its fix's gain alone, or, when fixes only pay together
        (two loads of one tile, each hiding the other's stall), its share of their
        joint gain by the avoidable stall it covers, whichever is larger.
        """
        if not hasattr(self, "_groups"):
            self._groups = self._find_groups()
        return self._groups

    def _find_groups(self) -> list[tuple[_Group, int]]:
        found: list[tuple[_Group, int]] = []
        taken: set[int] = set()
        for g in self.out_of_order_groups():
            if g.cmds:
                found.append((g, self.gain(g)))
                taken.update(g.cmds)
        # A load that queued behind later-needed loads is KB103's only when reordering
        # the issues pays more than issuing it ahead (then the order is the mistake).
        queued = {g.loc_id: g for g in self.queued_groups()}
        for g in self.stream_groups(taken):
            rival = queued.get(g.loc_id)
            gain = self.gain(g)
            if rival is not None:
                rival.cmds = [c for c in rival.cmds if c not in taken]
                rival_gain = self.gain(rival) if rival.cmds else 0
                # A tie goes to KB103 unless the load was also issued late (KB101/KB102):
                # moving a load that is not late above another one is a reorder.
                if rival_gain > 1.02 * gain or (g.rule == "KB107" and rival_gain >= 0.98 * gain):
                    continue
                del queued[g.loc_id]
            g.cmds = [c for c in g.cmds if c not in taken]
            if g.cmds:
                found.append((g, gain))
                taken.update(g.cmds)
        for g in [*queued.values(), *self.early_completion_groups(), *self.early_receive_groups()]:
            g.cmds = [c for c in g.cmds if c not in taken]
            if g.cmds:
                found.append((g, self.gain(g)))
                taken.update(g.cmds)
        found = self._paying(found)
        if len(found) > 1:
            joint = self.gain(*(g for g, _ in found))
            charged = [sum(self.avoidable.get(c, 0) for c in g.cmds) for g, _ in found]
            total = sum(charged) or 1
            found = [
                (g, max(gain, joint * a // total))
                for (g, gain), a in zip(found, charged, strict=True)
            ]
            self.joint = joint
        else:
            self.joint = found[0][1] if found else 0
        return [(g, saving) for g, saving in _merged(found) if saving >= self.floor()]

    def _paying(self, found: list[tuple[_Group, int]]) -> list[tuple[_Group, int]]:
        """The groups whose fixes pay: those that gain alone, and those that only gain
        together (a depth-1 pipeline's K and V streams: deepening either alone just
        queues it ahead of the other on the read channel), kept when they add to the
        joint gain, each one that adds nothing dropped again."""
        paying = [(g, gain) for g, gain in found if gain > 0]
        rest = [(g, gain) for g, gain in found if gain <= 0]
        if not rest or len(rest) > _MAX_JOINT_TRIALS:
            return paying
        base = self.gain(*(g for g, _ in paying)) if paying else 0
        together = paying + rest
        best = self.gain(*(g for g, _ in together))
        if best <= base:
            return paying
        for item in rest:
            trial = [x for x in together if x is not item]
            gain = self.gain(*(g for g, _ in trial))
            if gain >= best:
                together, best = trial, gain
        return together

    def findings(self) -> list[Finding]:
        groups = self.groups()
        out = [self._finding(g, saving) for g, saving in groups]
        below = self._below_bound(self.joint)
        if below is not None:
            out.append(below)
        return out

    def wait_causes(self) -> list[WaitCause]:
        charged: dict[int, str] = {}
        for g, _ in sorted(self.groups(), key=lambda x: _PRIORITY.index(x[0].rule)):
            for c in g.cmds:
                charged.setdefault(c, g.rule)
        fut = self.index.commands.future
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
                    rule=charged.get(c) if avoidable > 0 else None,
                )
            )
        return out

    def _finding(self, g: _Group, saving: int) -> Finding:
        index, prog = self.index, self.prog
        cmds, futs = index.commands, index.futures
        loc = index.loc(g.loc_id)
        rows = g.cmds[:MAX_OCCURRENCE_EVENTS]
        events: set[int] = set()
        for c in rows:
            if c in self.issue_step:
                events.add(prog.event[self.issue_step[c]])
            f = int(cmds.future[c])
            if 0 <= f < len(futs.wait_begin):
                events.update(int(e) for e in (futs.wait_begin[f], futs.wait_end[f]) if e >= 0)
        times = event_times(index, np.array(sorted(events), dtype=np.int64))
        stall = sum(self.stall.get(c, 0) for c in g.cmds)
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
            count=len(g.cmds),
            stall=int(stall),
            call_loc=getattr(loc, "caller", None),
            line_id=line_id(g.rule, loc, prog.pe),
        )

    def _below_bound(self, explained: int) -> Finding | None:
        prog, index = self.prog, self.index
        achieved, bound = prog.achieved, self.bound
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
        )


def _merged(found: list[tuple[_Group, int]]) -> list[tuple[_Group, int]]:
    """One group per rule and issue line: streams split by their wait lines (two loads
    of a tile issued from one line) are one finding, one id, their savings added."""
    out: dict[tuple[str, int], tuple[_Group, int]] = {}
    for g, saving in found:
        key = (g.rule, g.loc_id)
        if key not in out:
            out[key] = (g, saving)
            continue
        first, total = out[key]
        first.cmds = sorted(first.cmds + g.cmds)
        first.moves = {**first.moves, **g.moves}
        out[key] = (first, total + saving)
    return list(out.values())
