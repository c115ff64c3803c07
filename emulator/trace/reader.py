"""read_trace: load and validate a .kbt file (layout in traces/FORMAT.md) into a Trace."""

from __future__ import annotations

import errno
import functools
import gc
import os
import reprlib
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any, NoReturn

import msgpack
import numpy as np

from emulator.trace import wire
from emulator.trace.bulk import BlockScan, scan_block
from emulator.trace.errors import TraceFormatError
from emulator.trace.schema import CHANNEL_KINDS, FIELDS, STATUSES, Kind, SourceLoc

__all__ = ["EventTables", "Trace", "TraceFormatError", "read_trace", "read_trace_tables"]

INT64_MAX = 2**63 - 1
MAX_CYCLES = wire.MAX_CYCLES
# Bytes handed to the unpacker at a time; progress is reported once per chunk. A
# chunk's records (some 6,000) fit in the caches and in the memory the allocator kept
# from the chunk before: with a megabyte, each chunk's hundred thousand records
# made the allocator map fresh pages, and opening took 15% longer.
CHUNK_BYTES = 1 << 16
# Bytes scanned at a time by the fast path of read_trace_tables (see bulk.scan_block):
# large enough that numpy's per-call cost is spread over some 100,000 records.
BULK_BYTES = 1 << 20
MIN_BULK_BYTES = 1 << 12


@dataclass
class Trace:
    """A whole trace as read from a .kbt file.

    ``events`` holds one list per event, ``[kind, time, pe, *fields]`` in file
    order, with ``time`` absolute, str fields as indices into ``strings``, loc
    fields as indices into ``locs`` (-1 for None), shapes as lists of ints and
    bools as bools. ``decode`` turns one back into what was passed to ``emit``.
    """

    header: dict[str, Any]  # {} if the file ends inside the header
    version: tuple[int, int] | None  # None if the file ends inside the header
    sources: dict[str, str]
    strings: list[str]
    locs: list[SourceLoc]
    events: list[list[Any]]
    # {"status", "events", "end_time", "error", "error_loc"} with error_loc a
    # SourceLoc or None; None if the run's footer was never written.
    footer: dict[str, Any] | None
    truncated: bool  # the footer is missing: the writer was killed or never ended
    truncated_at: int | None  # byte offset where the whole records end, if truncated
    source: str = "<trace>"  # the path read, or "<bytes>": for errors found later

    def decode(self, i: int) -> tuple[Any, ...]:
        """Event ``i`` as ``(Kind, time, pe, *fields)`` with strings, locs and shapes resolved."""
        record = self.events[i]
        kind = Kind(record[0])
        fields = [kind, record[1], record[2]]
        strings, locs = self.strings, self.locs
        for (_, tag), value in zip(FIELDS[kind], record[3:], strict=True):
            if tag == "str":
                value = strings[value]
            elif tag == "loc":
                value = None if value == -1 else locs[value]
            elif tag == "shape":
                value = tuple(value)
            fields.append(value)
        return tuple(fields)

    def iter_decoded(self) -> Iterator[tuple[Any, ...]]:
        """Every event, decoded as by ``decode``."""
        for i in range(len(self.events)):
            yield self.decode(i)


@dataclass
class EventTables:
    """A batch of events as int64 arrays, for a caller that indexes a trace.

    ``kinds`` holds each event's kind, in file order. ``tables`` maps each kind in
    the batch to ``(at, rows)``: the positions of its events in the batch, and their
    records as the rows of an int64 array, ``[kind, time, pe, *fields]`` as
    ``Trace.events`` holds them (time absolute, ids as ids, bools as 0 or 1) but for
    an ISSUE's shape, which is there the index of the shape in ``shapes``.
    """

    kinds: np.ndarray
    tables: dict[int, tuple[np.ndarray, np.ndarray]]
    shapes: list[tuple[int, ...]]

    def __len__(self) -> int:
        return len(self.kinds)

    @classmethod
    def from_records(cls, records: Sequence[Sequence[Any]]) -> EventTables:
        """The tables of valid event records, lists or tuples ``[kind, time, pe, *fields]``.

        Raises OverflowError if an int does not fit in an int64.
        """
        n = len(records)
        kinds = np.fromiter(map(_first, records), dtype=np.int8, count=n)
        order = np.argsort(kinds, kind="stable")
        bounds = np.searchsorted(kinds[order], _KIND_EDGES)
        tables = {}
        shapes: list[tuple[int, ...]] = []
        for kind in np.flatnonzero(np.diff(bounds)).tolist():
            at = order[bounds[kind] : bounds[kind + 1]]
            group = itemgetter(*at.tolist())(records) if len(at) > 1 else (records[at[0]],)
            if kind == Kind.ISSUE:
                rows, shapes = _issue_rows(group)
            else:
                width = _WIDTHS[kind]
                rows = np.fromiter(
                    chain.from_iterable(group), dtype=np.int64, count=len(group) * width
                ).reshape(len(group), width)
            tables[kind] = (at, rows)
        return cls(kinds, tables, shapes)


_first = itemgetter(0)
_KIND_EDGES = np.arange(max(Kind) + 2)
_WIDTHS = {int(kind): 3 + len(fields) for kind, fields in FIELDS.items()}
_SHAPE_AT = 3 + [name for name, _ in FIELDS[Kind.ISSUE]].index("shape")
_issue_shape = itemgetter(_SHAPE_AT)
_issue_ints = itemgetter(*(at for at in range(_WIDTHS[Kind.ISSUE]) if at != _SHAPE_AT))


