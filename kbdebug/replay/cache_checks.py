"""What an index cache file holds, checked as the reader checks a trace, before any of it
is used; and the index made from it by the builder's own functions.

A cache file keeps what reading a trace costs (its events as columns, the ISSUE fields
that have no column, its strings, locs, sources and shapes) and nothing derived from it:

- the header and the footer are read from the trace itself (the cache says only how
  long they are) and checked by the reader's own checks (``RecordChecks``); a trace cut
  short must end in less than one whole record where the cache says it is cut;
- strings, locs and sources are checked by the reader's definition checks;
- each event's kind must be one of the trace's version, its time absolute and
  non-decreasing within the cycle limit, each field within the range the reader
  allows (PEs of the mesh, channels of the header, defined strings and locs, ids
  below what the file can hold, counts and cycles), and every column -1 where its
  event has no such field;
- the command, future, per-PE and per-channel tables are then derived as the builder
  derives them (kbdebug.replay.derive), with its checks: ids, duplicates, order.

Anything that does not pass raises CacheRefused; nothing of the file is trusted.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, NamedTuple

import msgpack
import numpy as np

from emulator.trace import wire
from emulator.trace.errors import TraceFormatError
from emulator.trace.parser import unpack_limits
from emulator.trace.records import RecordChecks
from emulator.trace.rules import INT64_MAX, MAX_CYCLES, RULES, is_shape, make_checks
from emulator.trace.schema import Kind, SourceLoc, event_codes
from kbdebug.replay.derive import (
    _SCRATCH_KINDS,
    _STATUS_KINDS,
    check_ids,
    check_order,
    commands_of,
    entity_events,
    futures_of,
    per_entity,
)
from kbdebug.replay.index import _KEPT, _kept_dtype
from kbdebug.replay.tables import (
    COLUMN_OF_FIELD,
    COLUMNS,
    DTYPES,
    NONE,
    WIDE,
    Columns,
    TraceIndex,
    position_dtype,
)


class CacheRefused(ValueError):
    """A cache file that is not one kbdebug wrote for this trace, whole: never used."""


class Events(NamedTuple):
    """Checked events: the columns, each kind's event indices, each kind's values of its
    fields that have a column (by kind and column), and derive.entity_events's lists."""

    columns: Columns
    events: dict[Kind, np.ndarray]
    values: dict[tuple[Kind, str], np.ndarray]
    entity: dict[str, np.ndarray]


# Kinds counted this many at a time (see _kind_counts).
COUNT_BLOCK = 1 << 16
_ENTITY_KINDS = {"status": frozenset(_STATUS_KINDS), "scratch": frozenset(_SCRATCH_KINDS)}
#: The ISSUE fields that have no column, kept in the cache in ISSUE order: name, dtype.
ISSUE_EXTRAS = (("addr", np.int64), ("shape", np.int32), ("dtype", np.int32), ("blocking", np.int8))


class _TraceChecks(RecordChecks):
    """The reader's checks of a header, definitions and footer, outside a pass over a
    file: the state they read is set here as the parser would have it."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.chunks = SimpleNamespace(total=size)
        self.on_tables = None
        self.lenient = False
        self.version: tuple[int, int] | None = None
        self.header: dict[str, Any] = {}
        self.strings: list[str] = []
        self.locs: list[SourceLoc] = []
        self.sources: dict[str, str] = {}
        self.footer: dict[str, Any] | None = None
        self.time = 0
        self.event_records = 0
        self.n_pes = self.n_channels = 0
        self.max_id = size // wire.MIN_EVENT_BYTES
        self.checks, self.defined = make_checks(0, 0, self.max_id)


def _refuse(reason: str) -> None:
    raise CacheRefused(reason)


def _pread(fd: int, length: int, at: int) -> bytes:
    data = os.pread(fd, length, at)
    if len(data) != length:
        _refuse("the trace is shorter than the cache says")
    return data


def _one_object(data: bytes, what: str) -> Any:
    """The one msgpack object ``data`` holds, unpacked as the reader unpacks."""
    try:
        return msgpack.unpackb(data, **unpack_limits())
    except (ValueError, msgpack.UnpackException) as e:
        raise CacheRefused(f"the trace's {what} is not where the cache says: {e}") from None


def trace_header(fd: int, size: int, header_len: Any, name: str) -> _TraceChecks:
    """The checks, set up by the trace's own header (its first ``header_len`` bytes)."""
    if type(header_len) is not int or not 0 < header_len <= min(size, wire.MAX_RECORD_BYTES):
        _refuse("header length")
    checks = _TraceChecks(name, size)
    try:
        checks.read_header(_one_object(_pread(fd, header_len, 0), "header"), 0)
    except TraceFormatError as e:
        raise CacheRefused(str(e)) from None
    if checks.lenient:
        _refuse("a trace of a newer minor version is never cached")
    return checks


