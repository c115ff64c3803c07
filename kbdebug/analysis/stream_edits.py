"""The fixes of issues: edits that move loads earlier, for a PE's findings.

KB101, KB102 and KB107 move a stream's loads ahead of their waits (one tile, or
as deep as the re-timing gains most within scratch); KB103 moves a load above
those queued ahead of it on the read channel that are needed later. Mixed into
:class:`kbdebug.analysis.findings._Diagnosis`, whose state they read.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from kbdebug.analysis.finding import IMMEDIATE_MAX_WORK
from kbdebug.replay.index import NONE
from kbdebug.replay.timing import event_times

#: Deepest prefetch a re-timing tries (tiles ahead of the wait).
MAX_AHEAD = 16
#: Loads ahead in a channel's queue examined per queued load (KB103).
QUEUE_LOOKBACK = 32


@dataclass
class _Group:
    """Occurrences of one rule at one line: the commands, and the fix to re-time."""

    rule: str
    loc_id: int
    #: Commands whose waits it covers (loads, stores, receives; composites for KB110).
    cmds: list[int]
    #: The fix: steps moved to new sort keys, steps dropped, waits re-pointed (step -> cmd),
    #: steps' cycles replaced (step -> cycles).
    moves: dict[int, float]
    drops: frozenset[int] = frozenset()
    repoint: dict[int, int] | None = None
    cycles: dict[int, int] | None = None
    #: Rule-specific figures for the message.
    info: dict | None = None
    #: Other lines this one fix changes (their loc ids).
    also: tuple[int, ...] = ()


class StreamEdits:
    """KB101, KB102, KB107 and KB103 candidates of one PE's diagnosis."""

    def _streams(self) -> dict[tuple[int, int], list[int]]:
        """Loads by the line that issues them and the line that waits on them, in issue
        order. A helper that issues every stream's loads from one line (a pipeline's
        priming issues K0 and V0 from the same call) still has one stream per line
        that consumes them."""
        streams: dict[tuple[int, int], list[int]] = defaultdict(list)
        futures = self.index.futures
        fut_of = self.index.commands.future
        by_wait: dict[int, list[int]] = defaultdict(list)
        for c in self.loads():
            f = int(fut_of[c])
            waited_at = int(futures.wait_loc[f]) if 0 <= f < len(futures.wait_loc) else NONE
            if waited_at == NONE:
                streams[(int(self.loc[c]), NONE)].append(c)
            else:
                by_wait[waited_at].append(c)
        # Loads one line waits on are one stream, whichever lines issue them (a prologue
        # that primes the ring and the loop that refills it): deepening it primes more in
        # the prologue. The line named is the one that issues most of them.
        for waited_at, loads in by_wait.items():
            lines = [int(self.loc[c]) for c in loads]
            streams[
                (max(set(lines), key=lambda x: (lines.count(x), -lines.index(x))), waited_at)
            ] = loads
        return streams

    def _ahead_moves(self, stream: list[int], ahead: int, late: bool = True) -> dict[int, float]:
        """Moves that issue each load of ``stream`` issued ``ahead`` tiles before its wait:
        right after the wait of the load ``ahead`` places earlier in the stream (the
        first ones where the stream's first load is, or, for a stream issued late, as
        early as they can), never above a host read before it, never later than it was.
        A prefetch made deeper (``late`` false) primes after a host read where the
        stream's first load after that read is issued, as a loop over gathered pages
        that reads each sequence's page table primes that sequence's first pages."""
        keys: dict[int, float] = {}
        primed = (self.barrier_before[self.issue_step[stream[0]]] if late else -1) + 0.5
        issued = [self.issue_step[c] for c in stream]
        for i, c in enumerate(stream):
            s = self.issue_step[c]
            if i >= ahead:
                anchor = self.wait_step.get(stream[i - ahead], self.issue_step[stream[i - ahead]])
                key = anchor + 0.5
            else:
                key = primed
            key = max(key, self.barrier_before[s] + 0.5)
            if not late:  # no higher than the first of the stream's loads after the host read
                key = max(key, issued[bisect.bisect_right(issued, self.barrier_before[s])] - 0.5)
            if key < s:
                keys[s] = key + i * 1e-6
        return keys

    def _first_above(self, stream: list[int], moves: dict[int, float]) -> tuple[int, bool]:
        """Where the re-timing issues the stream's first load (the kernel's start, or right
        after a host read): the loc id of the step it goes above and whether that line
        runs once (a line the loop repeats is the loop's top); NONE when it stays put."""
        s = self.issue_step[stream[0]]
        key = moves.get(s)
        step = max(0, math.ceil(key)) if key is not None else s
        if step >= s:
            return NONE, False
        if not hasattr(self, "_step_locs"):
            events = np.asarray(self.prog.event, dtype=np.int64)
            self._step_locs = np.asarray(self.index.columns.loc)[events].astype(np.int64)
        loc = int(self._step_locs[step])
        # Steps of its kind (a blocking load is a load and a wait at one line).
        kinds = np.frombuffer(self.prog.kind, dtype=np.int8)
        same = (self._step_locs == loc) & (kinds == kinds[step])
        return loc, int(np.count_nonzero(same)) == 1

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

    def _depth_cap(self, streams: list[list[int]]) -> int:
        """The deepest prefetch the PE's scratch holds: the recorded peak plus one more
        tile of every stream per extra tile ahead must fit its capacity."""
        hw = self.prog.hw
        nbytes = self.index.commands.nbytes
        per_tile = sum(int(nbytes[s[0]]) for s in streams if s) or 1
        extra = max(0, hw.scratch_bytes - self.prog.scratch_peak) // per_tile
        return max(1, min(MAX_AHEAD, 1 + int(extra)))

    def stream_groups(self, taken: set[int]) -> list[_Group]:
        """KB101, KB102, KB107: loads whose waits stall for want of an earlier issue.

        The streams are re-timed together (two loads of one tile only pay when both
        move), each one tile ahead, or deeper at the depth whose re-timing gains most.
        """
        lat = self.prog.hw.hbm_latency
        found = []
        streams = self._streams()
        # Streams that stall, and those issued beside them: a load whose wait never stalls
        # may only be hiding behind another's (two loads of one step, both late).
        if not any(self.avoidable.get(c, 0) > 0 for st in streams.values() for c in st):
            return []
        for (loc_id, _), stream in streams.items():
            waited = [c for c in stream if c in self.stall and c not in taken]
            if not waited:
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
            rule = "KB101" if self.blocking[stream[0]] else "KB102" if late else "KB107"
            info = {
                "transfer": transfer,
                "work": per_iter,
                "between": int(np.median(between)),
                "movable": int(movable),
            }
            found.append((loc_id, stream, waited, rule, info))
        if not found:
            return []
        cap = self._depth_cap([stream for _, stream, _, _, _ in found])
        # Depths to re-time: one tile, what latency over work suggests, and around it.
        guesses = {1, 2, cap}
        for _, _, _, _, info in found:
            if info["work"] > 0:
                need = math.ceil((info["transfer"] + lat) / info["work"])
                guesses.update({need, need + 1, max(1, need - 1)})
        # Deeper than a stream's tiles is all of them up front: the same re-timing, so a
        # depth past the longest stream is tried (and said) as that stream's length.
        longest = max(len(stream) for _, stream, _, _, _ in found)
        depths = sorted({min(d, longest) for d in guesses if 1 <= d <= cap})
        trials = []
        for ahead in depths:
            groups = []
            for loc_id, stream, waited, rule, info in found:
                depth = min(ahead, len(stream))
                moves = self._ahead_moves(stream, depth, rule != "KB107")
                info = {**info, "ahead": depth, "tiles": len(stream)}
                info["first_above"], info["first_above_once"] = self._first_above(stream, moves)
                groups.append(_Group(rule, loc_id, waited, moves, info=info))
            trials.append((self.gain(*groups), groups))
        # The shallowest depth that gains (almost) the most: each tile ahead holds scratch.
        top = max(gain for gain, _ in trials)
        if top <= 0:  # moving the issues earlier only loses time: nothing to suggest
            return []
        return next(groups for gain, groups in trials if gain >= 0.95 * top)

    def queued_groups(self) -> list[_Group]:
        """KB103: loads that queued behind later-needed loads on their read channel."""
        index = self.index
        cmds = index.commands
        loads = self.loads()
        need_of = {c: self.wait_step.get(c, 1 << 60) for c in loads}
        culprits: dict[int, int] = {}
        for ch, info in enumerate(index.channels):
            if info.get("kind") != "dma_read" or info.get("pe") != self.prog.pe:
                continue
            on = np.array(
                [c for c in index.channel_cmds[ch].tolist() if c in need_of], dtype=np.int64
            )
            # Times of this channel's loads only: of every command, per PE, they cost
            # O(PEs x commands) on a mesh.
            on = on[event_times(index, cmds.grant[on]) >= 0] if len(on) else on
            if len(on) < 2:
                continue
            on = on[np.argsort(event_times(index, cmds.grant[on]), kind="stable")]
            grant, request = (
                event_times(index, cmds.grant[on]),
                event_times(index, cmds.request[on]),
            )
            transfer = np.array([self.prog.transfer[c] for c in on.tolist()], dtype=np.int64)
            released = event_times(index, cmds.release[on])
            release = np.where(released >= 0, released, grant + transfer)
            need = np.array([need_of[c] for c in on.tolist()], dtype=np.int64)
            step = np.array([self.issue_step[c] for c in on.tolist()], dtype=np.int64)
            stalled = np.array([self.stall.get(c, 0) > 0 for c in on.tolist()])
            queued = np.flatnonzero((grant > request) & stalled & ~(self.blocking[on] > 0))
            culprit = np.full(len(queued), -1, dtype=np.int64)
            for d in range(1, QUEUE_LOOKBACK + 1):
                # The farthest load ahead in the queue that is needed later: the issue
                # moves above all of them.
                j = queued - d
                ok = j >= 0
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
        # One group per line that waits on them (the prologue's load and the loop's, one
        # fix), named by the line that issues most of them.
        futures, fut_of = index.futures, cmds.future
        by_wait: dict[int, list[int]] = defaultdict(list)
        for c in sorted(culprits, key=lambda c: self.issue_step[c]):
            f = int(fut_of[c])
            by_wait[int(futures.wait_loc[f]) if 0 <= f < len(futures.wait_loc) else NONE].append(c)
        by_loc: dict[int, list[int]] = {}
        for group in by_wait.values():
            lines = [int(self.loc[c]) for c in group]
            by_loc.setdefault(max(set(lines), key=lines.count), []).extend(group)
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

    def streams_together(self, streams: list[tuple[_Group, int]]) -> list[tuple[_Group, int]]:
        """Stream fixes that only pay together (two loads of one step, both late: fixing
        either alone leaves the step waiting for the other) as one group naming every
        line, with their joint gain; the others as they are. Every stream may lead a team
        of its own: a page-gathering loop's K and V pair is one fix even where another
        stream (the page table's load) gains more alone."""
        if len(streams) < 2:
            return [x for x in streams if x[1] > 0]

        def stalled(x: tuple[_Group, int]) -> int:
            return sum(self.avoidable.get(c, 0) for c in x[0].cmds)

        # A fix that loses time alone gains no less than one that changes nothing: the
        # lead is the best gain, the most avoidable stall among equals (else a load that
        # never stalled avoidably, gaining 0, leads two streams that each lose alone and
        # only pay together, and keeps them out).
        rest = sorted(streams, key=lambda x: (-max(x[1], 0), -stalled(x)))
        out: list[tuple[_Group, int]] = []
        while rest:
            team = [rest.pop(0)]
            joint = max(team[0][1], 0)
            for item in sorted(rest, key=lambda x: -stalled(x)):
                # Of another rule, only a stream of the same loop (as many loads) joins.
                lead = team[0][0]
                if item[0].rule != lead.rule and len(item[0].cmds) != len(lead.cmds):
                    continue
                # A stream that never stalls joins only one like the lead's (a tile's
                # other load), not a load of the prologue.
                if stalled(item) <= 0 and 2 * len(item[0].cmds) < len(team[0][0].cmds):
                    continue
                trial = self.gain(*(g for g, _ in team), item[0])
                # Kept when the two gain together clearly more than each does alone.
                if trial > joint + max(item[1], 0) + self.floor() // 3:
                    team.append(item)
                    joint = trial
            rest = [x for x in rest if all(x is not t for t in team)]
            if len(team) > 1:
                out.append((self._merged_team(team, stalled), joint))
            elif team[0][1] > 0:
                out.append(team[0])
        return out

    def _merged_team(self, team: list[tuple[_Group, int]], stalled) -> _Group:
        """One group for the streams of ``team``: the first line in program order that
        stalls a tenth of the team's cycles carries the finding, the others are named
        with it."""
        ordered = sorted(team, key=lambda x: min(self.issue_step[c] for c in x[0].cmds))
        lead = max(ordered, key=stalled)[0]
        total = sum(stalled(x) for x in ordered)
        first = next(g for g, _ in ordered if stalled((g, 0)) * 10 >= total or g is lead)
        ordered = [x for x in ordered if x[0] is first] + [x for x in ordered if x[0] is not first]
        return _Group(
            lead.rule,
            first.loc_id,
            sorted(c for g, _ in ordered for c in g.cmds),
            {s: k for g, _ in ordered for s, k in g.moves.items()},
            info={**(lead.info or {}), "lines": len(ordered)},
            also=tuple(dict.fromkeys(g.loc_id for g, _ in ordered[1:] if g.loc_id != first.loc_id)),
        )


def merge_by_line(found: list[tuple[_Group, int]]) -> list[tuple[_Group, int]]:
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