def _issue_rows(
    issues: Sequence[Sequence[Any]],
) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """ISSUE records as rows with their shapes as ids, and the shapes those ids index."""
    m = len(issues)
    ints = np.fromiter(
        chain.from_iterable(map(_issue_ints, issues)),
        dtype=np.int64,
        count=m * (_WIDTHS[Kind.ISSUE] - 1),
    ).reshape(m, -1)
    keys = list(map(tuple, map(_issue_shape, issues)))
    ids = {shape: i for i, shape in enumerate(dict.fromkeys(keys))}
    rows = np.empty((m, _WIDTHS[Kind.ISSUE]), dtype=np.int64)
    rows[:, :_SHAPE_AT] = ints[:, :_SHAPE_AT]
    rows[:, _SHAPE_AT] = np.fromiter(map(ids.__getitem__, keys), dtype=np.int64, count=m)
    rows[:, _SHAPE_AT + 1 :] = ints[:, _SHAPE_AT:]
    return rows, list(ids)


def read_trace(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview,
    *,
    progress: Callable[[int, int], None] | None = None,
    on_batch: Callable[[list[list[Any]]], None] | None = None,
    keep_events: bool = True,
) -> Trace:
    """Read and validate a whole trace from a path or from its bytes.

    ``progress(bytes_done, bytes_total)`` is called after every chunk read;
    an exception it raises (to cancel) propagates. A file that ends early
    (the writer was killed) is not an error: its whole records are returned with
    ``truncated`` set.

    ``on_batch(records)``, if given, is called after each chunk with the event
    records validated in it (in file order, as ``Trace.events`` holds them), so
    a caller can index a trace as it is read; with ``keep_events=False`` they
    are then dropped, ``Trace.events`` stays empty and no more than a chunk's
    records are held at once. Records handed over before an error are not taken
    back; an exception ``on_batch`` raises propagates.

    Raises TraceFormatError (a ValueError) for anything that is not a valid
    trace, OSError if the file cannot be read.
    """
    name, chunks = _open(source)
    with chunks:
        return _parse(_Parser(name, chunks, progress, on_batch, keep_events))


def read_trace_tables(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview,
    on_tables: Callable[[EventTables], None],
    *,
    progress: Callable[[int, int], None] | None = None,
) -> Trace:
    """Read and validate a trace as read_trace does, handing its events to ``on_tables``
    as EventTables, chunk by chunk, instead of keeping them (``Trace.events`` is empty).

    For indexing a large trace: blocks of records are parsed and checked for their
    types with numpy (see emulator.trace.bulk), and for their ranges on the arrays
    then handed over. Whatever is out of the ordinary (the footer, a bad record,
    bytes that are not msgpack) sends the reader the way read_trace goes, from that
    record, or from the start of the block if an event in it is out of range: the
    errors are read_trace's, with the same offsets and event indices. Once past it,
    the fast path takes over again.

    ``progress`` is as for read_trace. Tables handed over before an error are not
    taken back; an exception ``on_tables`` raises propagates.

    Raises TraceFormatError (a ValueError) for anything that is not a valid
    trace, OSError if the file cannot be read.
    """
    name, chunks = _open(source)
    with chunks:
        return _parse(_Parser(name, chunks, progress, on_tables=on_tables))