def definitions(checks: _TraceChecks, meta: dict[str, Any]) -> None:
    """Check the strings, locs and sources of the cache's map as their definitions in a
    trace are checked, into ``checks``."""
    strings, locs, sources = meta.get("strings"), meta.get("locs"), meta.get("sources")
    if type(strings) is not list or type(locs) is not list or type(sources) is not dict:
        _refuse("definitions")
    try:
        for text in strings:
            checks.define_string([wire.DEFINE_STRING, text], 0)
        for at, flat in enumerate(locs):
            # A loc and the chain of its callers, each an earlier loc: 3 items a link.
            if type(flat) is not list or not flat or len(flat) % 3 or len(flat) > 3 * (at + 1):
                _refuse("a loc")
            loc = None
            for link in range(len(flat) - 3, -1, -3):
                file, line, function = flat[link : link + 3]
                checks.define_loc([wire.DEFINE_LOC, file, line, function], 0)
                checks.locs.pop()
                loc = SourceLoc(file, line, function, loc)
            checks.locs.append(loc)
            checks.defined(len(checks.strings), len(checks.locs))
        for file, text in sources.items():
            checks.embed_source([wire.EMBED_SOURCE, file, text], 0)
    except TraceFormatError as e:
        raise CacheRefused(str(e)) from None


def trace_end(
    checks: _TraceChecks, fd: int, size: int, meta: dict[str, Any], n_events: int, last: int
) -> None:
    """Check how the trace ends against the trace itself: its footer (the last
    ``footer_len`` bytes, checked by the reader's footer check against ``n_events``
    events ending at cycle ``last``), or, cut short, less than one whole record after
    ``truncated_at``. Sets ``checks.footer``."""
    footer_len, cut = meta.get("footer_len"), meta.get("truncated_at")
    if footer_len is not None:
        if cut is not None or type(footer_len) is not int:
            _refuse("footer")
        if not 0 < footer_len <= min(size, wire.MAX_RECORD_BYTES):
            _refuse("footer length")
        footer = _one_object(_pread(fd, footer_len, size - footer_len), "footer")
        if not isinstance(footer, dict):
            _refuse("the trace's last object is not a footer")
        checks.event_records, checks.time = n_events, last
        try:
            checks.read_footer(footer, size - footer_len)
        except TraceFormatError as e:
            raise CacheRefused(str(e)) from None
        return
    if type(cut) is not int or not 0 < cut <= size or size - cut > wire.MAX_RECORD_BYTES:
        _refuse("where the trace is cut")
    unpacker = msgpack.Unpacker(max_buffer_size=wire.MAX_RECORD_BYTES, **unpack_limits())
    unpacker.feed(_pread(fd, size - cut, cut))
    try:
        unpacker.unpack()
    except msgpack.OutOfData:
        return  # less than a record: cut there, as the cache says
    except (ValueError, msgpack.UnpackException):
        pass
    _refuse("the trace is not cut where the cache says")


def shapes_of(meta: dict[str, Any], n_issues: int) -> list[tuple[int, ...]]:
    shapes = meta.get("shapes")
    if type(shapes) is not list or len(shapes) > n_issues:
        _refuse("shapes")
    out = []
    for shape in shapes:
        if type(shape) is not list or len(shape) > wire.MAX_ARRAY_LEN or not is_shape(shape):
            _refuse("a shape")
        out.append(tuple(shape))
    if len(set(out)) != len(out):
        _refuse("a shape twice")
    return out


def _range(range_: str | None, sizes: dict[str, int]) -> tuple[int, int]:
    """The values the reader allows a field of ``range_`` (see emulator.trace.rules)."""
    return {
        "id": (0, sizes["max_id"]),
        "id_or_none": (-1, sizes["max_id"]),
        "pe": (0, sizes["pes"] - 1),
        "channel": (0, sizes["channels"] - 1),
        "string": (0, sizes["strings"] - 1),
        "loc": (-1, sizes["locs"] - 1),
        "count": (0, INT64_MAX),
        "addr": (-1, INT64_MAX),
        "cycles": (0, MAX_CYCLES),
        None: (0, 1),  # a bool
    }.get(range_, (-INT64_MAX - 1, INT64_MAX))


def _kind_counts(kind: np.ndarray) -> np.ndarray:
    """Events of each kind code (0..255), counted a block at a time: bincount makes an
    int64 copy of what it counts (80 MB for ten million events)."""
    counts = np.zeros(256, dtype=np.int64)
    codes = kind.view(np.uint8)
    for at in range(0, len(codes), COUNT_BLOCK):
        counts += np.bincount(codes[at : at + COUNT_BLOCK], minlength=256)
    return counts


def _within(values: np.ndarray, low: int, high: int) -> bool:
    return not len(values) or (low <= int(values.min()) and int(values.max()) <= high)


