"""read_trace_tables scanning blocks on two threads: the same tables and errors as on one."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest
from _shared_fuzz import cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_synth import decode_like_events, record_run

from emulator.trace import TraceFormatError, parser
from emulator.trace.files import Chunks
from emulator.trace.parser import Parser, parse_all
from emulator.trace.reader import EventTables, read_trace, read_trace_tables
from emulator.trace.writer import TraceWriter

BLOCK = 1024  # small blocks: some 40 in DECODE, most of them scanned on two threads


def write_run(events) -> bytes:
    out = io.BytesIO()
    record_run(TraceWriter(out), events)
    return out.getvalue()


DECODE = write_run(decode_like_events(4000))


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(parser, "CHUNK_BYTES", BLOCK)
    monkeypatch.setattr(parser, "BULK_BYTES", BLOCK)


def scan_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kbdebug-scan")]


def read_tables(data: bytes, *, total: int | None = None, most: int | None = None, progress=None):
    """What reading ``data`` as a file of ``total`` bytes gives (it shrank if more than
    ``len(data)``), each read returning ``most`` bytes at most: the error, or the trace
    and its batches as plain lists (so that two reads compare, batch by batch)."""
    done = 0

    def read(n: int) -> bytes:
        nonlocal done
        chunk = data[done : done + min(n, most or n)]
        done += len(chunk)
        return chunk

    chunks = Chunks(read, len(data) if total is None else total, lambda: None)
    batches: list[EventTables] = []
    try:
        trace = parse_all(Parser("<bytes>", chunks, progress, on_tables=batches.append))
    except TraceFormatError as error:
        return ("error", str(error), error.offset, error.event_index)
    return (
        "trace",
        trace.strings,
        trace.locs,
        trace.footer,
        trace.truncated_at,
        [
            (
                t.kinds.tolist(),
                sorted((kind, at.tolist(), rows.tolist()) for kind, (at, rows) in t.tables.items()),
                t.shapes,
            )
            for t in batches
        ],
    )


def on_one_thread(monkeypatch, data: bytes, **how):
    with monkeypatch.context() as m:
        m.setattr(parser, "PIPELINE_BLOCKS", 1 << 40)
        return read_tables(data, **how)


@pytest.fixture
def scans_on(monkeypatch) -> list[str]:
    """The names of the threads scan_records ran on."""
    names: list[str] = []
    real = parser.scan_records

    def scan_records(*args):
        names.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(parser, "scan_records", scan_records)
    return names


def test_blocks_scanned_on_two_threads_give_the_batches_one_thread_gives(monkeypatch, scans_on):
    two = read_tables(DECODE)
    assert sum(name.startswith("kbdebug-scan") for name in scans_on) > 20
    assert two == on_one_thread(monkeypatch, DECODE)
    assert two[0] == "trace" and two[3]["events"] == len(read_trace(DECODE).events)
    assert scan_threads() == []


def test_short_reads_and_a_file_that_shrank_read_alike_on_two_threads(monkeypatch, scans_on):
    cut = DECODE[: len(DECODE) * 2 // 3]
    for how in ({"most": 700}, {"most": 3000}, {"total": len(DECODE) + 5000}):
        for data in (DECODE, cut):
            two = read_tables(data, **how)
            assert two == on_one_thread(monkeypatch, data, **how)
    assert two[0] == "trace" and two[4] is not None  # cut short: read as truncated
    assert any(name.startswith("kbdebug-scan") for name in scans_on)


@settings(
    max_examples=cases(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    at=st.integers(min_value=len(DECODE) // 8, max_value=len(DECODE) - 1),
    byte=st.integers(min_value=0, max_value=255),
)
def test_damage_mid_file_is_named_alike_on_two_threads(monkeypatch, at, byte):
    damaged = bytearray(DECODE)
    damaged[at] = byte
    data = bytes(damaged)
    two = read_tables(data)
    assert two == on_one_thread(monkeypatch, data)
    if two[0] == "error":
        with pytest.raises(TraceFormatError) as error:
            read_trace(data)
        assert two[1:] == (str(error.value), error.value.offset, error.value.event_index)
    assert scan_threads() == []


def test_an_error_on_the_scan_thread_is_raised_by_the_read_and_the_thread_ends(monkeypatch):
    real = parser.scan_records

    def scan_records(*args):
        if threading.current_thread().name.startswith("kbdebug-scan"):
            raise MemoryError("no room for the rows")
        return real(*args)

    monkeypatch.setattr(parser, "scan_records", scan_records)
    with pytest.raises(MemoryError, match="no room for the rows"):
        read_tables(DECODE)
    assert scan_threads() == []


def test_cancelling_from_progress_stops_the_read_and_the_scan_thread(monkeypatch, scans_on):
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        read_tables(DECODE, progress=progress)
    assert len(calls) == 20 and any(name.startswith("kbdebug-scan") for name in scans_on)
    assert scan_threads() == []


def test_a_trace_of_a_few_blocks_is_read_without_a_thread(monkeypatch, scans_on):
    monkeypatch.setattr(parser, "BULK_BYTES", 1 << 18)
    small = write_run(decode_like_events(300))
    assert len(small) < 3 * (1 << 18)
    assert read_tables(small)[0] == "trace"
    assert scans_on and not any(name.startswith("kbdebug-scan") for name in scans_on)


def test_pipelined_tables_hold_int64_rows_in_block_order():
    batches: list[EventTables] = []
    read_trace_tables(DECODE, batches.append)
    for tables in batches:
        for kind, (at, rows) in tables.tables.items():
            assert rows.dtype == np.int64 and (np.diff(at) > 0).all()
            assert (tables.kinds[at] == kind).all() and (rows[:, 0] == kind).all()
