"""read_trace_tables: the events as arrays, validated as read_trace validates them."""

from __future__ import annotations

import io

import pytest
from _shared_fuzz import cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_synth import (
    decode_like_events,
    every_kind_events,
    footer_record,
    header_record,
    pack_objects,
    record_run,
)

from emulator.trace import TraceFormatError, bulk, parser
from emulator.trace.reader import EventTables, read_trace, read_trace_tables
from emulator.trace.schema import Kind, SourceLoc
from emulator.trace.writer import TraceWriter
from kbdebug.replay import Replay


def write_run(events, **footer) -> bytes:
    out = io.BytesIO()
    record_run(TraceWriter(out), events, **footer)
    return out.getvalue()


SMALL = write_run(every_kind_events(), status="error", error="boom")
DECODE = write_run(decode_like_events(3000))


def records_of(batches: list[EventTables]) -> list[list]:
    """The tables' events as Trace.events holds them."""
    events = []
    for tables in batches:
        records: list = [None] * len(tables)
        for kind, (at, rows) in tables.tables.items():
            for i, row in zip(at.tolist(), rows.tolist(), strict=True):
                if kind == Kind.ISSUE:
                    row[8] = list(tables.shapes[row[8]])
                    row[10] = bool(row[10])
                records[i] = row
        assert tables.kinds.tolist() == [record[0] for record in records]
        events.extend(records)
    return events


def outcome(read, data: bytes) -> tuple:
    """What reading ``data`` gives: the error, or the trace and its events."""
    batches: list[EventTables] = []
    try:
        if read is read_trace:
            trace = read_trace(data)
            events = trace.events
        else:
            trace = read_trace_tables(data, batches.append)
            events = records_of(batches)
    except TraceFormatError as error:
        return ("error", str(error), error.offset, error.event_index)
    fields = ("header", "version", "sources", "strings", "locs", "footer", "truncated")
    return (
        "trace",
        *(getattr(trace, name) for name in fields),
        trace.truncated_at,
        events,
    )


def same_as_read_trace(data: bytes) -> None:
    assert outcome(read_trace_tables, data) == outcome(read_trace, data)


@pytest.fixture(params=[64, 2048, 1 << 16])
def chunk(request, monkeypatch):
    monkeypatch.setattr(parser, "CHUNK_BYTES", request.param)
    monkeypatch.setattr(parser, "BULK_BYTES", request.param)
    return request.param


def test_tables_hold_the_events_read_trace_reads(chunk):
    for data in (SMALL, DECODE):
        same_as_read_trace(data)


