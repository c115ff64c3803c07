"""Findings: where a pipeline serialised unexpectedly, each with its source line and a suggestion.

Every rule is computed from the index columns with numpy (never by stepping),
so a million-event trace is diagnosed in a fraction of a second. A rule first
finds its *occurrences* (one per load or wait), then they are aggregated into
one :class:`Finding` per (rule, PE, source line) carrying the count, the
cycles, the span from the first to the last occurrence and the events of the
first ``MAX_OCCURRENCE_EVENTS`` occurrences.

Finding ids are stable across runs of the same source, so CI can gate on them:
``RULE:FILE:LINE`` for PE 0 and ``RULE:FILE:LINE:peN`` for PE N > 0, where FILE
is the project-relative path the trace records (``KB101:emulator/kernels/
attention.py:46``). ``matches`` selects findings by id, rule code or ``any``.

The rules and their thresholds (module constants below):

KB101 blocking-load
    A blocking ``tl.load`` whose wait stalled, followed (before the kernel's
    next wait) by compute that could have hidden at least ``BLOCKING_MIN_HIDDEN``
    of that stall. Cycles: min(stall, following compute) per occurrence.
KB102 wait-right-after-issue
    A ``tl.load_async`` waited with no work in between (compute on its PE
    between the issue and the wait under ``IMMEDIATE_MAX_WORK`` of the load's
    issue-to-data latency), the wait stalling for at least
    ``IMMEDIATE_MIN_STALL`` of that latency. Waits before the PE's first compute
    after its first ``load_async`` are a pipeline filling up and are skipped.
    Keyed by the ``load_async`` line. Cycles: the stall.
KB103 queued-behind
    A load that queued on its read channel behind loads that were needed later
    (their wait comes after this load's wait, or never), and whose own wait
    stalled: a priority inversion fixed by reordering the issues. A load that
    queues behind earlier-needed loads (every load of a DMA-bound correct
    pipeline) is not flagged. Looks back at most ``QUEUE_LOOKBACK`` loads.
    Cycles: min(stall, channel time spent on later-needed loads while it
    queued), counted when at least ``QUEUED_MIN_SHARE`` of its own transfer.
KB104 out-of-order-wait
    A ``tl.wait`` on a load or receive future that stalled while an earlier
    future of the same PE (a load or receive issued before it) was still
    pending: not waited yet (never-waited ones count until their data lands).
    Blocking loads are KB101's, and a wait whose load is a KB103 occurrence
    (it queued behind the pending one) is left to KB103, which names the fix.
    Keyed by the wait's line. Cycles: the stall.
KB105 idle-read-channel
    Between a PE's first and last load issue, compute that ran while every
    read channel of the PE was idle, charged to the next load issued after it,
    and counted only up to that load's own stall (in a compute-bound kernel
    the channel has nothing to do, which is fine). Flagged when the counted
    cycles reach ``IDLE_MIN_SHARE`` of the PE's compute in that window; one
    finding per line of the loads they are charged to (lines under
    ``IDLE_MIN_LINE_SHARE`` of the PE's total are left out).
KB106 overlap-efficiency
    A PE whose kernel (start to end) took much longer than the bound
    max(DMA read busy / read channels, GEMM + MATH busy):
    bound / achieved < ``EFFICIENCY_THRESHOLD``. Keyed by the kernel's
    definition line. Cycles: achieved - bound. Short kernels can fall below
    it on the first load's latency alone, which nothing can hide.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from emulator.trace.schema import Kind, SourceLoc
from kbdebug.replay.index import NONE, TraceIndex
from kbdebug.replay.summary import COMPUTE_KINDS, event_times, hold_cycles, pe_efficiency

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay

#: Rule code -> short name.
RULES = {
    "KB101": "blocking-load",
    "KB102": "wait-right-after-issue",
    "KB103": "queued-behind",
    "KB104": "out-of-order-wait",
    "KB105": "idle-read-channel",
    "KB106": "overlap-efficiency",
}

#: KB101: share of a blocking load's stall the following compute must be able to hide.
BLOCKING_MIN_HIDDEN = 0.2
#: KB102: share of the load's issue-to-data latency the wait must stall for.
IMMEDIATE_MIN_STALL = 0.5
#: KB102: compute between issue and wait below this share of the latency counts as no work.
IMMEDIATE_MAX_WORK = 0.1
#: KB103: loads ahead in the channel queue examined per queued load.
QUEUE_LOOKBACK = 32
#: KB103: lost cycles an occurrence needs, as a share of the queued load's own transfer.
QUEUED_MIN_SHARE = 0.1
#: KB105: counted idle-during-compute cycles, as a share of the PE's compute in the window.
IDLE_MIN_SHARE = 0.2
#: KB105: a line's share of the PE's counted idle cycles needed for its own finding.
IDLE_MIN_LINE_SHARE = 0.05
#: KB106: bound / achieved below this is flagged.
EFFICIENCY_THRESHOLD = 0.75
#: Occurrences whose events a finding lists.
MAX_OCCURRENCE_EVENTS = 50

_PIPELINE_HINT = "see TilePipeline in emulator/kernels/pipeline.py"


@dataclass(frozen=True)
class Finding:
    """One diagnosis: what serialised, the line to change, and what fixing it is worth."""

    #: Edit-proof id: rule, file, function, the tl call's text and its ordinal, ":peN" for
    #: PE N > 0 (``kbdebug.analysis.identity``); stable while unrelated lines move.
    id: str
    #: Rule code, e.g. "KB101".
    rule: str
    #: Short rule name, e.g. "blocking-load".
    title: str
    pe: int
    #: Cycle span the finding covers.
    start: int
    end: int
    #: Event indices involved, in order; the first is where the debugger jumps.
    events: tuple[int, ...]
    #: The line to change (inside a helper when the tl call is in one).
    loc: SourceLoc | None
    #: One line saying what happened.
    message: str
    #: One line saying what to change.
    suggestion: str
    #: Estimated cycles the PE's kernel saves when this is fixed.
    saving: int = 0
    #: ``saving`` as a share of the PE's kernel time (0..1).
    share: float = 0.0
    #: Occurrences aggregated into this finding (loads, waits; 1 for KB106).
    count: int = 1
    #: Stalled cycles of the waits involved (0 where the rule is not about waits).
    stall: int = 0
    #: The kernel line that called the helper holding ``loc`` (None outside helpers).
    call_loc: SourceLoc | None = None
    #: ``RULE:FILE:LINE[:peN]``: the line-based form, for humans and older selectors.
    line_id: str = ""


def finding_id(rule: str, loc: SourceLoc | None, pe: int) -> str:
    """``RULE:FILE:LINE``, with ``:peN`` appended for PE N > 0."""
    where = f"{loc.file}:{loc.line}" if loc is not None else "<unknown>:0"
    return f"{rule}:{where}" + (f":pe{pe}" if pe else "")


def matches(finding: Finding, selector: str) -> bool:
    """Whether ``selector`` picks ``finding``: "any", a rule code, or an id.

    An id without the ``:peN`` suffix picks that line on every PE.
    """
    if selector == "any":
        return True
    return finding.id == selector or finding.id.startswith(selector + ":")


def find_all(replay: Replay) -> list[Finding]:
    """Every finding in the trace, ordered by first event."""
    facts = _Facts(replay.index)
    inversions = _queue_inversions(facts)
    findings = [
        *_blocking_load(facts),
        *_wait_right_after_issue(facts),
        *_queued_behind(facts, inversions),
        *_out_of_order_wait(facts, inversions),
        *_idle_read_channel(facts),
        *_overlap_efficiency(facts),
    ]
    findings.sort(key=lambda f: (f.events[0] if f.events else f.start, f.id))
    return findings


# --- what the rules look at -----------------------------------------------------------


class _Facts:
    """Per-command arrays (indexed by command id) the rules share."""

    def __init__(self, index: TraceIndex):
        self.index = index
        cmds, futs = index.commands, index.futures
        n = len(cmds.issue)
        kinds = np.array([str(ch.get("kind", "")) for ch in index.channels] + [""])
        chan_kind = kinds[np.where(cmds.channel >= 0, cmds.channel, len(kinds) - 1)]
        ops = np.array(index.strings + [""])[np.where(cmds.op >= 0, cmds.op, len(index.strings))]
        valid = cmds.issue >= 0
        #: DMA reads: tl.load and tl.load_async (also before they reach a channel).
        self.is_load = valid & ((chan_kind == "dma_read") | np.isin(ops, ["load", "load_async"]))
        self.is_recv = valid & (ops == "recv_async")
        self.is_compute = valid & np.isin(chan_kind, COMPUTE_KINDS)
        self.blocking = cmds.blocking > 0
        self.pe = cmds.pe
        self.loc = cmds.loc
        self.issue = cmds.issue
        self.t_issue = event_times(index, cmds.issue)
        self.t_request = event_times(index, cmds.request)
        self.t_grant = event_times(index, cmds.grant)
        self.t_release = event_times(index, cmds.release)
        self.t_complete = event_times(index, cmds.complete)
        self.hold = hold_cycles(index)
        # The future's wait, per command (-1 / 0 when the command has none).
        fut = np.where((cmds.future >= 0) & (cmds.future < len(futs.cmd)), cmds.future, NONE)
        has = fut >= 0
        self.future = fut

        def per_cmd(values: np.ndarray, fill: int) -> np.ndarray:
            out = np.full(n, fill, dtype=np.int64)
            out[has] = values[fut[has]]
            return out

        self.wait_begin = per_cmd(futs.wait_begin, NONE)
        self.wait_end = per_cmd(futs.wait_end, NONE)
        self.wait_loc = per_cmd(futs.wait_loc, NONE)
        self.stall = per_cmd(futs.stall, 0)
        self.t_wait_begin = event_times(index, self.wait_begin)
        self.t_wait_end = event_times(index, self.wait_end)
        cmd_ids = np.flatnonzero(valid)
        self._cmds_of_pe = _by_pe(cmd_ids, self.pe[cmd_ids], index.n_pes)
        waits = np.flatnonzero(index.columns.kind == Kind.WAIT_BEGIN)
        self._waits_of_pe = _by_pe(waits, index.columns.pe[waits], index.n_pes)

    def loc_of(self, loc_id: int) -> SourceLoc | None:
        return self.index.loc(int(loc_id))

    def pe_cmds(self, mask: np.ndarray, pe: int) -> np.ndarray:
        """Command ids matching ``mask`` on ``pe``, in issue order."""
        ids = self._cmds_of_pe[pe]
        return ids[mask[ids]]

    def pe_wait_begins(self, pe: int) -> np.ndarray:
        """Indices of the WAIT_BEGIN events of ``pe``, in order."""
        return self._waits_of_pe[pe]


def _by_pe(items: np.ndarray, pes: np.ndarray, n_pes: int) -> list[np.ndarray]:
    """Sorted ``items`` split by their PE ``pes``, each part still sorted."""
    order = np.argsort(pes, kind="stable")
    bounds = np.searchsorted(pes[order], np.arange(n_pes + 1))
    return [items[order[bounds[p] : bounds[p + 1]]] for p in range(n_pes)]


@dataclass
class _Occurrences:
    """One row per occurrence of a rule; aggregated by (pe, key loc) into findings."""

    #: Command ids of the loads (or waited futures' commands) involved.
    cmd: np.ndarray
    pe: np.ndarray
    #: Loc id the finding is keyed by.
    loc: np.ndarray
    start: np.ndarray
    end: np.ndarray
    #: (n, k) event indices, -1 padding.
    events: np.ndarray
    stall: np.ndarray
    lost: np.ndarray


@dataclass(frozen=True)
class _Group:
    """The occurrences of one (pe, loc), in event order."""

    pe: int
    loc: SourceLoc | None
    rows: np.ndarray
    occ: _Occurrences

    @property
    def count(self) -> int:
        return len(self.rows)

    @property
    def stall(self) -> int:
        return int(self.occ.stall[self.rows].sum())

    @property
    def lost(self) -> int:
        return int(self.occ.lost[self.rows].sum())

    def median(self, values: np.ndarray) -> int:
        return int(np.median(values[self.occ.cmd[self.rows]]))


def _groups(facts: _Facts, occ: _Occurrences) -> Iterable[_Group]:
    if not len(occ.cmd):
        return
    order = np.lexsort((occ.events[:, 0], occ.loc, occ.pe))
    pe, loc = occ.pe[order], occ.loc[order]
    starts = np.flatnonzero(np.r_[True, (pe[1:] != pe[:-1]) | (loc[1:] != loc[:-1])])
    for rows in np.split(order, starts[1:]):
        first = rows[0]
        yield _Group(int(occ.pe[first]), facts.loc_of(occ.loc[first]), rows, occ)


def _finding(
    rule: str,
    group: _Group,
    message: str,
    suggestion: str,
) -> Finding:
    occ, rows = group.occ, group.rows
    events = occ.events[rows[:MAX_OCCURRENCE_EVENTS]].ravel()
    return Finding(
        id=finding_id(rule, group.loc, group.pe),
        rule=rule,
        title=RULES[rule],
        pe=group.pe,
        start=int(occ.start[rows].min()),
        end=int(occ.end[rows].max()),
        events=tuple(int(e) for e in np.unique(events[events >= 0])),
        loc=group.loc,
        message=message,
        suggestion=suggestion,
        saving=group.lost,
        count=group.count,
        stall=group.stall,
    )


def _where(loc: SourceLoc | None) -> str:
    return f"{os.path.basename(loc.file)}:{loc.line}" if loc is not None else "an unknown line"


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count:,} times"


# --- the rules ------------------------------------------------------------------------


def _compute_between(facts: _Facts, pe: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per (lo, hi) event-index pair: cycles of the compute commands issued between them."""
    comp = facts.pe_cmds(facts.is_compute, pe)
    at = facts.issue[comp]
    prefix = np.r_[0, np.cumsum(facts.hold[comp])]
    a = np.searchsorted(at, lo, side="right")
    b = np.searchsorted(at, hi, side="left")
    return prefix[np.maximum(a, b)] - prefix[a]


