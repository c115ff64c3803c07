"""Parser: one pass over a trace's bytes, validating as it goes (see emulator.trace.reader)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import msgpack
import numpy as np

from emulator.trace import wire
from emulator.trace.bulk import BlockScan, Records, event_mask, find_records, scan_records
from emulator.trace.errors import TraceFormatError
from emulator.trace.files import Chunks
from emulator.trace.records import RecordChecks
from emulator.trace.results import EventTables, Trace
from emulator.trace.rules import (
    INT64_MAX,
    LOC_COLUMNS,
    MAX_CYCLES,
    STRING_COLUMNS,
    make_checks,
    out_of_range,
    range_rows,
)
from emulator.trace.schema import SourceLoc

# Bytes handed to the unpacker at a time; progress is reported once per chunk. A
# chunk's records (some 6,000) fit in the caches and in the memory the allocator kept
# from the chunk before: with a megabyte, each chunk's hundred thousand records
# made the allocator map fresh pages, and opening took 15% longer.
CHUNK_BYTES = 1 << 16
# Bytes scanned at a time by the fast path of read_trace_tables (see bulk.scan_block):
# some 30,000 records, enough to spread numpy's per-call cost and the hand-overs of
# the GIL between the two threads of a large trace's read (512 KB opened 1M events
# 5% faster than 256 KB, and 10M 10% faster); larger blocks were slower (their
# arrays leave the caches: 4 MB took 40 % longer to open 1M events).
BULK_BYTES = 1 << 19
MIN_BULK_BYTES = 1 << 12
# Scanning blocks on two threads (see read_bulk) pays for starting one from this many
# blocks left on; a smaller trace is read on the calling thread alone.
PIPELINE_BLOCKS = 4


def parse_all(parser: Parser) -> Trace:
    # A million small lists would trigger the cyclic collector hundreds of times, for
    # nothing (records hold no cycles): pausing it halves the time to read a trace.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return parser.parse()
    finally:
        if collecting:
            gc.enable()


def unpack_limits() -> dict[str, Any]:
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


class Parser(RecordChecks):
    """One pass over a trace's bytes, validating as it goes."""

    def __init__(
        self,
        name: str,
        chunks: Chunks,
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
        self.digest_defs: list[int] = []  # futures given a digest in that batch
        self.header: dict[str, Any] = {}
        self.version: tuple[int, int] | None = None
        self.lenient = False  # a newer minor version: skip what we do not know
        # Codes of the records that are events in this file's version (set by read_header).
        self.event_codes: frozenset[int] = frozenset()
        self.sources: dict[str, str] = {}
        # Digest records by future, and the header's named tensors (format 1.5).
        self.digests: dict[int, Any] = {}
        self.tensors: list[Any] = []
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
        self.checks, self.defined = make_checks(self.n_pes, self.n_channels, self.max_id)

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
            digests=self.digests,
            tensors=self.tensors,
        )

    def unpacker(self) -> msgpack.Unpacker:
        """An unpacker enforcing the format's limits."""
        return msgpack.Unpacker(max_buffer_size=wire.MAX_RECORD_BYTES, **unpack_limits())

    def consume(self, unpacker: msgpack.Unpacker, pos: int) -> int:
        """Validate every whole object the unpacker holds, stopping after the footer;
        return the end of the last one."""
        try:
            return self.consume_records(unpacker, pos)
        except (ValueError, msgpack.UnpackException) as exc:
            if isinstance(exc, TraceFormatError):
                raise
            index = self.event_records if self.version is not None else None
            # msgpack says why for some errors, nothing for others (a reserved byte).
            why = f" ({type(exc).__name__}: {exc})" if str(exc) else ""
            self.fail(f"malformed msgpack{why}", self.pos, index)

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
                    valid = True
                time += record[1]
                if time > MAX_CYCLES:
                    self.fail(
                        f"time {time} is past the {MAX_CYCLES}-cycle limit (implausible)",
                        start,
                        index,
                    )
                if valid is True:
                    record[1] = time
                    append(record)
                    index += 1
                else:
                    # A compound record (format 1.2): its check gave the events it stands
                    # for, all at its time.
                    for event in valid:
                        event[1] = time
                        append(event)
                    index += len(valid)
        finally:
            self.time = time
            # Where a msgpack error surfaces: the start of the object being unpacked.
            self.pos = pos
        return pos

    def read_bulk(
        self, pos: int, kept: bytearray, fed: int, total: int
    ) -> tuple[int, bytearray, int, int]:
        """Read on from ``pos`` a block at a time with scan_block, handing the events over
        as EventTables (see read_trace_tables), while it can. From PIPELINE_BLOCKS blocks
        left on, a block's scan_records runs on a worker thread, stopped before returning.

        ``kept`` holds the bytes read past ``pos`` (``fed`` being the end of those read).
        Returns where the exact path is to read on, the bytes read past there, ``fed``
        and ``total`` (smaller if the file shrank); sets ``resume_at``, the offset the
        exact path has to read past before the fast path takes over again.
        """
        buf = bytearray(kept)
        # The codes that are events in this file's version (compounds from 1.2, READS from
        # 1.3): any other ends a scan as unusual, for the exact path to refuse.
        known = event_mask(self.event_codes)
        # Bytes scanned at once: a block, but fewer after a definition, growing back,
        # so that definitions close together do not each cost a scan of a block.
        window = BULK_BYTES
        # Block after block of events (most of a large trace), each is scanned in two
        # parts: find_records, which says where the next block starts, and
        # scan_records, on a worker thread (numpy lets go of the GIL in its loops):
        # while it scans a block, this thread applies the block before and finds the
        # records of the one after. Anything else stops that.
        worker: ThreadPoolExecutor | None = None
        # find_records of the next block's first ``ahead_window`` bytes, done meanwhile,
        # once this turn's read was done (``read_ahead``), as this turn would have done it;
        # ``pending``, its scan_records, already running on the worker.
        ahead: Records | None = None
        ahead_window = 0
        read_ahead = False
        pending: Future[BlockScan] | None = None
        try:
            while True:
                if not read_ahead and len(buf) < BULK_BYTES and fed < total:
                    chunk = self.chunks.read(min(BULK_BYTES - len(buf), total - fed))
                    if not chunk:
                        total = fed  # the file shrank while being read: it ends here
                    buf += chunk
                    fed += len(chunk)
                if ahead is None or ahead_window != window:
                    ahead, pending = find_records(buf[:window]), None
                records, job, ahead, pending, read_ahead = ahead, pending, None, None, False
                shown_total = total  # the total as read before this block's progress
                stop = records.stop
                later = len(buf) - stop + total - fed  # bytes after this block's records
                if (
                    window >= BULK_BYTES
                    and stop
                    and not records.foreign
                    and later
                    and (worker is not None or later >= PIPELINE_BLOCKS * BULK_BYTES)
                ):
                    if worker is None:
                        worker = ThreadPoolExecutor(1, thread_name_prefix="kbdebug-scan")
                    if job is None:
                        job = worker.submit(scan_records, records, known)
                    # The next turn's read, done now.
                    if len(buf) - stop < BULK_BYTES and fed < total:
                        chunk = self.chunks.read(min(BULK_BYTES - len(buf) + stop, total - fed))
                        if not chunk:
                            total = fed
                        buf += chunk
                        fed += len(chunk)
                    read_ahead = True
                    ahead, ahead_window = find_records(buf[stop : stop + window]), window
                    scan = job.result()
                    if scan.stop != stop:
                        ahead = None  # an unusual record: the exact path reads on from it
                    else:
                        pending = worker.submit(scan_records, ahead, known)
                else:
                    scan = scan_records(records, known) if job is None else job.result()
                if scan.stop and not self.apply_scan(scan, buf, pos):
                    # An event out of range: the exact path reads the block again, to name it.
                    self.resume_at = pos + scan.stop - 1
                    return pos, buf, fed, total
                pos += scan.stop
                del buf[: scan.stop]
                if self.progress is not None and scan.stop:
                    self.progress(pos, shown_total)
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
        finally:
            if worker is not None:
                worker.shutdown()  # waits for a scan still running (not needed, or after an error)

    def bulk_definition(self, buf: bytearray, pos: int) -> int:
        """Apply the definition record at the start of ``buf`` (read from ``pos``) and
        return its length; 0, with nothing applied, if it is something else, or
        wrong, or not wholly in ``buf``."""
        room = max(len(buf), 1)
        unpacker = msgpack.Unpacker(use_list=False, max_buffer_size=room, **unpack_limits())
        unpacker.feed(buf)
        try:
            record = unpacker.unpack()
        except (ValueError, msgpack.UnpackException, msgpack.OutOfData):
            return 0
        self.string_defs.clear()
        self.loc_defs.clear()
        self.caller_defs.clear()
        self.digest_defs.clear()
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
        self.digest_defs.clear()
        for at, start, end in scan.definitions:
            try:
                record = msgpack.unpackb(bytes(buf[start:end]), use_list=False, **unpack_limits())
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
        for future in self.digest_defs:
            del self.digests[future]
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
            elif record[0] == wire.DEFINE_DIGEST and self.version >= wire.DIGESTS_SINCE:
                self.define_digest(record, start)
                self.digest_defs.append(record[1])
            else:
                return False
        except TraceFormatError:
            return False
        return True

    def absolute_times(self, tables: EventTables) -> bool:
        """Make the times of a bulk batch absolute; False if any item is out of range
        (or the times out of the int64 range)."""
        ranges = range_rows(
            self.n_pes, self.n_channels, len(self.strings), len(self.locs), self.max_id
        )
        for kind, (at, rows) in tables.tables.items():
            if out_of_range(rows, *ranges[kind]):
                return False
            for defs, columns, count in (
                (self.string_defs, STRING_COLUMNS[kind], len(self.strings)),
                (self.loc_defs, LOC_COLUMNS[kind], len(self.locs)),
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
