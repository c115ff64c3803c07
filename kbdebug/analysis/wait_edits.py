"""The fixes of waits, stores and composite calls: edits of a PE's program for findings.

Each function takes a PE's diagnosis (:class:`kbdebug.analysis.findings._Diagnosis`)
and returns the groups of one rule: the commands a line's fix covers and the
edit that fixes them, for the re-timing to price.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from kbdebug.analysis.findings import _Group
from kbdebug.analysis.model import BARRIER, COMPUTE, LOAD, OPAQUE, RECV, SEND, STORE, WAIT
from kbdebug.analysis.retime import composite_runs, pipeline_length

if TYPE_CHECKING:
    from kbdebug.analysis.findings import _Diagnosis


def early_wait_groups(d: _Diagnosis, rule: str, quiet_too: bool = False) -> list[_Group]:
    """KB104 (loads) or KB109 (receives): waits placed before work that does not need
    the value, re-timed with each wait at the value's first use (``quiet_too``: lines
    none of whose waits stalled as well, which may only hide behind another's)."""
    prog = d.prog
    kinds = prog.kind
    wanted = RECV if rule == "KB109" else LOAD
    # KB101: a blocking tl.load whose data is first used below work that does not need
    # it (its wait belongs there); KB104: a tl.load_async's wait placed too early.
    blocking = rule == "KB101"
    futures = d.index.futures
    fut_of = d.index.commands.future
    by_loc: dict[int, list[int]] = defaultdict(list)
    moves: dict[int, float] = {}
    loads: dict[int, int] = {}  # per receive's wait, the load moved down with it
    for c, s in d.wait_step.items():
        post = d.issue_step.get(c)
        if post is None or kinds[post] != wanted or bool(d.blocking[c]) != blocking:
            continue
        use = prog.first_use.get(s, s)
        # A receive whose first use is a load it gates: the load moves down with the wait.
        carried = prog.carried.get(s) if rule == "KB109" else None
        if carried is not None:
            use = carried[1]
        # A later store to the bytes it reads must still find the load over (else the
        # store may land before the load reads): the wait stays above that store.
        use = min(use, prog.overwritten_at.get(c, use))
        # Work between the wait and the first use: what the wait held up for nothing.
        if use <= s + 1 or d.compute_steps[min(use, d.n)] - d.compute_steps[s + 1] <= 0:
            continue
        moves[s] = use - 0.5
        if carried is not None:
            loads[s] = carried[0]
        by_loc[int(futures.wait_loc[fut_of[c]])].append(c)
    out = []
    for loc_id, group in by_loc.items():
        # The line's edit moves every wait it makes, those that happened not to stall in
        # this run too (they would once the others stop holding the kernel back); a line
        # none of whose waits stalled is no finding. Any stall counts: one the data's
        # arrival makes unavoidable at the wait may still hide under the work before use.
        if not quiet_too and not any(d.stall.get(c, 0) > 0 for c in group):
            continue
        keys = {d.wait_step[c]: moves[d.wait_step[c]] for c in group}
        first = min(group, key=lambda c: d.wait_step[c])
        use = math.ceil(keys[d.wait_step[first]])
        info = {"use_loc": _step_loc(d, use), "kind": "receive" if rule == "KB109" else "load"}
        carried = {loads[w]: key + 0.25 for w, key in keys.items() if w in loads}
        if carried:
            info["carried_loc"] = _step_loc(d, loads[d.wait_step[first]])
            keys.update(carried)
        if blocking:
            info["ahead"] = 0
        out.append(_Group(rule, loc_id, group, keys, info=info))
    return out