def checked_events(columns: dict[str, np.ndarray], checks: _TraceChecks) -> Events:
    """The columns, once every event in them is one the reader would take from the trace
    (see the module's doc), with the indices of each kind's events and each kind's
    values of each of its fields that has a column."""
    n = len(columns["kind"])
    for name in COLUMNS:
        array = columns[name]
        if array.ndim != 1 or len(array) != n or array.dtype not in (DTYPES[name], WIDE):
            _refuse(f"column {name}")
    if columns["kind"].dtype != DTYPES["kind"]:
        _refuse("column kind")
    kind, time, pe = columns["kind"], columns["time"], columns["pe"]
    assert checks.version is not None
    counts = _kind_counts(kind)
    kinds = [Kind(code) for code in np.flatnonzero(counts).tolist() if code in RULES]
    allowed = event_codes(checks.version)
    if sum(int(counts[k]) for k in kinds) != n or any(int(k) not in allowed for k in kinds):
        _refuse("an event of no kind this trace's version has")
    if n and not (
        0 <= int(time[0])
        and int(time[-1]) <= MAX_CYCLES
        and bool((time[1:] >= time[:-1]).all())
        and _within(pe, 0, checks.n_pes - 1)
    ):
        _refuse("times going back, or past the limit, or PEs outside the mesh")
    sizes = {
        "max_id": checks.max_id,
        "pes": checks.n_pes,
        "channels": checks.n_channels,
        "strings": len(checks.strings),
        "locs": len(checks.locs),
    }
    position = position_dtype(n)
    entity = {
        name: found.astype(position, copy=False)
        for name, found in entity_events(kind, columns["loc"]).items()
    }
    # Each kind's events: those of the status and scratch kinds found among the entity
    # lists (the tables need them anyway), the others by a pass over the kinds.
    events: dict[Kind, np.ndarray] = {}
    for name in ("status", "scratch"):
        found = entity[name]
        of = kind[found]
        for k in kinds:
            if k in _ENTITY_KINDS[name]:
                events[k] = found[of == k]
    for k in kinds:
        if k not in events:
            events[k] = np.flatnonzero(kind == k).astype(position, copy=False)
    values: dict[tuple[Kind, str], np.ndarray] = {}
    # Per column, the values not -1 that the events' own fields account for.
    filled = dict.fromkeys(COLUMNS[3:], 0)
    for k in kinds:
        at = events[k]
        for name, _, range_ in RULES[k][2:]:
            column = COLUMN_OF_FIELD.get(name)
            if column is None:
                continue  # an ISSUE field without a column: checked with the extras
            got = values[(k, column)] = columns[column][at]
            low, high = _range(range_, sizes)
            if not _within(got, low, high):
                _refuse(f"{k.name} {name} out of range")
            filled[column] += np.count_nonzero(got != NONE) if low < 0 else len(got)
    for column, count in filled.items():
        if np.count_nonzero(columns[column] != NONE) != count:
            _refuse(f"column {column} has a value where its event has no such field")
    return Events(Columns(**{name: columns[name] for name in COLUMNS}), events, values, entity)


def checked_extras(
    extras: dict[str, np.ndarray], n_issues: int, checks: _TraceChecks, n_shapes: int
) -> None:
    """The ISSUE fields without a column, in ISSUE order, within the reader's ranges."""
    limits = {
        "addr": (-1, INT64_MAX),
        "shape": (0, n_shapes - 1),
        "dtype": (0, len(checks.strings) - 1),
        "blocking": (0, 1),
    }
    for name, dtype in ISSUE_EXTRAS:
        array = extras[name]
        if array.ndim != 1 or len(array) != n_issues or array.dtype != dtype:
            _refuse(f"ISSUE {name}")
        if not _within(array, *limits[name]):
            _refuse(f"ISSUE {name} out of range")


def index_of(
    checks: _TraceChecks,
    checked: Events,
    extras: dict[str, np.ndarray],
    shapes: list[tuple[int, ...]],
) -> TraceIndex:
    """The index of checked events, its tables derived as IndexBuilder.build derives them
    (with its checks of ids, duplicates and order)."""
    columns, events, values, entity = checked
    position = position_dtype(len(columns.kind))
    empty = np.empty(0, dtype=np.int64)
    kept: dict[Kind, dict[str, np.ndarray]] = {}
    for k, fields in _KEPT.items():
        at = events.get(k, empty)
        kept[k] = {}
        for name, (item, dtype) in fields.items():
            if item < 0:
                array, wanted = at, position
            elif k == Kind.ISSUE and name in extras:
                array, wanted = extras[name], _kept_dtype(name, dtype)
            elif name == "pe":
                array, wanted = columns.pe[at], np.int32
            else:
                column = COLUMN_OF_FIELD[name]
                array = values.get((k, column), empty)
                wanted = getattr(columns, column).dtype if dtype is None else dtype
            kept[k][name] = array.astype(wanted, copy=False)
    source = checks.name
    try:
        check_ids(columns, source)
        commands = commands_of(columns, kept, source)
        waits = {k: kept[k] for k in (Kind.WAIT_BEGIN, Kind.WAIT_END)}
        futures = futures_of(columns, commands, waits, source)
        check_order(columns, commands, futures, entity["status"], source)
    except TraceFormatError as e:
        raise CacheRefused(str(e)) from None
    index = TraceIndex(
        header=checks.header,
        footer=checks.footer,
        truncated=checks.footer is None,
        sources=checks.sources,
        strings=checks.strings,
        locs=checks.locs,
        shapes=shapes,
        columns=columns,
        commands=commands,
        futures=futures,
    )
    per_entity(index, kept[Kind.OP_LOG], entity)
    return index
