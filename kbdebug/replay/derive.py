"""The tables derived from a trace's columns and the fields kept as it was read: commands,
futures, and the per-PE and per-channel event lists, checked (ids, duplicates, order)
as they are built."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from emulator.trace.errors import TraceFormatError
from emulator.trace.schema import Kind
from kbdebug.replay.tables import (
    NONE,
    ChannelTable,
    Columns,
    Commands,
    Futures,
    LiveTable,
    TraceIndex,
    position_dtype,
)

#: Per event kind, per field, the values kept of its events as they were read
#: (``"event"``: their indices), in file order (see IndexBuilder).
Kept = dict[Kind, dict[str, np.ndarray]]

_STATUS_KINDS = (
    Kind.KERNEL_START,
    Kind.KERNEL_END,
    Kind.KERNEL_ERROR,
    Kind.WAIT_BEGIN,
    Kind.WAIT_END,
    Kind.DEADLOCK,
)
_SCRATCH_KINDS = (Kind.SCRATCH_ALLOC, Kind.SCRATCH_FREE)


def entity_events(kind: np.ndarray, loc: np.ndarray) -> dict[str, np.ndarray]:
    """Of events with these ``kind`` and ``loc`` columns, the indices of those that carry a
    source location ("loc"), change their PE's status ("status") or its scratch use
    ("scratch"): what per_entity splits by PE."""
    return {
        "loc": np.flatnonzero(loc >= 0),
        "status": np.flatnonzero(kinds_mask(kind, _STATUS_KINDS)),
        "scratch": np.flatnonzero(kinds_mask(kind, _SCRATCH_KINDS)),
    }


def kinds_mask(kind: np.ndarray, kinds: Iterable[int]) -> np.ndarray:
    """Where ``kind`` (a kind column) is one of ``kinds``: a table lookup, which keeps
    no temporaries wider than the result (np.isin made int64 copies of the column)."""
    table = np.zeros(256, dtype=bool)
    table[np.array(list(kinds), dtype=np.int64)] = True
    return table[kind.view(np.uint8)]


# Groups (PEs, channels, op log entries) split out one pass each, rather than by sorting.
FEW_GROUPS = 32


def _first_at(
    size: int,
    keys: np.ndarray,
    values: np.ndarray,
    once: str | None = None,
    source: str = "",
    dtype: type = np.int64,
) -> np.ndarray:
    """An array of ``size`` (of ``dtype``) filled with -1, with ``values`` at ``keys``
    (the first value wins where a key repeats; keys outside 0..size-1 are dropped).

    With ``once`` (``values`` being event indices), a key may not repeat: the emulator
    issues, grants, waits... each command or future once, so a repeat is a duplicated
    record, refused with TraceFormatError naming the second event and ``once``.
    """
    out = np.full(size, NONE, dtype=dtype)
    if not len(keys):
        return out
    if keys.min() < 0 or keys.max() >= size:
        ok = (keys >= 0) & (keys < size)
        keys, values = keys[ok], values[ok]
    out[keys] = values
    # Keys are almost always unique: where one repeats, a later value overwrote the first,
    # which reading back finds without sorting or counting them.
    if (out[keys] == values).all():
        return out
    unique, first = np.unique(keys, return_index=True)
    if once is not None and len(unique) < len(keys):
        repeats = np.ones(len(keys), dtype=bool)
        repeats[first] = False
        at = int(np.flatnonzero(repeats)[0])
        earlier = int(values[first[np.searchsorted(unique, keys[at])]])
        raise TraceFormatError(
            f"{once} {int(keys[at])} again (first at event {earlier}): a duplicated record",
            source=source,
            event_index=int(values[at]),
        )
    out[unique] = values[first]
    return out


def check_ids(c: Columns, source: str) -> None:
    """Refuse a command or future id that is not below the number of events: ids count up
    from 0, one per command issued, and each command has an ISSUE event."""
    n = len(c.kind)
    for column, what in ((c.cmd, "command"), (c.fut, "future")):
        if n and int(column.max()) >= n:
            at = int(np.argmax(column >= n))
            raise TraceFormatError(
                f"{Kind(int(c.kind[at])).name} names {what} {int(column[at])}, not a possible id:"
                f" ids count up from 0, one per command, and the trace has {n:,} events",
                source=source,
                event_index=at,
            )


_END_KINDS = (Kind.KERNEL_END, Kind.KERNEL_ERROR, Kind.DEADLOCK)


def _n_pes(c: Columns) -> int:
    return int(c.pe.max()) + 1 if len(c.pe) else 0


def _refuse_first(bad: np.ndarray, events: np.ndarray, message: str, source: str) -> None:
    """If any of ``bad`` (a mask over ids), TraceFormatError at the earliest of their
    ``events``; ``message`` is formatted with ``id`` and the ``row`` of the id."""
    ids = np.flatnonzero(bad)
    if len(ids):
        row = int(ids[np.argmin(events[ids])])
        raise TraceFormatError(
            message.format(id=row, row=row), source=source, event_index=int(events[row])
        )


def check_order(c: Columns, k: Commands, f: Futures, status: np.ndarray, source: str) -> None:
    """Refuse events of a command or a wait out of the order the emulator records them in
    (request, grant, release after the issue, in that order; completion after the
    issue; a wait's end after its begin, having stalled no longer than it lasted; a
    kernel's end after its start), so that no duration computed from them is negative
    or longer than the run. ``status``: the indices of the status events (entity_events)."""
    issue = k.issue
    for events, name in (
        (k.request, "CHAN_REQUEST"),
        (k.grant, "CHAN_GRANT"),
        (k.release, "CHAN_RELEASE"),
        (k.complete, "COMPLETE"),
    ):
        _refuse_first(
            (events >= 0) & ((issue < 0) | (issue > events)),
            events,
            name + " of command {id} before (or without) its ISSUE",
            source,
        )
    _refuse_first(
        (k.grant >= 0) & ((k.request < 0) | (k.request > k.grant)),
        k.grant,
        "CHAN_GRANT of command {id} before (or without) its CHAN_REQUEST",
        source,
    )
    _refuse_first(
        (k.release >= 0) & ((k.grant < 0) | (k.grant > k.release)),
        k.release,
        "CHAN_RELEASE of command {id} before (or without) its CHAN_GRANT",
        source,
    )
    ended = f.wait_end >= 0
    _refuse_first(
        ended & ((f.wait_begin < 0) | (f.wait_begin > f.wait_end)),
        f.wait_end,
        "WAIT_END of future {id} before (or without) its WAIT_BEGIN",
        source,
    )
    kinds = c.kind[status]
    starts = status[kinds == Kind.KERNEL_START]
    start = _first_at(
        _n_pes(c), c.pe[starts].astype(np.int64), starts, "KERNEL_START on PE", source
    )
    ends = status[kinds_mask(kinds, _END_KINDS)]
    early = ends[ends < start[c.pe[ends]]]
    if len(early):
        raise TraceFormatError(
            f"{Kind(int(c.kind[early[0]])).name} on PE {int(c.pe[early[0]])} before its"
            f" KERNEL_START (event {int(start[c.pe[early[0]]])})",
            source=source,
            event_index=int(early[0]),
        )
    began = np.where(ended, f.wait_begin, 0)
    lasted = c.time[np.where(ended, f.wait_end, 0)] - c.time[began]
    _refuse_first(
        ended & (f.stall > lasted),
        f.wait_end,
        "WAIT_END of future {id} stalled longer than the wait lasted",
        source,
    )


def commands_of(c: Columns, kept: Kept, source: str = "<trace>") -> Commands:
    """The command table, from the fields kept of ISSUE, CHAN_* and COMPLETE events."""
    size = int(c.cmd.max()) + 1 if len(c.cmd) else 0
    position = position_dtype(len(c.kind))
    issue = kept[Kind.ISSUE]
    cmd = issue["cmd"]
    if len(cmd) == size and (cmd == np.arange(size, dtype=cmd.dtype)).all():
        # Issued in id order, each once (as the emulator numbers them): no scatter.
        def by_cmd(name: str, dtype: type = position) -> np.ndarray:
            return issue[name].astype(dtype, copy=False)

    else:
        _first_at(size, cmd, issue["event"], "ISSUE of command", source)  # refuses a repeat
        # So each command in range has one ISSUE.
        keep = np.flatnonzero((cmd >= 0) & (cmd < size))
        keys = cmd[keep]

        def by_cmd(name: str, dtype: type = position) -> np.ndarray:
            out = np.full(size, NONE, dtype=dtype)
            out[keys] = issue[name][keep]
            return out

    def first(kind: Kind, values: str = "event", dtype: type = position) -> np.ndarray:
        once = f"{kind.name} of command" if values == "event" else None
        events = kept[kind]
        return _first_at(size, events["cmd"], events[values], once, source, dtype)

    return Commands(
        issue=by_cmd("event"),
        pe=by_cmd("pe", np.int32),
        op=by_cmd("op", np.int32),
        future=by_cmd("future"),
        addr=by_cmd("addr", np.int64),
        nbytes=by_cmd("nbytes", np.int64),
        shape=by_cmd("shape", np.int32),
        dtype=by_cmd("dtype", np.int32),
        blocking=by_cmd("blocking", np.int8),
        loc=by_cmd("loc", np.int32),
        request=first(Kind.CHAN_REQUEST),
        # Of the (one) request of each command.
        channel=first(Kind.CHAN_REQUEST, "channel", np.int32),
        grant=first(Kind.CHAN_GRANT),
        release=first(Kind.CHAN_RELEASE),
        complete=first(Kind.COMPLETE),
    )


def futures_of(c: Columns, k: Commands, kept: Kept, source: str = "<trace>") -> Futures:
    """The future table, from the command table and the fields kept of the waits."""
    size = max(int(k.future.max(initial=NONE)), int(c.fut.max(initial=NONE))) + 1
    with_future = np.flatnonzero(k.future >= 0)
    cmd = _first_at(size, k.future[with_future], with_future)
    issued = np.bincount(k.future[with_future], minlength=size)
    if (issued > 1).any():
        twice = int(np.argmax(issued > 1))
        issues = np.sort(k.issue[with_future[k.future[with_future] == twice]])
        raise TraceFormatError(
            f"ISSUE of future {twice} again (first at event {int(issues[0])}): a duplicated record",
            source=source,
            event_index=int(issues[1]),
        )
    has_cmd = cmd >= 0

    def of_cmd(table: np.ndarray) -> np.ndarray:
        out = np.full(size, NONE, dtype=np.int64)
        out[has_cmd] = table[cmd[has_cmd]]
        return out

    begins, ends = kept[Kind.WAIT_BEGIN], kept[Kind.WAIT_END]
    wait_begin = _first_at(size, begins["future"], begins["event"], "WAIT_BEGIN of future", source)
    wait_end = _first_at(size, ends["future"], ends["event"], "WAIT_END of future", source)
    complete = of_cmd(k.complete)
    stall = np.zeros(size, dtype=np.int64)
    stall[ends["future"]] = ends["stalled"]  # each future's one WAIT_END
    ended = wait_end >= 0
    hanging = (wait_begin >= 0) & ~ended
    arrived_first = (complete >= 0) & (complete < wait_begin)
    blocks = (ended & (stall > 0)) | (hanging & ~arrived_first)
    return Futures(
        cmd=cmd,
        pe=of_cmd(k.pe),
        loc=of_cmd(k.loc),
        issue=of_cmd(k.issue),
        request=of_cmd(k.request),
        grant=of_cmd(k.grant),
        release=of_cmd(k.release),
        complete=complete,
        wait_begin=wait_begin,
        wait_end=wait_end,
        wait_loc=_first_at(size, begins["future"], begins["loc"].astype(np.int64)),
        stall=stall,
        blocks=blocks,
    )


def _split_by(keys: np.ndarray, events: np.ndarray, n_groups: int) -> list[np.ndarray]:
    """``events`` (sorted) split into one sorted array per key 0..n_groups-1."""
    if n_groups == 1 and (not len(keys) or keys.min() == keys.max() == 0):
        return [events]  # one PE, one channel...: nothing to split, nothing to copy
    if n_groups <= FEW_GROUPS:
        # A pass per group costs less than a stable sort of them all.
        return [events[keys == g] for g in range(n_groups)]
    order = np.argsort(keys, kind="stable")
    bounds = np.searchsorted(keys[order], np.arange(n_groups + 1))
    grouped = events[order]
    return [grouped[bounds[g] : bounds[g + 1]] for g in range(n_groups)]


def _never_as(events: np.ndarray, never: int) -> np.ndarray:
    return np.where(events >= 0, events, never)


def per_entity(
    index: TraceIndex, op_log: dict[str, np.ndarray], entity: dict[str, np.ndarray]
) -> None:
    """Fill in the per-PE and per-channel event lists, the live table and the op log's
    events by (category, op) (``op_log``: the fields kept of OP_LOG events; ``entity``:
    entity_events of the whole trace)."""
    c = index.columns
    n_pes, n = index.n_pes, index.n_events
    position = position_dtype(n)
    for name, out in (
        ("loc", index.pe_loc_events),
        ("status", index.pe_status_events),
        ("scratch", index.pe_scratch_events),
    ):
        events = entity[name]
        # One PE: every event is PE 0's (the reader checks each PE against the mesh).
        out.extend([events] if n_pes == 1 else _split_by(c.pe[events], events, n_pes))

    k = index.commands
    with_channel = np.flatnonzero(k.channel >= 0).astype(position)
    requested = k.request[with_channel]
    if (requested[1:] < requested[:-1]).any():  # requested in id order (as a rule): no sort
        with_channel = with_channel[np.argsort(requested, kind="stable")]
    del requested
    for cmds in _split_by(k.channel[with_channel], with_channel, len(index.channels)):
        index.channel_cmds.append(cmds)
        release = k.release[cmds]
        index.channel_tables.append(
            ChannelTable(
                cmds=cmds,
                request=k.request[cmds],
                grant=k.grant[cmds],
                release=release,
                done_by=np.maximum.accumulate(_never_as(release, n)),
            )
        )

    f = index.futures
    issued = np.flatnonzero(f.issue >= 0)
    issued = issued[np.argsort(f.issue[issued], kind="stable")]
    ends = f.wait_end[issued] >= 0
    resolved, unresolved = issued[ends], issued[~ends]
    index.live_table = LiveTable(
        resolved=resolved,
        resolved_issue=f.issue[resolved],
        resolved_done_by=np.maximum.accumulate(f.wait_end[resolved]),
        unresolved=unresolved,
        unresolved_issue=f.issue[unresolved],
    )

    ops = op_log["event"]
    if len(ops):
        radix = len(index.strings) + 1
        keys = op_log["category"].astype(np.int64) * radix + op_log["op"]
        # Counting needs room for every key a trace's strings allow: few, but bounded.
        counts = np.bincount(keys) if radix * radix <= 1 << 20 else keys
        if counts is not keys and np.count_nonzero(counts) <= FEW_GROUPS:
            unique = np.flatnonzero(counts)
            group = np.searchsorted(unique, keys)
        else:
            unique, group = np.unique(keys, return_inverse=True)
        for g, events in enumerate(_split_by(group, ops, len(unique))):
            category, op = divmod(int(unique[g]), radix)
            index.op_log_events[(category, op)] = events