def _blocking_load(facts: _Facts) -> list[Finding]:
    out: list[Finding] = []
    for pe in range(facts.index.n_pes):
        loads = facts.pe_cmds(facts.is_load & facts.blocking, pe)
        loads = loads[(facts.wait_end[loads] >= 0) & (facts.stall[loads] > 0)]
        if not len(loads):
            continue
        waits = facts.pe_wait_begins(pe)
        after = facts.wait_end[loads]
        k = np.searchsorted(waits, after, side="right")
        nxt = np.where(k < len(waits), waits[np.minimum(k, len(waits) - 1)], facts.index.n_events)
        compute = _compute_between(facts, pe, after, nxt)
        hidden = np.minimum(facts.stall[loads], compute)
        keep = (hidden > 0) & (hidden >= BLOCKING_MIN_HIDDEN * facts.stall[loads])
        loads, compute, hidden = loads[keep], compute[keep], hidden[keep]
        occ = _Occurrences(
            cmd=loads,
            pe=facts.pe[loads],
            loc=facts.loc[loads],
            start=facts.t_issue[loads],
            end=facts.t_wait_end[loads],
            events=np.stack(
                [facts.issue[loads], facts.wait_begin[loads], facts.wait_end[loads]], axis=1
            ),
            stall=facts.stall[loads],
            lost=hidden,
        )
        following = np.zeros(len(facts.hold), dtype=np.int64)
        following[loads] = compute
        for g in _groups(facts, occ):
            message = (
                f"tl.load at {_where(g.loc)} stalled {_times(g.count)} for {g.stall:,} cycles; "
                f"its {g.median(facts.hold)}-cycle transfer could have run under the "
                f"{g.median(following):,} cycles of compute that follows"
            )
            suggestion = (
                "issue it with tl.load_async one tile ahead and tl.wait just before use "
                f"({_PIPELINE_HINT})"
            )
            out.append(_finding("KB101", g, message, suggestion))
    return out