def test_a_run_of_int_markers_reads_as_read_trace_reads_it():
    # Every byte of the run looks like the first of a uint8: the real tokens are
    # settled by doubling, and the garbage named as read_trace names it.
    head = DECODE[: len(DECODE) // 2]
    for run in (b"\xcc" * 20_000, b"\xcc\x01" * 10_000, b"\xcf" * 30_000):
        data = head + run + DECODE[len(DECODE) // 2 :]
        assert outcome(read_trace_tables, data)[0] == "error"
        same_as_read_trace(data)


def test_token_starts_found_by_doubling_are_those_found_in_rounds(monkeypatch):
    # The scan settles the real tokens in a few rounds; a hostile file needing more
    # is settled by doubling the jumps: the two find the same tokens.
    rounds = outcome(read_trace_tables, DECODE)
    monkeypatch.setattr(bulk, "MAX_ROUNDS", 0)
    assert outcome(read_trace_tables, DECODE) == rounds
    same_as_read_trace(DECODE)


def test_tables_are_handed_over_chunk_by_chunk(monkeypatch):
    monkeypatch.setattr(parser, "CHUNK_BYTES", 2048)
    monkeypatch.setattr(parser, "BULK_BYTES", 2048)
    batches = []
    trace = read_trace_tables(DECODE, batches.append)
    assert len(batches) > 5 and trace.events == []
    assert records_of(batches) == read_trace(DECODE).events


@pytest.mark.parametrize(("chunk", "first_cut"), [(64, 0), (2048, 0), (1 << 16, 2048)])
def test_trace_cut_at_every_byte_reads_as_read_trace_reads_it(monkeypatch, chunk, first_cut):
    # In one 64 KiB chunk, a cut before byte 2048 reads as it does in one 2 KiB chunk
    # (the case above it): only the cuts past 2048 are read differently.
    monkeypatch.setattr(parser, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(parser, "BULK_BYTES", chunk)
    assert len(SMALL) > 2048
    for cut in range(first_cut, len(SMALL)):
        same_as_read_trace(SMALL[:cut])


def test_event_out_of_range_is_named_before_a_later_bad_record_in_its_chunk():
    good = [Kind.KERNEL_END, 0, 0]
    data = pack_objects(header_record(), good, [Kind.KERNEL_END, 0, 4], good, [Kind.WAIT_END, 0])
    error = outcome(read_trace_tables, data)
    assert error[0] == "error" and error[3] == 1 and "pe 4 is outside the mesh" in error[1]
    same_as_read_trace(data)


def test_string_used_before_its_definition_in_its_chunk_is_rejected():
    data = pack_objects(
        header_record(),
        [0, "compute"],
        [Kind.OP_LOG, 0, 0, 0, 0],
        [Kind.OP_LOG, 0, 0, 0, 1],
        [0, "dot"],
        [Kind.OP_LOG, 0, 0, 0, 1],
        footer_record(3),
    )
    assert (
        "OP_LOG op is string id 1, not defined yet (1 defined)"
        in outcome(read_trace_tables, data)[1]
    )
    same_as_read_trace(data)


def test_newer_minor_version_reads_as_read_trace_reads_it():
    data = pack_objects(
        header_record(version=[1, 6]),
        [Kind.KERNEL_END, 5, 0],
        [42, 10, 1, "a"],
        [Kind.COMPLETE, 1, 0, 7, -1, "extra"],
        footer_record(3, end_time=1 << 20),
    )
    same_as_read_trace(data)


def test_loc_callers_read_as_read_trace_reads_them(chunk):
    helper = [100, "k.py", 30, "load_tile"]
    kernel = [100, "k.py", 7, "k"]
    wait = [Kind.WAIT_BEGIN, 0, 0, 1, 1]
    good = forged(kernel, helper, [102, 1, 0], wait, [Kind.HOST_READ, 1, 0, 1])
    assert outcome(read_trace_tables, good)[5][1].caller == SourceLoc("k.py", 7, "k")
    same_as_read_trace(good)
    # Defined in another chunk than the event after it that fails: the caller read
    # on the fast path is taken back with its chunk and read again.
    filler = [[0, f"s{i}"] for i in range(40)]
    late = forged(kernel, helper, *filler, [102, 1, 0], wait, [Kind.WAIT_END, 0, 99, 1, 0])
    assert "WAIT_END pe 99 is outside the mesh" in outcome(read_trace_tables, late)[1]
    same_as_read_trace(late)
    for bad in (
        [kernel, [102, 1, 0]],
        [kernel, helper, [102, 0, 1]],
        [kernel, helper, [102, 1, 0], [102, 1, 0]],
        [kernel, helper, [102, 1, 0], [102, 1]],
    ):
        data = forged(*bad, wait)
        assert outcome(read_trace_tables, data)[0] == "error"
        same_as_read_trace(data)


def forged(*records) -> bytes:
    events = sum(1 for r in records if 1 <= r[0] <= 99)
    return pack_objects(header_record(), *records, footer_record(events, end_time=99))


def test_times_past_the_cycle_limit_fail_as_read_trace_fails(tmp_path):
    # Each delta is in range; their sum is not (and would wrap an int64).
    data = pack_objects(
        header_record(), [Kind.KERNEL_END, 2**53, 0], [Kind.KERNEL_END, 2**53, 1], footer_record(2)
    )
    assert "event 1 at byte" in outcome(read_trace_tables, data)[1]
    assert "past the 9007199254740992-cycle limit" in outcome(read_trace_tables, data)[1]
    same_as_read_trace(data)
    path = tmp_path / "overflow.kbt"
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match="cycle limit"):
        Replay.open(path)


def test_ints_past_the_int64_range_are_rejected_as_read_trace_rejects_them():
    data = pack_objects(header_record(), [Kind.WAIT_END, 0, 0, 1, 2**64 - 1], footer_record(1))
    assert "WAIT_END stalled" in outcome(read_trace_tables, data)[1]
    same_as_read_trace(data)


mutation = st.tuples(
    st.sampled_from(["flip", "insert", "delete"]),
    st.integers(0, len(DECODE) - 1),
    st.integers(0, 255),
)


@settings(max_examples=cases(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mutations=st.lists(mutation, min_size=1, max_size=4),
    cut=st.integers(0, len(DECODE)),
    chunk=st.sampled_from([64, 2048, 1 << 16]),
)
def test_corrupted_trace_reads_as_read_trace_reads_it(mutations, cut, chunk):
    data = bytearray(DECODE[:cut] if cut else DECODE)
    for op, position, value in mutations:
        position = min(position, len(data))
        if op == "flip" and position < len(data):
            data[position] ^= value or 1
        elif op == "insert":
            data[position:position] = bytes([value])
        elif position < len(data):
            del data[position]
    saved = parser.CHUNK_BYTES, parser.BULK_BYTES
    parser.CHUNK_BYTES = parser.BULK_BYTES = chunk
    try:
        same_as_read_trace(bytes(data))
    finally:
        parser.CHUNK_BYTES, parser.BULK_BYTES = saved