def store_wait_groups(d: _Diagnosis) -> list[_Group]:
    """KB108: waits on stores and sends long before anything needs them landed.

    A store whose bytes a later load of this PE reads back, or a later store of this PE
    writes again: the wait moves right before the first of them (when work lies
    between; a wait dropped there would leave the two unordered). One another PE reads
    back later: a needed fence, left alone. Otherwise, and for sends: the wait is
    dropped (the kernel's end drains them)."""
    prog = d.prog
    cmds = d.index.commands
    readers: dict[int, int] = {}
    for load, stores in prog.fences.items():
        s = d.issue_step.get(load)
        if s is None:
            continue
        for st in stores:
            readers[st] = min(readers.get(st, s), s)
    for st, s in prog.overwritten_at.items():
        if st in d.wait_step and prog.kind[d.issue_step.get(st, 0)] == STORE:
            readers[st] = min(readers.get(st, s), s)
    by_loc: dict[tuple[int, str], list[int]] = defaultdict(list)
    moves: dict[int, float] = {}
    stalled_lines = {
        int(d.index.futures.wait_loc[cmds.future[c]]) for c in d.wait_step if d.stall.get(c, 0) > 0
    }
    for c, s in d.wait_step.items():
        post = d.issue_step.get(c)
        if post is None or prog.kind[post] not in (STORE, SEND):
            continue
        # Every wait the line makes (its edit moves or drops them all), once one stalled.
        if int(d.index.futures.wait_loc[cmds.future[c]]) not in stalled_lines:
            continue
        kind = "send" if prog.kind[post] == SEND else "store"
        if kind == "store" and c in readers:
            reload = readers[c]
            if d.compute_steps[reload] - d.compute_steps[s + 1] <= 0:
                continue  # the fence is where it belongs
            moves[s] = reload - 0.5
            by_loc[(int(d.index.futures.wait_loc[cmds.future[c]]), kind)].append(c)
            continue
        if kind == "store" and _read_elsewhere(d, c, s):
            continue
        by_loc[(int(d.index.futures.wait_loc[cmds.future[c]]), kind)].append(c)
    out = []
    # One finding per wait line: its waits whose bytes are used again move down to that
    # use, the others are dropped (one line's waits, one edit, one finding).
    for (loc_id, kind), group in by_loc.items():
        keys = {d.wait_step[c]: moves[d.wait_step[c]] for c in group if d.wait_step[c] in moves}
        dropped = frozenset(d.wait_step[c] for c in group if d.wait_step[c] not in moves)
        info: dict = {"kind": kind}
        if keys:
            reload = readers[next(c for c in group if d.wait_step[c] in moves)]
            again = "store" if prog.kind[reload] == STORE else "load"
            info.update(reload_loc=_step_loc(d, reload), reload_op=again, dropped=len(dropped))
        out.append(_Group("KB108", loc_id, group, keys, dropped, info=info))
    return out


def _read_elsewhere(d: _Diagnosis, store: int, wait: int) -> bool:
    """Whether another PE loads bytes of ``store`` after this PE's wait on it ended."""
    index = d.index
    if index.n_pes < 2:
        return False
    loads = d.model.__dict__.get("_all_loads")
    if loads is None:
        cmds = index.commands
        ops = np.asarray(cmds.op, dtype=np.int64)
        names = [i for i, s in enumerate(index.strings) if s in ("load", "load_async")]
        mask = np.isin(ops, names) & (np.asarray(cmds.issue) >= 0)
        ids = np.flatnonzero(mask)
        times = index.columns.time[np.asarray(cmds.issue)[ids]]
        loads = (ids, cmds.addr[ids].astype(np.int64), cmds.nbytes[ids].astype(np.int64), times)
        d.model.__dict__["_all_loads"] = loads
    ids, addr, nbytes, times = loads
    cmds = index.commands
    lo, hi = int(cmds.addr[store]), int(cmds.addr[store] + cmds.nbytes[store])
    pe = np.asarray(cmds.pe)[ids]
    ended = d.prog.at[wait]
    hit = (pe != d.prog.pe) & (addr < hi) & (addr + nbytes > lo) & (times >= ended)
    return bool(hit.any())


def composite_groups(d: _Diagnosis) -> list[_Group]:
    """KB110: runs of composite calls over the same B, each continuing the rows of the one
    before: re-timed as one call over all the rows."""
    prog = d.prog
    by_loc: dict[int, list] = defaultdict(list)
    for first, run in composite_runs(prog):
        if len(run) < 2:
            continue
        steps = range(first, first + len(run))
        merged = pipeline_length(prog.hw, run)
        total = sum(prog.cycles[s] for s in steps)
        if merged >= total:
            continue
        by_loc[int(d.loc[run[0].cmd])].append((first, run, merged, total))
    out = []
    for loc_id, runs in by_loc.items():
        cycles: dict[int, int] = {}
        calls = []
        for first, run, merged, _ in runs:
            cycles[first] = merged
            for s in range(first + 1, first + len(run)):
                cycles[s] = 0
            calls.extend(call.cmd for call in run)
        first, run, merged, total = runs[0]
        rows = sum(t.a_bytes for call in run for t in call.tiles)
        info = {
            "calls": len(run),
            "runs": len(runs),
            "b_cycles": run[0].b_cycles,
            "merged": merged,
            "total": total,
            "rows_bytes": rows,
        }
        out.append(_Group("KB110", loc_id, calls, {}, cycles=cycles, info=info))
    return out


def _step_loc(d: _Diagnosis, step: int):
    """The source loc of the command at ``step``, or of its wait (None past the end)."""
    if step >= d.n:
        return None
    prog = d.prog
    k = prog.kind[step]
    c = prog.cmd[step]
    if k == WAIT and 0 <= c < len(d.index.commands.future):
        wait_loc = int(d.index.futures.wait_loc[d.index.commands.future[c]])
        return d.index.loc(wait_loc) if wait_loc >= 0 else None
    if k in (WAIT, BARRIER):
        return None
    return d.index.loc(int(d.loc[c])) if 0 <= c < len(d.loc) else None


# --- one edit of a line, found by different rules on different PEs ---------------


