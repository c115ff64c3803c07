"""IndexBuilder and build_index: a trace's TraceIndex, its columns and lookup tables built
from the reader's batches and checked (ids, duplicates, order) on the way.

The tables themselves live in kbdebug.replay.tables; every name imported from here
before stays importable from here.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from emulator.trace import wire
from emulator.trace.errors import TraceFormatError
from emulator.trace.reader import EventTables, Trace
from emulator.trace.rules import RULES
from emulator.trace.schema import FIELDS, Kind, field_index
from kbdebug.replay.tables import (
    _COLUMN_OF_FIELD,
    COLUMN_OF_FIELD,
    COLUMNS,
    DTYPES,
    NONE,
    WIDE,
    ChannelTable,
    Columns,
    Commands,
    Futures,
    LiveTable,
    TraceIndex,
    position_dtype,
)

__all__ = [
    "COLUMNS",
    "COLUMN_OF_FIELD",
    "DTYPES",
    "NONE",
    "WIDE",
    "ChannelTable",
    "Columns",
    "Commands",
    "Futures",
    "IndexBuilder",
    "LiveTable",
    "TraceIndex",
    "_COLUMN_OF_FIELD",
    "build_index",
    "position_dtype",
]


_STATUS_KINDS = (
    Kind.KERNEL_START,
    Kind.KERNEL_END,
    Kind.KERNEL_ERROR,
    Kind.WAIT_BEGIN,
    Kind.WAIT_END,
    Kind.DEADLOCK,
)
_SCRATCH_KINDS = (Kind.SCRATCH_ALLOC, Kind.SCRATCH_FREE)


def kinds_mask(kind: np.ndarray, kinds: Iterable[int]) -> np.ndarray:
    """Where ``kind`` (a kind column) is one of ``kinds``: a table lookup, which keeps
    no temporaries wider than the result (np.isin made int64 copies of the column)."""
    table = np.zeros(256, dtype=bool)
    table[np.array(list(kinds), dtype=np.int64)] = True
    return table[kind.view(np.uint8)]


# Per kind: (position in the record, column) of each field that has a column.
_PLACES = {
    kind: tuple(
        (3 + j, COLUMN_OF_FIELD[name])
        for j, (name, _) in enumerate(fields)
        if name in COLUMN_OF_FIELD
    )
    for kind, fields in FIELDS.items()
}
# Ranges (emulator.trace.rules) the reader bounds within int32: PEs and channels by the
# format's limits, string and loc ids by the definitions read (see DTYPES). A value of
# any other range is checked before it goes into a column narrower than int64.
_BOUNDED = ("pe", "channel", "string", "loc")
_CHECKED = {
    kind: tuple(
        (at, column) for at, column in _PLACES[kind] if RULES[int(kind)][at - 1][2] not in _BOUNDED
    )
    for kind in FIELDS
}
# Columns every kind has, so never filled with NONE first.
_ALWAYS = ("time", "pe")
_SOMETIMES = tuple(name for name in COLUMNS[1:] if name not in _ALWAYS)
# The fields of an ISSUE that have no column, kept for the command table: where they
# are in its record, and their dtype there.
_ISSUE_ONLY = {
    name: (3 + field_index(Kind.ISSUE, name), dtype)
    for name, dtype in (("addr", np.int64), ("shape", np.int32), ("dtype", np.int32),
                        ("blocking", np.int8))
}  # fmt: skip
# The smallest event record: a fixarray header, kind, dt and pe of one byte each.
MIN_EVENT_BYTES = wire.MIN_EVENT_BYTES
# Columns made room for at once, at most (a file's size allows more on paper): past this
# they grow by half. Room never written is virtual memory, but a 2 GB file must not
# reserve 40 GB of it before its first record is read.
MAX_PRESIZED_EVENTS = 1 << 25
# Groups (PEs, channels, op log entries) split out one pass each, rather than by sorting.
FEW_GROUPS = 32


class IndexBuilder:
    """Accumulates events batch by batch, then builds the TraceIndex.

    Events are converted as they come, straight into the columns, so a caller
    streaming them from the reader never holds more than one batch as Python
    objects. ``capacity`` is how many events to make room for at once: with an
    upper bound (see ``capacity_for``) the columns are never copied to grow, and
    the room never written stays virtual memory, not resident.
    """

    def __init__(self, capacity: int = 0) -> None:
        self._columns = {name: np.empty(capacity, dtype=DTYPES[name]) for name in COLUMNS}
        # Per ISSUE-only field, its values batch by batch (in the order of the ISSUEs).
        self._issues: dict[str, list[np.ndarray]] = {name: [] for name in _ISSUE_ONLY}
        self._shapes: dict[tuple[int, ...], int] = {}
        self._count = 0
        self._checks = self._checks_now()

    @staticmethod
    def capacity_for(trace_bytes: int) -> int:
        """The most events a trace file of ``trace_bytes`` bytes can hold."""
        return min(trace_bytes // MIN_EVENT_BYTES + 1, MAX_PRESIZED_EVENTS)

    @property
    def count(self) -> int:
        """Events added so far."""
        return self._count

    def add(self, records: list[list[Any]]) -> None:
        """Take a batch of validated records ``[kind, time, pe, *fields]`` (time absolute).

        The records are not modified and not kept.
        """
        if records:
            self.add_tables(EventTables.from_records(records))

    def add_tables(self, tables: EventTables) -> None:
        """Take a batch of validated events as read_trace_tables hands them over."""
        n = len(tables)
        if not n:
            return
        for kind, (_, rows) in tables.tables.items():
            for at, column in self._checks.get(kind, ()):
                self._fit(column, rows[:, at])
        base = self._count
        self._reserve(n)
        self._columns["kind"][base : base + n] = tables.kinds
        cols = {name: self._columns[name][base : base + n] for name in COLUMNS[1:]}
        for name in _SOMETIMES:
            cols[name].fill(NONE)
        for kind, (at, rows) in tables.tables.items():
            for offset, column in ((1, "time"), (2, "pe"), *_PLACES[kind]):
                cols[column][at] = rows[:, offset]
        if Kind.ISSUE in tables.tables:
            _, rows = tables.tables[Kind.ISSUE]
            shapes = self._shapes
            ids = np.array([shapes.setdefault(s, len(shapes)) for s in tables.shapes], np.int64)
            for name, (at, dtype) in _ISSUE_ONLY.items():
                values = ids[rows[:, at]] if name == "shape" else rows[:, at]
                self._issues[name].append(values.astype(dtype))
        self._count += n

    def _checks_now(self) -> dict[int, tuple[tuple[int, str], ...]]:
        """Per kind, the (item, column) pairs to check before they go into the columns:
        those of an unbounded range whose column is still narrow."""
        wide = {name for name, column in self._columns.items() if column.dtype == WIDE}
        checks = {
            kind: tuple((at, name) for at, name in places if name not in wide)
            for kind, places in _CHECKED.items()
        }
        return {kind: places for kind, places in checks.items() if places}

    def _fit(self, name: str, values: np.ndarray) -> None:
        """Widen column ``name`` to int64 if any of ``values`` does not fit in it."""
        column = self._columns[name]
        limits = np.iinfo(column.dtype)
        if limits.min <= values.min() and values.max() <= limits.max:
            return
        # Only what was written is copied: the room beyond stays unused virtual memory.
        wide = np.empty(len(column), dtype=WIDE)
        wide[: self._count] = column[: self._count]
        self._columns[name] = wide
        self._checks = self._checks_now()

    def _reserve(self, n: int) -> None:
        """Make room for ``n`` more events, growing the columns by half at least."""
        room = len(self._columns["kind"])
        if self._count + n <= room:
            return
        room = max(self._count + n, room + room // 2, 1 << 16)
        for name, column in self._columns.items():
            grown = np.empty(room, dtype=column.dtype)
            grown[: self._count] = column[: self._count]
            self._columns[name] = grown

    def build(self, trace: Trace) -> TraceIndex:
        """The index, with the header, footer and tables of ``trace`` (its events ignored)."""
        values = {name: column[: self._count] for name, column in self._columns.items()}
        columns = Columns(**values)
        source = trace.source
        # Tables are sized by the largest id: bound it before allocating them.
        _check_ids(columns, source)
        issues = {
            name: np.concatenate(parts) if parts else np.empty(0, dtype)
            for (name, parts), (_, dtype) in zip(
                self._issues.items(), _ISSUE_ONLY.values(), strict=True
            )
        }
        for parts in self._issues.values():
            parts.clear()
        commands = _commands(columns, issues, source)
        futures = _futures(columns, commands, source)
        _check_order(columns, commands, futures, source)
        shapes = [shape for shape, _ in sorted(self._shapes.items(), key=lambda kv: kv[1])]
        index = TraceIndex(
            header=trace.header,
            footer=trace.footer,
            truncated=trace.truncated,
            sources=trace.sources,
            strings=trace.strings,
            locs=trace.locs,
            shapes=shapes,
            columns=columns,
            commands=commands,
            futures=futures,
        )
        _per_entity(index)
        return index


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


def _events_by(
    c: Columns, kind: Kind, key: np.ndarray, size: int, what: str, source: str
) -> np.ndarray:
    """Per id 0..size-1, the event of ``kind`` whose ``key`` column names it (what: the
    id's name for the error a duplicate gets)."""
    where = np.flatnonzero(c.kind == kind)
    dtype = position_dtype(len(c.kind))
    return _first_at(size, key[where], where, f"{kind.name} of {what}", source, dtype)


def _check_ids(c: Columns, source: str) -> None:
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


def _check_order(c: Columns, k: Commands, f: Futures, source: str) -> None:
    """Refuse events of a command or a wait out of the order the emulator records them in
    (request, grant, release after the issue, in that order; completion after the
    issue; a wait's end after its begin, having stalled no longer than it lasted), so
    that no duration computed from them is negative or longer than the run."""
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
    starts = np.flatnonzero(c.kind == Kind.KERNEL_START)
    start = _first_at(
        _n_pes(c), c.pe[starts].astype(np.int64), starts, "KERNEL_START on PE", source
    )
    ends = np.flatnonzero(kinds_mask(c.kind, _END_KINDS))
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


def _commands(c: Columns, issues: dict[str, np.ndarray], source: str = "<trace>") -> Commands:
    """The command table; ``issues`` holds the ISSUE-only fields, in the ISSUEs' order."""
    size = int(c.cmd.max()) + 1 if len(c.cmd) else 0
    position = position_dtype(len(c.kind))
    where = np.flatnonzero(c.kind == Kind.ISSUE)
    cmd = c.cmd[where]
    if len(cmd) == size and (cmd == np.arange(size, dtype=cmd.dtype)).all():
        # Issued in id order, each once (as the emulator numbers them): no scatter.
        def by_cmd(values: np.ndarray, dtype: type = position) -> np.ndarray:
            return values.astype(dtype)

    else:
        _first_at(size, cmd, where, "ISSUE of command", source)  # refuses one issued twice
        # So each command in range has one ISSUE.
        keep = np.flatnonzero((cmd >= 0) & (cmd < size))
        keys = cmd[keep]

        def by_cmd(values: np.ndarray, dtype: type = position) -> np.ndarray:
            out = np.full(size, NONE, dtype=dtype)
            out[keys] = values[keep]
            return out

    request = _events_by(c, Kind.CHAN_REQUEST, c.cmd, size, "command", source)
    channel = np.full(size, NONE, dtype=np.int32)
    has = request >= 0
    channel[has] = c.chan[request[has]]
    return Commands(
        issue=by_cmd(where),
        pe=by_cmd(c.pe[where], np.int32),
        op=by_cmd(c.op[where], np.int32),
        future=by_cmd(c.fut[where]),
        addr=by_cmd(issues["addr"], np.int64),
        nbytes=by_cmd(c.nbytes[where], np.int64),
        shape=by_cmd(issues["shape"], np.int32),
        dtype=by_cmd(issues["dtype"], np.int32),
        blocking=by_cmd(issues["blocking"], np.int8),
        loc=by_cmd(c.loc[where], np.int32),
        channel=channel,
        request=request,
        grant=_events_by(c, Kind.CHAN_GRANT, c.cmd, size, "command", source),
        release=_events_by(c, Kind.CHAN_RELEASE, c.cmd, size, "command", source),
        complete=_events_by(c, Kind.COMPLETE, c.cmd, size, "command", source),
    )


def _futures(c: Columns, k: Commands, source: str = "<trace>") -> Futures:
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

    begins = np.flatnonzero(c.kind == Kind.WAIT_BEGIN)
    wait_begin = _first_at(size, c.fut[begins], begins, "WAIT_BEGIN of future", source)
    wait_end = _events_by(c, Kind.WAIT_END, c.fut, size, "future", source)
    complete = of_cmd(k.complete)
    stall = np.zeros(size, dtype=np.int64)
    ended = wait_end >= 0
    stall[ended] = c.val[wait_end[ended]]
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
        wait_loc=_first_at(size, c.fut[begins], c.loc[begins].astype(np.int64)),
        stall=stall,
        blocks=blocks,
    )