class _Chunks:
    """The bytes of a trace, read a chunk at a time: ``total`` bytes at most, fewer if the
    file ends early (it shrank while being read)."""

    def __init__(
        self, read: Callable[[int], bytes | memoryview], total: int, close: Callable[[], None]
    ):
        self.read = read
        self.total = total
        self.close = close

    def __enter__(self) -> _Chunks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_FILE_TYPES = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_trace_file(path: str | os.PathLike[str]) -> tuple[int, int]:
    """Open ``path`` for reading as a trace: ``(fd, size)`` of a regular file.

    Opened non-blocking, so a FIFO without a writer cannot hang the caller, and then
    refused, as is anything else that is not a regular file (a device such as
    /dev/zero would be read until memory runs out): TraceFormatError naming what it
    is. A loop of symbolic links is a TraceFormatError too; other failures to open
    are OSError.
    """
    name = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise TraceFormatError(
                "a loop of symbolic links, not a trace file", source=name
            ) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            what = next((what for test, what in _FILE_TYPES if test(info.st_mode)), "special")
            raise TraceFormatError(f"is {what}, not a trace file", source=name)
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def _open(source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> tuple[str, _Chunks]:
    """The name to give in errors and the chunks of a trace given by path or by its bytes.

    A file is streamed, never read whole: a bad one fails at its first bad record.
    """
    if isinstance(source, str | os.PathLike):
        fd, size = open_trace_file(source)
        return os.fspath(source), _Chunks(
            functools.partial(os.read, fd), size, functools.partial(os.close, fd)
        )
    view = memoryview(bytes(source))
    done = 0

    def read(n: int) -> memoryview:
        nonlocal done
        chunk = view[done : done + n]
        done += len(chunk)
        return chunk

    return "<bytes>", _Chunks(read, len(view), view.release)


def _parse(parser: _Parser) -> Trace:
    # A million small lists would trigger the cyclic collector hundreds of times, for
    # nothing (records hold no cycles): pausing it halves the time to read a trace.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return parser.parse()
    finally:
        if collecting:
            gc.enable()


# The range of each int field, by name (see _field_rules); the rest are "int64".
_INT_RANGES = {
    "channel": "channel",
    "dst_pe": "pe",
    "src_pe": "pe",
    "cmd": "id",
    "future": "id",
    "addr": "addr",
    "nbytes": "count",
    "in_use": "count",
    "buffer": "count",
    "stalled": "cycles",
}
# Kinds whose future is -1 when there is none: commands that return nothing waitable,
# a PE deadlocked on its outstanding commands rather than on a future.
_FUTURE_OR_NONE = (Kind.ISSUE, Kind.COMPLETE, Kind.DEADLOCK, Kind.HOST_READ)


def _field_rules() -> dict[int, tuple[tuple[str, type, str | None], ...]]:
    """Per kind, how each item after the kind is checked: (name, wire type, range).

    Ranges: "time" (a delta, >= 0), "int64" (at most 2**63 - 1: replay keeps ints
    in int64 columns), "count" (0 to 2**63 - 1), "addr" (-1 for none, or a count),
    "cycles" (0 to MAX_CYCLES), "pe" (a PE of the mesh), "channel" (an entry of the
    header's channel table), "string" / "loc" (an id defined by an earlier record; loc
    -1 is None), "shape" (a list of non-negative int64s), "id" / "id_or_none" (a
    command or future id, -1 allowed for the second: ids count up from 0 with the
    commands issued, each of which has an ISSUE event, so an id is below the number
    of events the file can hold; replay sizes its tables by the largest id).
    """
    rules = {}
    for kind, fields in FIELDS.items():
        items: list[tuple[str, type, str | None]] = [("time", int, "time"), ("pe", int, "pe")]
        for name, tag in fields:
            if tag == "int":
                range_ = _INT_RANGES.get(name, "int64")
                if name == "future" and kind in _FUTURE_OR_NONE:
                    range_ = "id_or_none"
                items.append((name, int, range_))
            elif tag == "bool":
                items.append((name, bool, None))
            elif tag == "str":
                items.append((name, int, "string"))
            elif tag == "loc":
                items.append((name, int, "loc"))
            else:
                items.append((name, list, "shape"))
        rules[int(kind)] = tuple(items)
    return rules


_RULES = _field_rules()

_RANGE_TESTS = {
    "time": "0 <= {v}",
    "int64": "-INT64_MAX - 1 <= {v} <= INT64_MAX",
    "count": "0 <= {v} <= INT64_MAX",
    "addr": "-1 <= {v} <= INT64_MAX",
    "cycles": "0 <= {v} <= MAX_CYCLES",
    "id": "0 <= {v} <= max_id",
    "id_or_none": "-1 <= {v} <= max_id",
    "pe": "0 <= {v} < n_pes",
    "channel": "0 <= {v} < n_channels",
    "string": "0 <= {v} < n_strings",
    "loc": "-1 <= {v} < n_locs",
    "shape": "is_shape({v})",
}


def _is_shape(value: list[Any]) -> bool:
    for dim in value:
        if type(dim) is not int or not 0 <= dim <= INT64_MAX:
            return False
    return True


def _compile_checks(
    array: type = list, ranges: bool = True
) -> Callable[..., tuple[dict[int, Callable[[Any], bool]], Callable[[int, int], None]]]:
    """Compile, from _RULES, ``make_checks(n_pes, n_channels, max_id)`` returning per kind a
    ``check(record) -> bool`` that is True for a valid event record, and
    ``defined(n_strings, n_locs)`` to call whenever a string or loc is defined.

    Each check unpacks the record into ``v0, v1, ...`` (a ValueError if its length
    is wrong) and tests one generated boolean expression, e.g. ``type(v0) is int and
    type(v1) is int and 0 <= v1 and ... and 0 <= v3 < n_channels``: validating a
    million records this way takes a third of the time a loop over the rules would.
    The counts of ids defined are variables of the closure, not ``len()`` calls.

    ``array`` is the type msgpack arrays are unpacked as (list, or tuple for the
    fast path of read_trace_tables); with ``ranges`` False, the checks test types
    and shapes only, leaving the other ranges to _out_of_range.
    """
    lines = [
        "def make_checks(n_pes, n_channels, max_id):",
        "    n_strings = n_locs = 0",
        "    def defined(strings, locs):",
        "        nonlocal n_strings, n_locs",
        "        n_strings, n_locs = strings, locs",
        "    checks = {}",
    ]
    for code, rules in _RULES.items():
        names = [f"v{at}" for at in range(len(rules) + 1)]
        terms = ["type(v0) is int"]
        for name, (_, wanted, range_) in zip(names[1:], rules, strict=True):
            terms.append(f"type({name}) is {(array if wanted is list else wanted).__name__}")
            if range_ is not None and (ranges or range_ == "shape"):
                terms.append(_RANGE_TESTS[range_].format(v=name))
        lines.append(f"    def check_{Kind(code).name}(r):")
        lines.append(f"        {', '.join(names)}, = r")
        lines.append(f"        return {' and '.join(terms)}")
        lines.append(f"    checks[{code}] = check_{Kind(code).name}")
    lines.append("    return checks, defined")
    namespace = {"INT64_MAX": INT64_MAX, "MAX_CYCLES": MAX_CYCLES, "is_shape": _is_shape}
    exec("\n".join(lines), namespace)
    return namespace["make_checks"]


_make_checks = _compile_checks()


@functools.lru_cache(maxsize=8)
def _range_rows(
    n_pes: int, n_channels: int, n_strings: int, n_locs: int, max_id: int
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per kind, the lowest and highest value of each item of its records as rows of
    EventTables (the time item being the delta, as in the file). Not to be modified:
    the same arrays serve every batch read with the same ranges."""
    bounds: dict[str | None, tuple[int, int]] = {
        "time": (0, MAX_CYCLES),
        "count": (0, INT64_MAX),
        "addr": (-1, INT64_MAX),
        "cycles": (0, MAX_CYCLES),
        "id": (0, max_id),
        "id_or_none": (-1, max_id),
        "pe": (0, n_pes - 1),
        "channel": (0, n_channels - 1),
        "string": (0, n_strings - 1),
        "loc": (-1, n_locs - 1),
    }
    whole = (-(2**63), INT64_MAX)  # the kind, bools, shape ids, int64s
    rows = {}
    for code, rules in _RULES.items():
        low, high = zip(whole, *(bounds.get(range_, whole) for _, _, range_ in rules), strict=True)
        rows[code] = (np.array(low, dtype=np.int64), np.array(high, dtype=np.int64))
    return rows


def _columns_of(range_: str) -> dict[int, list[int]]:
    """Per kind, the items of its records checked against ``range_``."""
    return {
        code: [at for at, (_, _, r) in enumerate(rules, start=1) if r == range_]
        for code, rules in _RULES.items()
    }


_STRING_COLUMNS = _columns_of("string")
_LOC_COLUMNS = _columns_of("loc")


def _out_of_range(rows: np.ndarray, low: np.ndarray, high: np.ndarray) -> bool:
    return not ((rows >= low) & (rows <= high)).all()


def _limits() -> dict[str, Any]:
    """The format's limits, for every unpacker of a trace's objects."""
    return {
        "raw": False,
        "strict_map_key": True,
        "max_str_len": min(wire.MAX_SOURCE_BYTES, wire.MAX_RECORD_BYTES),
        "max_bin_len": min(wire.MAX_SOURCE_BYTES, wire.MAX_RECORD_BYTES),
        "max_array_len": wire.MAX_ARRAY_LEN,
        "max_map_len": wire.MAX_MAP_LEN,
        "max_ext_len": 0,
    }


class _Parser:
    """One pass over a trace's bytes, validating as it goes."""

    def __init__(
        self,
        name: str,
        chunks: _Chunks,
        progress: Callable[[int, int], None] | None,
        on_batch: Callable[[list[list[Any]]], None] | None = None,
        keep_events: bool = True,
        on_tables: Callable[[EventTables], None] | None = None,
    ):
        self.name = name
        self.chunks = chunks
        self.progress = progress
        self.on_batch = on_batch
        self.keep_events = keep_events
        self.on_tables = on_tables
        if on_tables is not None:
            # Where the fast path does not go, records are handed over as read_trace does.
            self.on_batch, self.keep_events = self.hand_records_as_tables, False
        self.handed = 0  # events passed to on_batch (and dropped, unless keep_events)
        # Reading with read_bulk (see read_trace_tables), which it does from the header
        # on, unless the trace is of a newer minor version; when it stops at a record
        # it does not handle, the exact path reads on, until it is past resume_at.
        self.fast = False
        self.resume_at = 0
        self.base = 0  # offset in data of the unpacker's first byte
        # Positions in a bulk batch where strings and locs were defined.
        self.string_defs: list[int] = []
        self.loc_defs: list[int] = []
        self.caller_defs: list[int] = []  # loc ids given a caller in that batch
        self.header: dict[str, Any] = {}
        self.version: tuple[int, int] | None = None
        self.lenient = False  # a newer minor version: skip what we do not know
        self.sources: dict[str, str] = {}
        self.strings: list[str] = []
        self.locs: list[SourceLoc] = []
        self.events: list[list[Any]] = []
        self.skipped = 0  # event records of kinds newer than this reader
        self.pos = 0  # end of the last whole object, once consume() returns or fails
        self.time = 0
        self.footer: dict[str, Any] | None = None
        self.n_pes = 0
        self.n_channels = 0
        # The largest command or future id the file can hold: ids count up from 0, one
        # per command, and each command has an ISSUE event. The index sizes its tables by
        # the largest id, so an absurd one must be refused here, before it allocates.
        self.max_id = chunks.total // wire.MIN_EVENT_BYTES
        # Per event kind, check(record) -> bool, and defined(n_strings, n_locs) to tell
        # them the ids defined so far; made again once the header gives the ranges.
        self.checks, self.defined = _make_checks(self.n_pes, self.n_channels, self.max_id)

    @property
    def event_records(self) -> int:
        """Event records read so far, kept, dropped or skipped: the index of the next one."""
        dropped = 0 if self.keep_events else self.handed
        return dropped + len(self.events) + self.skipped

    def hand_over(self) -> None:
        """Pass the events validated since the last call to on_batch (see read_trace)."""
        if self.on_batch is None:
            return
        if self.keep_events:
            if len(self.events) > self.handed:
                batch = self.events[self.handed :]
                self.handed = len(self.events)
                self.on_batch(batch)
        elif self.events:
            batch, self.events = self.events, []
            self.handed += len(batch)
            self.on_batch(batch)

    def hand_records_as_tables(self, records: list[list[Any]]) -> None:
        assert self.on_tables is not None
        # Past the int64 range, the read fails at its end (see parse): nothing to index.
        if records[-1][1] <= INT64_MAX:
            self.on_tables(EventTables.from_records(records))

    def fail(self, reason: str, offset: int | None, event_index: int | None = None) -> NoReturn:
        raise TraceFormatError(
            reason, source=self.name, offset=offset, event_index=event_index
        ) from None

    def parse(self) -> Trace:
        total = self.chunks.total
        read = self.chunks.read
        unpacker = self.unpacker()
        fed = 0  # end of the bytes handed to the unpacker
        pos = 0  # end of the last whole object
        # The fast path may give up and read a chunk again: the bytes fed since the
        # last whole object are kept for that (never more than MAX_RECORD_BYTES).
        kept = bytearray()
        while True:
            pos = self.consume(unpacker, pos)
            self.hand_over()
            if self.footer is not None:
                break
            del kept[: pos - (fed - len(kept))]
            if self.fast and pos > self.resume_at:
                # The fast path takes over after the header, and again once the exact
                # path is past what stopped it; then the exact path reads on from where
                # it stops, with a new unpacker, given again the bytes read past there.
                pos, kept, fed, total = self.read_bulk(pos, kept, fed, total)
                unpacker = self.unpacker()
                self.base = pos
                if kept:
                    unpacker.feed(kept)
                continue
            if fed == total:
                break
            # Never hand the unpacker more than MAX_RECORD_BYTES past the last whole
            # object, so one huge object fails here instead of growing the buffer.
            room = pos + wire.MAX_RECORD_BYTES - fed
            if room <= 0:
                self.fail(
                    f"record larger than the {wire.MAX_RECORD_BYTES}-byte limit",
                    pos,
                    self.event_records if self.version is not None else None,
                )
            chunk = read(min(CHUNK_BYTES, room, total - fed))
            if not chunk:
                total = fed  # the file shrank while being read: it ends here
                continue
            unpacker.feed(chunk)
            kept += chunk
            fed += len(chunk)
            if self.progress is not None:
                self.progress(pos, total)
        if self.footer is not None and pos < total:
            self.fail("trailing bytes after the footer", pos)
        if self.time > INT64_MAX:
            self.fail(f"time {self.time} exceeds the int64 range", None)
        if self.progress is not None:
            self.progress(total, total)
        return Trace(
            header=self.header,
            version=self.version,
            sources=self.sources,
            strings=self.strings,
            locs=self.locs,
            events=self.events,
            footer=self.footer,
            truncated=self.footer is None,
            truncated_at=None if self.footer is not None else pos,
            source=self.name,
        )

    def unpacker(self) -> msgpack.Unpacker:
        """An unpacker enforcing the format's limits."""
        return msgpack.Unpacker(max_buffer_size=wire.MAX_RECORD_BYTES, **_limits())

    def consume(self, unpacker: msgpack.Unpacker, pos: int) -> int:
        """Validate every whole object the unpacker holds, stopping after the footer;
        return the end of the last one."""
        try:
            return self.consume_records(unpacker, pos)
        except (ValueError, msgpack.UnpackException) as exc:
            if isinstance(exc, TraceFormatError):
                raise
            index = self.event_records if self.version is not None else None
            self.fail(f"malformed msgpack ({type(exc).__name__}: {exc})", self.pos, index)

    def consume_records(self, unpacker: msgpack.Unpacker, pos: int) -> int:
        if self.base:
            base = self.base

            def tell() -> int:
                return base + unpacker.tell()

        else:
            tell = unpacker.tell
        self.pos = pos
        if self.version is None:
            for header in unpacker:
                self.read_header(header, pos)
                pos = self.pos = tell()
                break
            else:
                return pos
            if self.fast:
                return pos  # read_bulk reads on
        checks = self.checks
        append = self.events.append
        time = self.time
        index = self.event_records
        try:
            for record in unpacker:
                start = pos
                pos = tell()
                # The hot path: a valid event of a known kind. Anything else goes to
                # other_record, which handles it or says what is wrong with it.
                try:
                    valid = type(record) is list and checks[record[0]](record)
                except (KeyError, TypeError, IndexError, ValueError):
                    valid = False
                if not valid:
                    self.time = time
                    record = self.other_record(record, start)
                    time = self.time
                    index = self.event_records
                    if record is None:
                        if self.footer is not None:
                            break
                        continue
                time += record[1]
                if time > MAX_CYCLES:
                    self.fail(
                        f"time {time} is past the {MAX_CYCLES}-cycle limit (implausible)",
                        start,
                        index,
                    )
                record[1] = time
                append(record)
                index += 1
        finally:
            self.time = time
            # Where a msgpack error surfaces: the start of the object being unpacked.
            self.pos = pos
        return pos

    def read_bulk(
        self, pos: int, kept: bytearray, fed: int, total: int
    ) -> tuple[int, bytearray, int, int]:
        """Read on from ``pos`` a block at a time with scan_block, handing the events over
        as EventTables (see read_trace_tables), while it can.

        ``kept`` holds the bytes read past ``pos`` (``fed`` being the end of those read).
        Returns where the exact path is to read on, the bytes read past there, ``fed``
        and ``total`` (smaller if the file shrank); sets ``resume_at``, the offset the
        exact path has to read past before the fast path takes over again.
        """
        buf = bytearray(kept)
        # Bytes scanned at once: a block, but fewer after a definition, growing back,
        # so that definitions close together do not each cost a scan of a block.
        window = BULK_BYTES
        while True:
            if len(buf) < BULK_BYTES and fed < total:
                chunk = self.chunks.read(min(BULK_BYTES - len(buf), total - fed))
                if not chunk:
                    total = fed  # the file shrank while being read: it ends here
                buf += chunk
                fed += len(chunk)
            scan = scan_block(buf[:window])
            if scan.stop and not self.apply_scan(scan, buf, pos):
                # An event out of range: the exact path reads the block again, to name it.
                self.resume_at = pos + scan.stop - 1
                return pos, buf, fed, total
            pos += scan.stop
            del buf[: scan.stop]
            if self.progress is not None and scan.stop:
                self.progress(pos, total)
            if scan.foreign:
                # A record with strings: a definition is applied here, the scan goes on
                # after it; anything else (the footer...) is the exact path's.
                end = self.bulk_definition(buf, pos)
                if not end:
                    self.resume_at = pos
                    return pos, buf, fed, total
                pos += end
                del buf[:end]
                window = max(window // 8, MIN_BULK_BYTES)
            elif scan.unusual:
                self.resume_at = pos
                return pos, buf, fed, total
            elif window < len(buf):
                window = min(2 * window, BULK_BYTES) if scan.stop else len(buf)
            elif not scan.stop and (fed == total or len(buf) >= BULK_BYTES):
                # A tail cut short at the end (or nothing left), or a record longer than
                # a block: the exact path reads it.
                self.resume_at = pos
                return pos, buf, fed, total

    def bulk_definition(self, buf: bytearray, pos: int) -> int:
        """Apply the definition record at the start of ``buf`` (read from ``pos``) and
        return its length; 0, with nothing applied, if it is something else, or
        wrong, or not wholly in ``buf``."""
        unpacker = msgpack.Unpacker(use_list=False, max_buffer_size=max(len(buf), 1), **_limits())
        unpacker.feed(buf)
        try:
            record = unpacker.unpack()
        except (ValueError, msgpack.UnpackException, msgpack.OutOfData):
            return 0
        self.string_defs.clear()
        self.loc_defs.clear()
        self.caller_defs.clear()
        if not self.fast_definition(record, pos, 0):
            return 0
        return unpacker.tell()

    def apply_scan(self, scan: BlockScan, buf: bytearray, pos: int) -> bool:
        """Apply the definitions and hand over the events scan_block found in ``buf``
        (read from ``pos``); False, with nothing applied, if any is wrong."""
        n_strings, n_locs, n_sources = len(self.strings), len(self.locs), len(self.sources)
        self.string_defs.clear()
        self.loc_defs.clear()
        self.caller_defs.clear()
        for at, start, end in scan.definitions:
            try:
                record = msgpack.unpackb(bytes(buf[start:end]), use_list=False, **_limits())
            except (ValueError, msgpack.UnpackException):
                record = None
            if record is None or not self.fast_definition(record, pos + start, at):
                self.undo_definitions(n_strings, n_locs, n_sources)
                return False
        tables = EventTables(scan.kinds, scan.tables, scan.shapes)
        if len(tables) and not self.absolute_times(tables):
            self.undo_definitions(n_strings, n_locs, n_sources)
            return False
        if len(tables):
            self.handed += len(tables)
            assert self.on_tables is not None
            self.on_tables(tables)
        return True

    def undo_definitions(self, n_strings: int, n_locs: int, n_sources: int) -> None:
        """Take back the definitions applied since there were ``n_strings``... of each."""
        del self.strings[n_strings:], self.locs[n_locs:]
        for lid in self.caller_defs:  # callers given to locs of earlier blocks
            if lid < n_locs:
                self.locs[lid] = self.locs[lid]._replace(caller=None)
        for file in list(self.sources)[n_sources:]:
            del self.sources[file]
        self.defined(n_strings, n_locs)

    def fast_definition(self, record: Any, start: int, at: int) -> bool:
        """Apply a definition record met by read_bulk, ``at`` events into its batch;
        False if ``record`` is something else, or wrong."""
        if type(record) is not tuple or not record or type(record[0]) is not int:
            return False
        try:
            if record[0] == wire.DEFINE_STRING:
                self.define_string(record, start)
                self.string_defs.append(at)
            elif record[0] == wire.DEFINE_LOC:
                self.define_loc(record, start)
                self.loc_defs.append(at)
            elif record[0] == wire.EMBED_SOURCE:
                self.embed_source(record, start)
            elif record[0] == wire.DEFINE_LOC_CALLER:
                self.define_loc_caller(record, start)
                self.caller_defs.append(record[1])
            else:
                return False
        except TraceFormatError:
            return False
        return True

    def absolute_times(self, tables: EventTables) -> bool:
        """Make the times of a bulk batch absolute; False if any item is out of range
        (or the times out of the int64 range)."""
        ranges = _range_rows(
            self.n_pes, self.n_channels, len(self.strings), len(self.locs), self.max_id
        )
        for kind, (at, rows) in tables.tables.items():
            if _out_of_range(rows, *ranges[kind]):
                return False
            for defs, columns, count in (
                (self.string_defs, _STRING_COLUMNS[kind], len(self.strings)),
                (self.loc_defs, _LOC_COLUMNS[kind], len(self.locs)),
            ):
                if defs and columns:
                    # Ids defined within the batch may be used only after their definition.
                    defined = count - len(defs) + np.searchsorted(defs, at, side="right")
                    if (rows[:, columns] >= defined[:, None]).any():
                        return False
        times = np.empty(len(tables), dtype=np.int64)
        for at, rows in tables.tables.values():
            times[at] = rows[:, 1]
        np.cumsum(times, out=times)
        times += self.time
        # Times past the int64 range wrap around, and so go back.
        if times[0] < self.time or (times[1:] < times[:-1]).any() or times[-1] > MAX_CYCLES:
            return False
        for at, rows in tables.tables.values():
            rows[:, 1] = times[at]
        self.time = int(times[-1])
        return True

    # Records other than valid events of known kinds

    def other_record(self, record: Any, start: int) -> list[Any] | None:
        """Handle a definition, footer, unknown kind or bad event; return an event to keep."""
        if self.footer is not None:
            self.fail("data after the footer", start)
        if isinstance(record, dict):
            self.read_footer(record, start)
            return None
        if type(record) is not list or not record:
            self.fail(f"expected a record (a non-empty array), got {_describe(record)}", start)
        code = record[0]
        if type(code) is not int:
            self.fail(f"record kind must be an int, got {_describe(code)}", start)
        if code in _RULES:
            return self.checked_event(record, start)
        if code == wire.DEFINE_STRING:
            self.define_string(record, start)
        elif code == wire.DEFINE_LOC:
            self.define_loc(record, start)
        elif code == wire.EMBED_SOURCE:
            self.embed_source(record, start)
        elif code == wire.DEFINE_LOC_CALLER:
            self.define_loc_caller(record, start)
        elif self.lenient and code in wire.EVENT_CODES:
            self.skip_event(record, start)
        elif not (self.lenient and code in wire.DEFINITION_CODES):
            self.fail(f"unknown record kind {code}", start)
        return None

    def checked_event(self, record: list[Any], start: int) -> list[Any]:
        """``record`` without the extra fields a newer minor version may add, if it is then
        valid; otherwise fail, naming the first thing wrong with it."""
        kind = Kind(record[0])
        rules = _RULES[kind]
        index = self.event_records
        if len(record) != 1 + len(rules):
            if not (self.lenient and len(record) > 1 + len(rules)):
                self.fail(
                    f"{kind.name} has {len(record) - 3} fields, expected {len(rules) - 2}",
                    start,
                    index,
                )
            del record[1 + len(rules) :]
        for value, (name, wanted, range_) in zip(record[1:], rules, strict=True):
            if type(value) is not wanted:
                self.fail(
                    f"{kind.name} {name} is {_describe(value)}, expected {wanted.__name__}",
                    start,
                    index,
                )
            problem = self.range_problem(range_, value)
            if problem is not None:
                self.fail(f"{kind.name} {name} {problem}", start, index)
        return record

    def range_problem(self, range_: str | None, value: Any) -> str | None:
        """What is wrong with a field ``value`` checked against ``range_`` (see _RULES)."""
        if range_ == "time" and value < 0:
            return f"goes back by {-value} cycles"
        if range_ == "time" and value > MAX_CYCLES:
            return f"{value} is past the {MAX_CYCLES}-cycle limit (implausible)"
        if range_ in ("int64", "count", "addr", "id", "id_or_none") and not (
            -INT64_MAX - 1 <= value <= INT64_MAX
        ):
            return f"{_brief(value)} exceeds the int64 range"
        if range_ == "count" and value < 0:
            return f"{value} is negative"
        if range_ == "addr" and value < -1:
            return f"{value} is neither an address nor -1"
        if range_ == "cycles" and not 0 <= value <= MAX_CYCLES:
            return f"{_brief(value)} is outside 0..{MAX_CYCLES} cycles"
        if range_ == "id" and value < 0:
            return f"{value} is negative (no such id)"
        if range_ == "id_or_none" and value < -1:
            return f"{value} is neither an id nor -1 (none)"
        if range_ in ("id", "id_or_none") and value > self.max_id:
            return (
                f"{value} is not a possible id: ids count up from 0, one per command issued,"
                f" and {self.chunks.total} bytes hold at most {self.max_id + 1:,} events"
            )
        if range_ == "pe" and not 0 <= value < self.n_pes:
            return f"{value} is outside the mesh of {self.n_pes} PEs"
        if range_ == "channel" and not 0 <= value < self.n_channels:
            return f"{value} is not in the header's {self.n_channels} channels"
        if range_ == "string" and not 0 <= value < len(self.strings):
            return f"is string id {value}, not defined yet ({len(self.strings)} defined)"
        if range_ == "loc" and not -1 <= value < len(self.locs):
            return f"is loc id {value}, not defined yet ({len(self.locs)} defined)"
        if range_ == "shape" and not _is_shape(value):
            return f"{_describe(value)} is not a list of non-negative int64s"
        return None

    def skip_event(self, record: list[Any], start: int) -> None:
        """Apply the time of an event of a kind newer than this reader, and drop it."""
        if len(record) < 3 or type(record[1]) is not int or type(record[2]) is not int:
            self.fail(f"event of unknown kind {record[0]} lacks an int time and pe", start)
        if record[1] < 0:
            self.fail(f"event of unknown kind {record[0]} goes back in time", start)
        self.time += record[1]
        if self.time > MAX_CYCLES:
            self.fail(f"time {self.time} is past the {MAX_CYCLES}-cycle limit", start)
        self.skipped += 1

    def define_string(self, record: list[Any], start: int) -> None:
        if len(record) != 2 or not isinstance(record[1], str):
            self.fail("a string definition is [0, str]", start)
        self.check_text_size(record[1], wire.MAX_STRING_BYTES, "interned string", start)
        self.strings.append(record[1])
        self.defined(len(self.strings), len(self.locs))

    def define_loc(self, record: list[Any], start: int) -> None:
        if (
            len(record) != 4
            or not isinstance(record[1], str)
            or type(record[2]) is not int
            or not isinstance(record[3], str)
        ):
            self.fail("a loc definition is [100, file, line, function]", start)
        self.check_text_size(record[1], wire.MAX_STRING_BYTES, "loc file", start)
        self.check_text_size(record[3], wire.MAX_STRING_BYTES, "loc function", start)
        self.locs.append(SourceLoc(record[1], record[2], record[3]))
        self.defined(len(self.strings), len(self.locs))

    def define_loc_caller(self, record: Any, start: int) -> None:
        """``[102, loc_id, caller_id]``: the kernel line that called into the helper at
        ``loc_id``; both defined already, the caller first, each loc given one at most."""
        if len(record) != 3 or type(record[1]) is not int or type(record[2]) is not int:
            self.fail("a loc caller definition is [102, loc_id, caller_loc_id]", start)
        lid, cid, n = record[1], record[2], len(self.locs)
        if not 0 <= lid < n:
            self.fail(f"loc caller definition for loc id {lid}, not defined yet", start)
        if not 0 <= cid < lid:
            self.fail(f"loc {lid}'s caller is loc id {cid}, not a loc defined before it", start)
        if self.locs[lid].caller is not None:
            self.fail(f"loc {lid} is given a caller twice", start)
        self.locs[lid] = self.locs[lid]._replace(caller=self.locs[cid])

    def embed_source(self, record: list[Any], start: int) -> None:
        if len(record) != 3 or not isinstance(record[1], str) or not isinstance(record[2], str):
            self.fail("a source record is [101, file, text]", start)
        self.check_text_size(record[1], wire.MAX_STRING_BYTES, "source file name", start)
        self.check_text_size(record[2], wire.MAX_SOURCE_BYTES, "source text", start)
        if record[1] in self.sources:
            self.fail(f"source of {_brief(record[1])} embedded twice", start)
        self.sources[record[1]] = record[2]

    def check_text_size(self, text: str, limit: int, what: str, start: int) -> None:
        if len(text) > limit or (len(text) * 4 > limit and len(text.encode("utf-8")) > limit):
            self.fail(f"{what} longer than the {limit}-byte limit", start)

    # Header and footer

    def read_header(self, header: Any, start: int) -> None:
        if not isinstance(header, dict) or header.get("format") != wire.FORMAT_NAME:
            self.fail(
                f"not a kbt trace (expected a header map with format {wire.FORMAT_NAME!r})",
                start,
            )
        version = header.get("version")
        if (
            type(version) is not list
            or len(version) != 2
            or any(type(v) is not int or v < 0 for v in version)
        ):
            self.fail(f"header version must be [major, minor], got {_brief(version)}", start)
        major, minor = version
        ours_major, ours_minor = wire.FORMAT_VERSION
        if major > ours_major:
            self.fail(
                f"format version {major}.{minor} is newer than this reader"
                f" ({ours_major}.x); upgrade kbdebug",
                start,
            )
        if major < ours_major:
            self.fail(f"format version {major}.{minor} is not supported", start)
        self.lenient = minor > ours_minor
        if not isinstance(header.get("producer"), str):
            self.fail("header producer must be a str", start)
        for key in wire.RUN_HEADER_KEYS:
            if key not in header:
                self.fail(f"header lacks {key!r}", start)
        if not isinstance(header["config"], dict):
            self.fail("header config must be a map", start)
        mesh = header["mesh"]
        if type(mesh) is not list or len(mesh) != 2 or any(type(v) is not int for v in mesh):
            self.fail(f"header mesh must be [rows, cols], got {_brief(mesh)}", start)
        rows, cols = mesh
        if rows < 1 or cols < 1 or rows * cols > wire.MAX_PES:
            self.fail(f"header mesh {rows}x{cols} is outside 1..{wire.MAX_PES} PEs", start)
        self.n_pes = rows * cols
        self.read_channels(header["channels"], start)
        self.read_launch(header["launch"], start)
        self.header = header
        self.version = (major, minor)
        self.checks, self.defined = _make_checks(self.n_pes, self.n_channels, self.max_id)
        self.fast = self.on_tables is not None and not self.lenient

    def read_channels(self, channels: Any, start: int) -> None:
        if type(channels) is not list:
            self.fail("header channels must be an array", start)
        for i, channel in enumerate(channels):
            problem = None
            if not isinstance(channel, dict):
                problem = "is not a map"
            elif channel.get("id") != i or type(channel.get("id")) is not int:
                problem = f"has id {_brief(channel.get('id'))}, expected its position {i}"
            elif type(channel.get("pe")) is not int or not 0 <= channel["pe"] < self.n_pes:
                problem = f"has pe {_brief(channel.get('pe'))} outside the mesh"
            elif channel.get("kind") not in CHANNEL_KINDS and not (
                self.lenient and isinstance(channel.get("kind"), str)
            ):
                problem = f"has kind {_brief(channel.get('kind'))}, not one of {CHANNEL_KINDS}"
            elif type(channel.get("index")) is not int or channel["index"] < 0:
                problem = f"has index {_brief(channel.get('index'))}"
            elif not isinstance(channel.get("name"), str):
                problem = "has no str name"
            if problem is not None:
                self.fail(f"header channel {i} {problem}", start)
        self.n_channels = len(channels)

    def read_launch(self, launch: Any, start: int) -> None:
        if (
            not isinstance(launch, dict)
            or not isinstance(launch.get("kernel"), str)
            or type(launch.get("grid")) is not list
            or any(type(v) is not int or v < 0 for v in launch["grid"])
            or type(launch.get("args")) is not list
            or any(not isinstance(v, str) for v in launch["args"])
        ):
            self.fail(
                'header launch must be {"kernel": str, "grid": [int, ...], "args": [str, ...]}',
                start,
            )

    def read_footer(self, footer: dict[str, Any], start: int) -> None:
        status = footer.get("status")
        if status not in STATUSES:
            self.fail(f"footer status {_brief(status)} is not one of {STATUSES}", start)
        count = footer.get("events")
        if type(count) is not int or count != self.event_records:
            self.fail(
                f"footer says {_brief(count)} events, the trace has {self.event_records}", start
            )
        end_time = footer.get("end_time")
        if type(end_time) is not int or not self.time <= end_time <= MAX_CYCLES:
            self.fail(
                f"footer end_time {_brief(end_time)} must be an int from the last event's time"
                f" ({self.time}) to {MAX_CYCLES}",
                start,
            )
        error = footer.get("error")
        if error is not None and not isinstance(error, str):
            self.fail(f"footer error must be a str or nil, got {_describe(error)}", start)
        error_loc = footer.get("error_loc")
        if error_loc is not None:
            if (
                type(error_loc) is not list
                or len(error_loc) != 3
                or not isinstance(error_loc[0], str)
                or type(error_loc[1]) is not int
                or not isinstance(error_loc[2], str)
            ):
                self.fail("footer error_loc must be [file, line, function] or nil", start)
            error_loc = SourceLoc(*error_loc)
        self.footer = {
            "status": status,
            "events": count,
            "end_time": end_time,
            "error": error,
            "error_loc": error_loc,
        }


def _brief_repr() -> reprlib.Repr:
    brief = reprlib.Repr()
    brief.maxlevel = 3
    brief.maxstring = brief.maxother = 40
    brief.maxlong = 24
    return brief


_BRIEF = _brief_repr()


def _brief(value: Any) -> str:
    """A repr of ``value`` for an error message: bounded in length and nesting (a value
    nested a thousand deep must not exhaust the stack), control characters escaped."""
    text = _BRIEF.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {_brief(value)}"