def _wait_right_after_issue(facts: _Facts) -> list[Finding]:
    out: list[Finding] = []
    for pe in range(facts.index.n_pes):
        asyncs = facts.pe_cmds(facts.is_load & ~facts.blocking, pe)
        if not len(asyncs):
            continue
        comp_issues = facts.issue[facts.pe_cmds(facts.is_compute, pe)]
        # The pipeline fills until the first compute after the first load_async.
        k = np.searchsorted(comp_issues, facts.issue[asyncs[0]], side="right")
        filled = comp_issues[k] if k < len(comp_issues) else facts.index.n_events
        loads = asyncs[(facts.wait_begin[asyncs] > filled) & (facts.stall[asyncs] > 0)]
        work = _compute_between(facts, pe, facts.issue[loads], facts.wait_begin[loads])
        latency = facts.t_complete[loads] - facts.t_issue[loads]
        stall = facts.stall[loads]
        keep = (work < IMMEDIATE_MAX_WORK * latency) & (stall >= IMMEDIATE_MIN_STALL * latency)
        loads, latency = loads[keep], latency[keep]
        occ = _Occurrences(
            cmd=loads,
            pe=facts.pe[loads],
            loc=facts.loc[loads],
            start=facts.t_issue[loads],
            end=facts.t_wait_end[loads],
            events=np.stack(
                [facts.issue[loads], facts.wait_begin[loads], facts.wait_end[loads]], axis=1
            ),
            stall=facts.stall[loads],
            lost=facts.stall[loads],
        )
        lat = np.zeros(len(facts.hold), dtype=np.int64)
        lat[loads] = latency
        for g in _groups(facts, occ):
            wait_loc = facts.loc_of(_most_common(facts.wait_loc[occ.cmd[g.rows]]))
            share = g.stall / max(int(lat[occ.cmd[g.rows]].sum()), 1)
            message = (
                f"tl.load_async at {_where(g.loc)} was waited at {_where(wait_loc)} with no "
                f"work in between {_times(g.count)}; the waits stalled {g.stall:,} cycles, "
                f"{share:.0%} of the loads' {g.median(lat):,}-cycle latency"
            )
            suggestion = (
                "issue the load a tile ahead of its tl.wait so compute runs while it is in "
                f"flight ({_PIPELINE_HINT})"
            )
            out.append(_finding("KB102", g, message, suggestion))
    return out


