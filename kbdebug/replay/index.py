"""IndexBuilder and build_index: a trace's TraceIndex, its columns filled from the
reader's batches, then its lookup tables derived (kbdebug.replay.derive).

The tables themselves live in kbdebug.replay.tables; every name imported from here
before stays importable from here.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from emulator.trace import wire
from emulator.trace.reader import EventTables, Trace
from emulator.trace.rules import RULES
from emulator.trace.schema import FIELDS, Kind, field_index
from kbdebug.replay.derive import (
    check_ids,
    check_order,
    commands_of,
    entity_events,
    futures_of,
    per_entity,
)
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
# Fields kept per kind as the events come, for the command and future tables (instead
# of finding the events among the columns, and their fields in them, once all are read):
# name -> the item of the record ("event": the event's index), and its dtype (None: that
# of its column, "position": position_dtype's).
_KEPT: dict[Kind, dict[str, tuple[int, Any]]] = {
    kind: {"event": (-1, "position")}
    | {name: (3 + field_index(kind, name), dtype) for name, dtype in fields}
    for kind, fields in (
        (Kind.ISSUE, (("cmd", None), ("op", np.int32), ("future", None), ("addr", np.int64),
                      ("nbytes", np.int64), ("shape", np.int32), ("dtype", np.int32),
                      ("blocking", np.int8), ("loc", np.int32))),
        (Kind.CHAN_REQUEST, (("cmd", None), ("channel", np.int32))),
        (Kind.CHAN_GRANT, (("cmd", None),)),
        (Kind.CHAN_RELEASE, (("cmd", None),)),
        (Kind.COMPLETE, (("cmd", None),)),
        (Kind.WAIT_BEGIN, (("future", None), ("loc", np.int32))),
        (Kind.WAIT_END, (("future", None), ("stalled", np.int64))),
        (Kind.OP_LOG, (("category", np.int32), ("op", np.int32))),
    )
}  # fmt: skip
_KEPT[Kind.ISSUE]["pe"] = (2, np.int32)  # item 2 of every record, not one of its fields
# Room made for a kept field at first: the columns' room over this. That room is a
# file's size over the smallest record, some 3x the events of a real trace, and a kept
# kind is seldom more than half of them: a field seldom grows (by a copy), and the
# virtual memory the fields reserve stays near that of the columns.
KEPT_SHARE = 4
# The smallest event record: a fixarray header, kind, dt and pe of one byte each.
MIN_EVENT_BYTES = wire.MIN_EVENT_BYTES
# Columns made room for at once, at most (a file's size allows more on paper): past this
# they grow by half. Room never written is virtual memory, but a 2 GB file must not
# reserve 40 GB of it before its first record is read.
MAX_PRESIZED_EVENTS = 1 << 25


def _kept_dtype(name: str, dtype: Any) -> Any:
    """The dtype a kept field starts in (see _KEPT)."""
    if dtype == "position":
        return np.int32
    return DTYPES[COLUMN_OF_FIELD[name]] if dtype is None else dtype


class _Kept:
    """One kept field's values, appended batch by batch into room made ahead (virtual
    memory until written, as for the columns), grown by half when full, widened when
    a batch comes in a wider dtype."""

    def __init__(self, capacity: int, dtype: Any) -> None:
        self._values = np.empty(capacity, dtype=dtype)
        self._count = 0

    def append(self, values: np.ndarray, dtype: Any) -> None:
        """Append ``values``, which fit in ``dtype``."""
        count, n, room = self._count, len(values), len(self._values)
        wider = np.promote_types(self._values.dtype, dtype)
        if count + n > room or wider != self._values.dtype:
            if count + n > room:
                room = max(count + n, room + room // 2, 1 << 12)
            grown = np.empty(room, dtype=wider)
            grown[:count] = self._values[:count]
            self._values = grown
        self._values[count : count + n] = values
        self._count = count + n

    def array(self) -> np.ndarray:
        return self._values[: self._count]


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
        # Per kind in _KEPT, per field, its values so far.
        self._kept = {
            kind: {
                name: _Kept(capacity // KEPT_SHARE, _kept_dtype(name, dtype))
                for name, (_, dtype) in fields.items()
            }
            for kind, fields in _KEPT.items()
        }
        # The indices of the events per_entity splits by PE (see entity_events).
        self._entity = {
            name: _Kept(capacity // KEPT_SHARE, np.int32) for name in ("loc", "status", "scratch")
        }
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
                target = cols[column]
                # Cast first, then scatter: an indexed assignment that casts as it goes
                # is three times slower than one that does not.
                target[at] = rows[:, offset].astype(target.dtype, copy=False)
        position = position_dtype(base + n)
        for name, events in entity_events(tables.kinds, cols["loc"]).items():
            self._entity[name].append(events + base, position)
        for kind, fields in _KEPT.items():
            if kind not in tables.tables:
                continue
            at, rows = tables.tables[kind]
            kept = self._kept[kind]
            for name, (item, dtype) in fields.items():
                if item < 0:
                    values = at + base
                    dtype = position
                else:
                    values = rows[:, item]
                    if dtype is None:
                        dtype = self._columns[COLUMN_OF_FIELD[name]].dtype
                if name == "shape":
                    shapes = self._shapes
                    shape_ids = [shapes.setdefault(s, len(shapes)) for s in tables.shapes]
                    values = np.array(shape_ids, dtype=dtype)[values]
                kept[name].append(values, dtype)
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
        check_ids(columns, source)
        kept = {
            kind: {name: field.array() for name, field in fields.items()}
            for kind, fields in self._kept.items()
        }
        self._kept = {}  # what the tables do not hold on to is freed with ``kept``
        commands = commands_of(columns, kept, source)
        # The future table needs only the waits' fields: the others go before it is made
        # (at ten million events, about 10 MB off the open's peak).
        waits = {kind: kept[kind] for kind in (Kind.WAIT_BEGIN, Kind.WAIT_END)}
        op_log = kept.pop(Kind.OP_LOG)
        del kept
        futures = futures_of(columns, commands, waits, source)
        del waits
        entity = {name: events.array() for name, events in self._entity.items()}
        self._entity = {}
        check_order(columns, commands, futures, entity["status"], source)
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
        per_entity(index, op_log, entity)
        return index


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
