"""TraceIndex: a trace as numpy columns plus per-command, per-future and per-PE lookup tables."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emulator.trace.reader import Trace
from emulator.trace.schema import FIELDS, Kind, SourceLoc

NONE = -1

# Column of each event field (the rest of an ISSUE record goes to the command table).
_COLUMN_OF_FIELD = {
    "cmd": "cmd",
    "future": "fut",
    "channel": "chan",
    "loc": "loc",
    "op": "op",
    "name": "op",
    "message": "op",
    "category": "aux",
    "buffer": "aux",
    "dst_pe": "aux",
    "src_pe": "aux",
    "stalled": "val",
    "in_use": "val",
    "nbytes": "nbytes",
}
COLUMNS = ("kind", "time", "pe", "cmd", "fut", "chan", "loc", "op", "aux", "val", "nbytes")


@dataclass
class Columns:
    """One numpy array per event attribute, -1 where an event has no such field.

    ``op`` holds string ids (ISSUE op, OP_LOG op, KERNEL_START name,
    KERNEL_ERROR message); ``aux`` the OP_LOG category string id, the scratch
    buffer id, or the IPCQ peer PE; ``val`` WAIT_END stalled cycles or scratch
    bytes in use.
    """

    kind: np.ndarray
    time: np.ndarray
    pe: np.ndarray
    cmd: np.ndarray
    fut: np.ndarray
    chan: np.ndarray
    loc: np.ndarray
    op: np.ndarray
    aux: np.ndarray
    val: np.ndarray
    nbytes: np.ndarray


@dataclass
class Commands:
    """Every issued command, indexed by command id; event indices are -1 when absent."""

    issue: np.ndarray
    pe: np.ndarray
    op: np.ndarray  # string id
    future: np.ndarray
    addr: np.ndarray
    nbytes: np.ndarray
    shape: np.ndarray  # index into TraceIndex.shapes
    dtype: np.ndarray  # string id
    blocking: np.ndarray
    loc: np.ndarray
    channel: np.ndarray
    request: np.ndarray
    grant: np.ndarray
    release: np.ndarray
    complete: np.ndarray


@dataclass
class Futures:
    """Every future, indexed by future id: its command and its wait."""

    cmd: np.ndarray
    wait_begin: np.ndarray
    wait_end: np.ndarray
    wait_loc: np.ndarray
    stall: np.ndarray


@dataclass
class TraceIndex:
    """Everything replay needs from a trace, built once when it is opened."""

    header: dict[str, Any]
    footer: dict[str, Any] | None
    truncated: bool
    sources: dict[str, str]
    strings: list[str]
    locs: list[SourceLoc]
    shapes: list[tuple[int, ...]]
    columns: Columns
    commands: Commands
    futures: Futures
    #: Per PE: sorted indices of events carrying a source location.
    pe_loc_events: list[np.ndarray] = field(default_factory=list)
    #: Per PE: sorted indices of events that change the PE's status.
    pe_status_events: list[np.ndarray] = field(default_factory=list)
    #: Per PE: sorted indices of scratch alloc/free events.
    pe_scratch_events: list[np.ndarray] = field(default_factory=list)
    #: Per channel: command ids in request order.
    channel_cmds: list[np.ndarray] = field(default_factory=list)
    #: (category id, op id) -> sorted indices of its OP_LOG events.
    op_log_events: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)

    @property
    def n_events(self) -> int:
        return len(self.columns.kind)

    @property
    def n_pes(self) -> int:
        rows, cols = self.header.get("mesh", [1, 1])
        return int(rows) * int(cols)

    @property
    def channels(self) -> list[dict[str, Any]]:
        return self.header.get("channels", [])

    def loc(self, loc_id: int) -> SourceLoc | None:
        return None if loc_id < 0 else self.locs[loc_id]

    def string(self, string_id: int) -> str:
        return "" if string_id < 0 else self.strings[string_id]

    def string_id(self, text: str) -> int:
        """The id of an interned string, -1 if the trace never uses it."""
        try:
            return self.strings.index(text)
        except ValueError:
            return NONE


_STATUS_KINDS = (
    Kind.KERNEL_START,
    Kind.KERNEL_END,
    Kind.KERNEL_ERROR,
    Kind.WAIT_BEGIN,
    Kind.WAIT_END,
    Kind.DEADLOCK,
)
_SCRATCH_KINDS = (Kind.SCRATCH_ALLOC, Kind.SCRATCH_FREE)


class IndexBuilder:
    """Accumulates event records batch by batch, then builds the TraceIndex."""

    def __init__(self) -> None:
        self._batches: list[dict[str, np.ndarray]] = []
        self._issues: list[np.ndarray] = []
        self._shapes: dict[tuple[int, ...], int] = {}
        self._count = 0

    def add(self, records: list[list[Any]]) -> None:
        """Take a batch of records ``[kind, time, pe, *fields]`` (time absolute)."""
        n = len(records)
        if not n:
            return
        base = self._count
        cols = {name: np.full(n, NONE, dtype=np.int64) for name in COLUMNS}
        by_kind: dict[int, list[int]] = {}
        for i, record in enumerate(records):
            by_kind.setdefault(record[0], []).append(i)
        shapes = self._shapes
        for kind, positions in by_kind.items():
            fields = FIELDS[Kind(kind)]
            rows = [records[i] for i in positions]
            if kind == Kind.ISSUE:
                rows = [[*r[:8], shapes.setdefault(tuple(r[8]), len(shapes)), *r[9:]] for r in rows]
            table = np.array(rows, dtype=np.int64).reshape(len(rows), 3 + len(fields))
            where = np.asarray(positions, dtype=np.int64)
            cols["kind"][where] = kind
            cols["time"][where] = table[:, 1]
            cols["pe"][where] = table[:, 2]
            for j, (name, _) in enumerate(fields):
                column = _COLUMN_OF_FIELD.get(name)
                if column is not None:
                    cols[column][where] = table[:, 3 + j]
            if kind == Kind.ISSUE:
                issue = np.empty((len(rows), 12), dtype=np.int64)
                issue[:, 0] = where + base
                issue[:, 1:] = table[:, 1:]
                self._issues.append(issue)
        self._batches.append(cols)
        self._count += n

    def build(self, trace: Trace) -> TraceIndex:
        """The index, with the header, footer and tables of ``trace``."""
        columns = Columns(
            **{name: _concat([b[name] for b in self._batches], _DTYPES[name]) for name in COLUMNS}
        )
        self._batches.clear()
        issues = np.concatenate(self._issues) if self._issues else np.empty((0, 12), dtype=np.int64)
        commands = _commands(columns, issues)
        futures = _futures(columns, commands)
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


_DTYPES = {
    "kind": np.int8,
    "time": np.int64,
    "pe": np.int32,
    "cmd": np.int64,
    "fut": np.int64,
    "chan": np.int32,
    "loc": np.int32,
    "op": np.int32,
    "aux": np.int64,
    "val": np.int64,
    "nbytes": np.int64,
}


def _concat(parts: list[np.ndarray], dtype) -> np.ndarray:
    if not parts:
        return np.empty(0, dtype=dtype)
    return np.concatenate(parts).astype(dtype, copy=False)


def _scatter(size: int, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """An array of ``size`` filled with -1, with ``values`` at ``keys`` (first one wins)."""
    out = np.full(size, NONE, dtype=np.int64)
    ok = (keys >= 0) & (keys < size)
    keys, values = keys[ok], values[ok]
    # Assigning in reverse makes the first occurrence the one that stays.
    out[keys[::-1]] = values[::-1]
    return out


def _commands(c: Columns, issues: np.ndarray) -> Commands:
    # issues columns: index, time, pe, cmd, op, future, addr, nbytes, shape, dtype, blocking, loc
    size = int(issues[:, 3].max()) + 1 if len(issues) else 0
    cmd = issues[:, 3]

    def by_cmd(col: int) -> np.ndarray:
        return _scatter(size, cmd, issues[:, col])

    def event_of(kind: Kind) -> np.ndarray:
        where = np.flatnonzero(c.kind == kind)
        return _scatter(size, c.cmd[where], where)

    request = event_of(Kind.CHAN_REQUEST)
    channel = np.full(size, NONE, dtype=np.int64)
    has = request >= 0
    channel[has] = c.chan[request[has]]
    return Commands(
        issue=by_cmd(0),
        pe=by_cmd(2),
        op=by_cmd(4),
        future=by_cmd(5),
        addr=by_cmd(6),
        nbytes=by_cmd(7),
        shape=by_cmd(8),
        dtype=by_cmd(9),
        blocking=by_cmd(10),
        loc=by_cmd(11),
        channel=channel,
        request=request,
        grant=event_of(Kind.CHAN_GRANT),
        release=event_of(Kind.CHAN_RELEASE),
        complete=event_of(Kind.COMPLETE),
    )


def _futures(c: Columns, commands: Commands) -> Futures:
    has_future = commands.future >= 0
    size = int(commands.future[has_future].max()) + 1 if has_future.any() else 0
    cmd_ids = np.flatnonzero(has_future)
    begins = np.flatnonzero(c.kind == Kind.WAIT_BEGIN)
    ends = np.flatnonzero(c.kind == Kind.WAIT_END)
    wait_end = _scatter(size, c.fut[ends], ends)
    stall = np.zeros(size, dtype=np.int64)
    done = wait_end >= 0
    stall[done] = c.val[wait_end[done]]
    return Futures(
        cmd=_scatter(size, commands.future[cmd_ids], cmd_ids),
        wait_begin=_scatter(size, c.fut[begins], begins),
        wait_end=wait_end,
        wait_loc=_scatter(size, c.fut[begins], c.loc[begins]),
        stall=stall,
    )


def _per_entity(index: TraceIndex) -> None:
    c = index.columns
    n_pes = index.n_pes
    status_mask = np.isin(c.kind, np.array(_STATUS_KINDS, dtype=np.int8))
    scratch_mask = np.isin(c.kind, np.array(_SCRATCH_KINDS, dtype=np.int8))
    loc_mask = c.loc >= 0
    for pe in range(n_pes):
        on_pe = c.pe == pe
        index.pe_loc_events.append(np.flatnonzero(on_pe & loc_mask))
        index.pe_status_events.append(np.flatnonzero(on_pe & status_mask))
        index.pe_scratch_events.append(np.flatnonzero(on_pe & scratch_mask))
    cmds = index.commands
    with_channel = np.flatnonzero(cmds.channel >= 0)
    order = np.argsort(cmds.request[with_channel], kind="stable")
    with_channel = with_channel[order]
    for ch in range(len(index.channels)):
        index.channel_cmds.append(with_channel[cmds.channel[with_channel] == ch])
    ops = np.flatnonzero(c.kind == Kind.OP_LOG)
    if len(ops):
        keys = c.aux[ops] * (len(index.strings) + 1) + c.op[ops]
        for key in np.unique(keys):
            category, op = divmod(int(key), len(index.strings) + 1)
            index.op_log_events[(category, op)] = ops[keys == key]


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
    done = 0
    for batch in batches:
        builder.add(batch)
        done += len(batch)
        if progress is not None:
            progress(done)
    return builder.build(trace)
