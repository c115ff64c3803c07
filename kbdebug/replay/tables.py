"""The index's data: one numpy column per event field, and the per-command, per-future,
per-channel and per-PE tables replay reads (TraceIndex holds them all)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emulator.trace.schema import SourceLoc

NONE = -1

# Column of each event field (the rest of an ISSUE record goes to the command table).
COLUMN_OF_FIELD = {
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
    "made_by": "aux",  # PROVENANCE (format 1.6): the command whose result cmd moves
    "stalled": "val",
    "in_use": "val",
    "nbytes": "nbytes",
}
_COLUMN_OF_FIELD = COLUMN_OF_FIELD  # the name replay.py used before it was public
COLUMNS = ("kind", "time", "pe", "cmd", "fut", "chan", "loc", "op", "aux", "val", "nbytes")
#: The dtype each column is built in. Ids and positions are int32: the reader bounds
#: PEs (65,536) and channels (65,536) by the format's limits, and string and loc ids by
#: those defined, which a process cannot hold 2**31 of. Command and future ids, scratch
#: buffer ids, byte counts and stalled cycles have no such bound: the builder checks
#: them and widens their column to int64 when one does not fit (``WIDE``), never
#: letting a value wrap. ``time`` is int64 from the start.
DTYPES = {
    "kind": np.int8,
    "time": np.int64,
    "pe": np.int32,
    "cmd": np.int32,
    "fut": np.int32,
    "chan": np.int32,
    "loc": np.int32,
    "op": np.int32,
    "aux": np.int32,
    "val": np.int32,
    "nbytes": np.int32,
}
#: What a column of DTYPES widens to when a value does not fit.
WIDE = np.int64


def position_dtype(n_events: int) -> type[np.signedinteger]:
    """The dtype of event indices, and of command and future ids (below the number of
    events), in the tables of a trace of ``n_events`` events: int32 when they fit."""
    return np.int32 if n_events < 2**31 else np.int64


@dataclass
class Columns:
    """One numpy array per event attribute, -1 where an event has no such field.

    ``op`` holds string ids (ISSUE op, OP_LOG op, KERNEL_START name,
    KERNEL_ERROR message); ``aux`` the OP_LOG category string id, the scratch
    buffer id, or the IPCQ peer PE; ``val`` WAIT_END stalled cycles or scratch
    bytes in use. A READS (format 1.3) has ``cmd``, the command that consumes the
    data, and ``fut``, the load or receive whose data it is (``kind == Kind.READS``
    selects them; every other column is -1). Each is of its DTYPES dtype, or int64
    (see DTYPES): cast to int64 before arithmetic that could leave the int32 range.
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
    """Every command, indexed by command id; event indices are -1 when absent.

    ``addr`` and ``nbytes`` are int64, ``blocking`` int8 (0 or 1), the rest of
    ``position_dtype`` (ids and event indices) or int32 (string, loc, shape, PE and
    channel ids): cast to int64 before arithmetic that could leave the int32 range.
    """

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
    """Every future, indexed by future id: its command's passage and its wait.

    Event indices are -1 when absent. ``stall`` is the WAIT_END's stalled
    cycles (0 if the wait never began or never ended). ``blocks`` says the wait
    blocked its PE: it stalled, or it never ended (a deadlock, a truncated
    trace) and the data had not arrived when it began.
    """

    cmd: np.ndarray
    pe: np.ndarray
    loc: np.ndarray  # where the future was issued
    issue: np.ndarray
    request: np.ndarray
    grant: np.ndarray
    release: np.ndarray
    complete: np.ndarray
    wait_begin: np.ndarray
    wait_end: np.ndarray
    wait_loc: np.ndarray
    stall: np.ndarray
    blocks: np.ndarray


@dataclass
class ChannelTable:
    """One channel's commands in request order, with their event indices (-1 when absent)
    and ``done_by``: the running maximum of the release indices (absent counts as never),
    so the commands wholly before a position are a prefix found by bisection."""

    cmds: np.ndarray
    request: np.ndarray
    grant: np.ndarray
    release: np.ndarray
    done_by: np.ndarray


@dataclass
class LiveTable:
    """Futures in issue order, split into those whose wait ends (with the running maximum
    of the end, as in ChannelTable) and those never resolved, for ``state_at``."""

    resolved: np.ndarray
    resolved_issue: np.ndarray
    resolved_done_by: np.ndarray
    unresolved: np.ndarray
    unresolved_issue: np.ndarray


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
    #: Per channel: its commands with their event indices, for ``state_at``.
    channel_tables: list[ChannelTable] = field(default_factory=list)
    #: Futures by issue and resolution, for ``state_at``.
    live_table: LiveTable | None = None
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

    @property
    def end_time(self) -> int:
        """The footer's end time, or the last event's time if the trace is truncated."""
        if self.footer is not None and self.footer.get("end_time") is not None:
            return int(self.footer["end_time"])
        return int(self.columns.time[-1]) if self.n_events else 0

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