def _split_by(keys: np.ndarray, events: np.ndarray, n_groups: int) -> list[np.ndarray]:
    """``events`` (sorted) split into one sorted array per key 0..n_groups-1."""
    if n_groups <= FEW_GROUPS:
        # A pass per group costs less than a stable sort of them all.
        return [events[keys == g] for g in range(n_groups)]
    order = np.argsort(keys, kind="stable")
    bounds = np.searchsorted(keys[order], np.arange(n_groups + 1))
    grouped = events[order]
    return [grouped[bounds[g] : bounds[g + 1]] for g in range(n_groups)]


def _never_as(events: np.ndarray, never: int) -> np.ndarray:
    return np.where(events >= 0, events, never)


def _per_entity(index: TraceIndex) -> None:
    c = index.columns
    n_pes, n = index.n_pes, index.n_events
    position = position_dtype(n)
    for mask, out in (
        (c.loc >= 0, index.pe_loc_events),
        (kinds_mask(c.kind, _STATUS_KINDS), index.pe_status_events),
        (kinds_mask(c.kind, _SCRATCH_KINDS), index.pe_scratch_events),
    ):
        events = np.flatnonzero(mask).astype(position)
        out.extend(_split_by(c.pe[events], events, n_pes))

    k = index.commands
    with_channel = np.flatnonzero(k.channel >= 0).astype(position)
    with_channel = with_channel[np.argsort(k.request[with_channel], kind="stable")]
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

    ops = np.flatnonzero(c.kind == Kind.OP_LOG).astype(position)
    if len(ops):
        radix = len(index.strings) + 1
        keys = c.aux[ops].astype(np.int64) * radix + c.op[ops]
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


def build_index(
    trace: Trace,
    batches: Iterable[list[list[Any]]] | None = None,
    progress: Callable[[int], None] | None = None,
) -> TraceIndex:
    """Index ``trace`` (whose events may instead come as ``batches`` of records)."""
    builder = IndexBuilder()
    if batches is None:
        step = 65536
        events = trace.events
        batches = (events[i : i + step] for i in range(0, len(events), step))
    # Converting creates objects by the hundred thousand while the trace's millions are
    # alive: the cyclic collector would traverse them all, repeatedly, for nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for batch in batches:
            builder.add(batch)
            if progress is not None:
                progress(builder.count)
    finally:
        if collecting:
            gc.enable()
    return builder.build(trace)
