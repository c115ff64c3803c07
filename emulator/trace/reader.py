"""read_trace: load and validate a .kbt file (layout in traces/FORMAT.md) into a Trace.

The reader is split along its seams: files (opening the bytes), rules (what a valid
event is), records (the checks of one record at a time), bulk (blocks of events
parsed with numpy), parser (the pass over the bytes) and results (Trace and
EventTables). Every name callers import from here stays importable from here; the
sizes the parser reads in (CHUNK_BYTES, BULK_BYTES) are emulator.trace.parser's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from emulator.trace.errors import TraceFormatError
from emulator.trace.files import open_source, open_trace_file
from emulator.trace.parser import Parser, parse_all
from emulator.trace.results import EventTables, Trace

__all__ = [
    "EventTables",
    "Trace",
    "TraceFormatError",
    "open_trace_file",
    "read_trace",
    "read_trace_tables",
]


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
    name, chunks = open_source(source)
    with chunks:
        return parse_all(Parser(name, chunks, progress, on_batch, keep_events))


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
    name, chunks = open_source(source)
    with chunks:
        return parse_all(Parser(name, chunks, progress, on_tables=on_tables))