def _most_common(values: np.ndarray) -> int:
    uniq, counts = np.unique(values, return_counts=True)
    return int(uniq[np.argmax(counts)]) if len(uniq) else NONE


def _need(facts: _Facts, cmds: np.ndarray) -> np.ndarray:
    """When each load's data was needed: its wait's event index, never-waited ones last."""
    wb = facts.wait_begin[cmds]
    return np.where(wb >= 0, wb, np.iinfo(np.int64).max)


def _queue_inversions(facts: _Facts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """KB103's occurrences: (loads, a later-needed load each queued behind, lost cycles)."""
    index = facts.index
    parts = [
        _queued_on_channel(facts, index.channel_cmds[ch])
        for ch, info in enumerate(index.channels)
        if info.get("kind") == "dma_read"
    ]
    parts = [p for p in parts if p is not None]
    if not parts:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, empty
    loads, ahead, lost = (np.concatenate(p) for p in zip(*parts, strict=True))
    return loads, ahead, lost


def _queued_behind(facts: _Facts, inversions) -> list[Finding]:
    loads, ahead_of, lost_of = inversions
    if not len(loads):
        return []
    index = facts.index
    ahead = np.full(len(facts.hold), NONE, dtype=np.int64)
    ahead[loads] = ahead_of
    occ = _Occurrences(
        cmd=loads,
        pe=facts.pe[loads],
        loc=facts.loc[loads],
        start=facts.t_request[loads],
        end=np.maximum(facts.t_wait_end[loads], facts.t_grant[loads]),
        events=np.stack(
            [
                index.commands.request[loads],
                index.commands.grant[ahead_of],
                index.commands.grant[loads],
                facts.wait_begin[loads],
            ],
            axis=1,
        ),
        stall=facts.stall[loads],
        lost=lost_of,
    )
    out: list[Finding] = []
    for g in _groups(facts, occ):
        ahead_loc = facts.loc_of(_most_common(facts.loc[ahead[occ.cmd[g.rows]]]))
        op = "tl.load" if facts.blocking[occ.cmd[g.rows[0]]] else "tl.load_async"
        message = (
            f"{op} at {_where(g.loc)} queued on the read channel {_times(g.count)} behind "
            f"loads from {_where(ahead_loc)} that were waited later, stalling its waits "
            f"{g.lost:,} cycles"
        )
        suggestion = (
            f"issue loads in the order they are waited: move this load's issue before "
            f"the ones at {_where(ahead_loc)}"
        )
        out.append(_finding("KB103", g, message, suggestion))
    return out


def _queued_on_channel(facts: _Facts, cmds: np.ndarray):
    """(loads, the later-needed load each queued behind, lost cycles) on one read channel."""
    cmds = cmds[facts.t_grant[cmds] >= 0]
    if len(cmds) < 2:
        return None
    cmds = cmds[np.argsort(facts.t_grant[cmds], kind="stable")]
    need = _need(facts, cmds)
    grant, release, request = facts.t_grant[cmds], facts.t_release[cmds], facts.t_request[cmds]
    release = np.where(release >= 0, release, grant + facts.hold[cmds])
    queued = np.flatnonzero((grant > request) & (facts.stall[cmds] > 0))
    if not len(queued):
        return None
    inverted = np.zeros(len(queued), dtype=np.int64)
    culprit = np.full(len(queued), NONE, dtype=np.int64)
    for d in range(1, QUEUE_LOOKBACK + 1):
        j = queued - d
        ok = j >= 0
        if not ok.any():
            break
        j = np.where(ok, j, 0)
        overlap = np.minimum(release[j], grant[queued]) - np.maximum(grant[j], request[queued])
        ok &= overlap > 0
        hit = ok & (need[j] > need[queued])
        if not ok.any():
            break
        inverted += np.where(hit, overlap, 0)
        culprit = np.where(hit & (culprit < 0), j, culprit)
    lost = np.minimum(inverted, facts.stall[cmds[queued]])
    keep = (lost > 0) & (lost >= QUEUED_MIN_SHARE * facts.hold[cmds[queued]])
    return cmds[queued[keep]], cmds[culprit[keep]], lost[keep]


def _out_of_order_wait(facts: _Facts, inversions) -> list[Finding]:
    out: list[Finding] = []
    # A wait whose load queued behind the pending one is KB103's (fix the issue order).
    explained = np.zeros(len(facts.hold), dtype=bool)
    explained[inversions[0]] = True
    for pe in range(facts.index.n_pes):
        data = facts.pe_cmds((facts.is_load | facts.is_recv) & (facts.future >= 0), pe)
        if len(data) < 2:
            continue
        # A future is pending from its issue until it is waited (never-waited: until it lands).
        complete = facts.index.commands.complete[data]
        pending_until = np.where(
            facts.wait_begin[data] >= 0,
            facts.wait_begin[data],
            np.where(complete >= 0, complete, np.iinfo(np.int64).max),
        )
        earlier = np.r_[NONE, np.maximum.accumulate(pending_until)[:-1]]
        hit = (
            ~facts.blocking[data]
            & ~explained[data]
            & (facts.wait_begin[data] >= 0)
            & (facts.stall[data] > 0)
            & (earlier > facts.wait_begin[data])
        )
        waits = data[hit]
        occ = _Occurrences(
            cmd=waits,
            pe=facts.pe[waits],
            loc=facts.wait_loc[waits],
            start=facts.t_wait_begin[waits],
            end=facts.t_wait_end[waits],
            events=np.stack([facts.wait_begin[waits], facts.wait_end[waits]], axis=1),
            stall=facts.stall[waits],
            lost=facts.stall[waits],
        )
        position = {int(cmd): i for i, cmd in enumerate(data[hit])}
        hit_rows = np.flatnonzero(hit)
        for g in _groups(facts, occ):
            first = hit_rows[position[int(occ.cmd[g.rows[0]])]]
            e = int(np.argmax(pending_until[:first] > facts.wait_begin[data[first]]))
            pending = int(data[e])
            message = (
                f"tl.wait at {_where(g.loc)} waited on a later future while an earlier one "
                f"(future {int(facts.future[pending])}, issued at "
                f"{_where(facts.loc_of(facts.loc[pending]))}) was still pending, "
                f"{_times(g.count)}; these waits stalled {g.stall:,} cycles"
            )
            suggestion = (
                "wait on futures in the order they were issued (a read channel delivers them "
                "in that order), or issue first the one needed first"
            )
            out.append(_finding("KB104", g, message, suggestion))
    return out


def _merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [start, end) as sorted disjoint intervals."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    new = np.r_[True, starts[1:] > ends[:-1]]
    group_end = np.r_[np.flatnonzero(new)[1:] - 1, len(starts) - 1]
    return starts[new], ends[group_end]


def _covered(starts: np.ndarray, ends: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """F(t): cycles before t covered by the disjoint sorted intervals."""
    prefix = np.r_[0, np.cumsum(ends - starts)]

    def f(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(starts, t, side="right")
        before = prefix[np.maximum(k - 1, 0)]
        last_start = starts[np.maximum(k - 1, 0)] if len(starts) else t
        last_end = ends[np.maximum(k - 1, 0)] if len(ends) else t
        inside = np.clip(np.minimum(t, last_end) - last_start, 0, None)
        return np.where(k > 0, before + inside, 0)

    return f


def _idle_read_channel(facts: _Facts) -> list[Finding]:
    out: list[Finding] = []
    for pe in range(facts.index.n_pes):
        loads = facts.pe_cmds(facts.is_load, pe)
        comp = facts.pe_cmds(facts.is_compute & (facts.t_grant >= 0), pe)
        if len(loads) < 2 or not len(comp):
            continue
        w0, w1 = facts.t_issue[loads[0]], facts.t_issue[loads[-1]]
        granted = loads[facts.t_grant[loads] >= 0]
        busy = _covered(
            *_merged(facts.t_grant[granted], facts.t_grant[granted] + facts.hold[granted])
        )
        c0 = np.clip(facts.t_grant[comp], w0, w1)
        c1 = np.clip(facts.t_grant[comp] + facts.hold[comp], w0, w1)
        compute = c1 - c0
        idle = compute - (busy(c1) - busy(c0))
        total_compute = int(compute.sum())
        # Charge each compute's idle cycles to the first load issued after it.
        k = np.searchsorted(facts.issue[loads], facts.issue[comp], side="right")
        charged = (idle > 0) & (k < len(loads))
        target = k[charged]
        gap = np.bincount(target, weights=idle[charged], minlength=len(loads)).astype(np.int64)
        lost = np.minimum(gap, facts.stall[loads])
        if total_compute <= 0 or lost.sum() < IDLE_MIN_SHARE * total_compute:
            continue
        # The first compute whose idle time is charged to each load.
        first_gap = np.full(len(loads), NONE, dtype=np.int64)
        first_gap[target[::-1]] = facts.issue[comp[charged]][::-1]
        rows = np.flatnonzero(lost > 0)
        hit = loads[rows]
        occ = _Occurrences(
            cmd=hit,
            pe=facts.pe[hit],
            loc=facts.loc[hit],
            start=facts.t_issue[hit],
            end=np.maximum(facts.t_wait_end[hit], facts.t_issue[hit]),
            events=np.stack([first_gap[rows], facts.issue[hit]], axis=1),
            stall=facts.stall[hit],
            lost=lost[rows],
        )
        pe_lost = int(lost.sum())
        idle_share = float(idle.sum()) / total_compute
        for g in _groups(facts, occ):
            if g.lost < IDLE_MIN_LINE_SHARE * pe_lost:
                continue
            loads_at = "the load" if g.count == 1 else f"{g.count:,} loads"
            message = (
                f"the read channel sat idle under {g.lost:,} cycles of compute that ran just "
                f"before {loads_at} at {_where(g.loc)} were issued and then stalled; "
                f"{idle_share:.0%} of PE{pe}'s compute between its first and last load ran "
                f"with no transfer under it"
            )
            suggestion = (
                "issue these loads earlier (tl.load_async a tile ahead) so their transfers run "
                f"under the compute before them ({_PIPELINE_HINT})"
            )
            out.append(_finding("KB105", g, message, suggestion))
    return out


def _overlap_efficiency(facts: _Facts) -> list[Finding]:
    index = facts.index
    out: list[Finding] = []
    c = index.columns
    starts = np.flatnonzero(c.kind == Kind.KERNEL_START)
    for eff in pe_efficiency(index):
        if eff.efficiency >= EFFICIENCY_THRESHOLD:
            continue
        start_event = starts[c.pe[starts] == eff.pe]
        first = int(start_event[0]) if len(start_event) else 0
        loc = index.loc(int(c.loc[first])) if len(start_event) else None
        end_event = int(np.searchsorted(c.time, eff.end, side="right")) - 1
        events = tuple(sorted({first, max(end_event, first)}))
        if eff.dma_read_cycles >= eff.compute_cycles:
            suggestion = (
                "it is DMA-read-bound: keep the read channel busy by issuing loads ahead with "
                "tl.load_async so the compute hides under the transfers (the other findings "
                "say where it serialises)"
            )
        else:
            suggestion = (
                "it is compute-bound: issue loads ahead with tl.load_async so the transfers "
                "hide under the compute (the other findings say where it serialises)"
            )
        out.append(
            Finding(
                id=finding_id("KB106", loc, eff.pe),
                rule="KB106",
                title=RULES["KB106"],
                pe=eff.pe,
                start=eff.start,
                end=eff.end,
                events=events,
                loc=loc,
                message=(
                    f"PE{eff.pe} took {eff.achieved:,} cycles where max(DMA read "
                    f"{eff.dma_read_cycles:,}, compute {eff.compute_cycles:,}) allows "
                    f"{eff.bound:,}: {eff.efficiency:.0%} overlap efficiency"
                ),
                suggestion=suggestion,
                saving=eff.achieved - eff.bound,
            )
        )
    return out