def edits_of(items: list[tuple[_Diagnosis, _Group]]) -> dict:
    """Per PE, the edit of its groups among ``items`` applied together."""
    by_pe: dict[int, tuple[_Diagnosis, list[_Group]]] = {}
    for d, g in items:
        by_pe.setdefault(d.prog.pe, (d, []))[1].append(g)
    return {pe: d.edit(*groups) for pe, (d, groups) in by_pe.items()}


def one_rule(items: list[tuple[_Diagnosis, _Group]], launch_gain) -> str:
    """The rule one edit of a line is reported under when different rules found it on
    different PEs: the one whose PEs' share of the fix gains the launch most. The other
    rules' groups take it (their words name both kinds of value). ``launch_gain``: the
    launch's gain of per-PE edits."""
    rules = sorted({g.rule for _, g in items})
    if len(rules) == 1:
        return rules[0]

    def share(rule: str) -> tuple[int, int]:
        mine = [(d, g) for d, g in items if g.rule == rule]
        return launch_gain(edits_of(mine)), len(mine)

    rule = max(rules, key=share)
    for _, g in items:
        g.info = {**(g.info or {}), "what": "data or message"}
        g.rule = rule
    return rule


# --- traces that do not say what each command reads (format 1.2 and older) -----------


def out_of_order_groups(d) -> list[_Group]:
    """KB104: waits on a newer load while an older future is pending (a receive's early
    wait is KB109's: on a trace that says what each command reads its rule names the
    message's first use, so it is left to it here)."""
    kinds = d.prog.kind
    data = [
        c
        for k, c in zip(d.prog.kind, d.prog.cmd, strict=True)
        if k in (LOAD, RECV) and not d.blocking[c]
    ]
    wait_of = {c: d.wait_step.get(c, 1 << 60) for c in data}
    hits: dict[int, list[tuple[int, list[int]]]] = defaultdict(list)
    pending_until = 0
    older: list[int] = []
    for c in data:
        w = wait_of[c]
        if w < (1 << 60) and d.stall.get(c, 0) > 0 and pending_until > w:
            behind = [g for g in older if wait_of[g] > w]
            waited = [wait_of[g] for g in behind if wait_of[g] < (1 << 60)]
            # Work between this wait and the older one's means the newer data was needed
            # first: the issue order is wrong (KB103), not the wait.
            same_line = any(d.loc[g] == d.loc[c] for g in behind)
            used_first = not waited or (d.compute_steps[min(waited)] > d.compute_steps[w + 1])
            if not waited or (used_first and not same_line):
                pending_until = max(pending_until, w)
                older.append(c)
                continue
            # A receive's wait is KB109's (its rule moves every wait of the line to the
            # message's first use); a group here would take some of them from it.
            if not (d.prog.knows_reads and kinds[d.issue_step[c]] == RECV):
                wait_loc = int(d.index.futures.wait_loc[d.index.commands.future[c]])
                hits[wait_loc].append((c, behind))
        pending_until = max(pending_until, w)
        older.append(c)
    out = []
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
            while s < d.n and kinds[s] not in (COMPUTE, OPAQUE, WAIT, BARRIER):
                s += 1
            if s < d.n and kinds[s] in (COMPUTE, OPAQUE):
                moves[w] = s + 0.5
        # Futures of one issue line waited in the wrong order: each wait takes the
        # oldest pending one instead.
        positions = sorted(wait_of[c] for c in involved)
        futures = sorted(involved, key=lambda c: d.issue_step[c])
        repoint = dict(zip(positions, futures, strict=True))
        pending = items[0][1][0] if items[0][1] else items[0][0]
        group = [c for c, _ in items]
        # Older traces: a receive waited ahead of an older load is still KB109's.
        rule = "KB109" if kinds[d.issue_step[group[0]]] == RECV else "KB104"
        candidates = [
            _Group(rule, loc_id, group, moves, info={"pending": pending}),
            _Group(rule, loc_id, group, {}, repoint=repoint, info={"pending": pending}),
        ]
        out.append(max(candidates, key=lambda g: d.gain(g)))
    return out


def early_receive_groups(d) -> list[_Group]:
    """KB109: receives waited right after they were posted, work following the wait."""
    cmds = d.index.commands
    kinds = d.prog.kind
    by_loc: dict[int, list[int]] = defaultdict(list)
    later: dict[int, int] = {}
    for c, s in d.wait_step.items():
        post = d.issue_step.get(c)
        if post is None or kinds[post] != RECV or d.stall.get(c, 0) <= 0:
            continue
        if d.compute_steps[s] - d.compute_steps[post + 1] > 0:
            continue
        nxt = s + 1
        while nxt < d.n and kinds[nxt] not in (WAIT, BARRIER):
            nxt += 1
        if d.compute_steps[nxt] - d.compute_steps[s + 1] <= 0:
            continue
        later[s] = nxt
        by_loc[int(d.index.futures.wait_loc[cmds.future[c]])].append(c)
    out = []
    for loc_id, group in by_loc.items():
        keys = {d.wait_step[c]: later[d.wait_step[c]] - 0.5 for c in group}
        out.append(_Group("KB109", loc_id, group, keys, info={}))
    return out
