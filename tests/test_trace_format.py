"""The .kbt format: round trips, determinism, footers, versions, validation and limits."""

from __future__ import annotations

import io
import tracemalloc

import msgpack
import pytest
from trace_synth import (
    KERNEL_FILE,
    KERNEL_SOURCE,
    decode_like_events,
    every_kind_events,
    footer_record,
    header_record,
    loc,
    make_header,
    pack_objects,
    record_run,
)

from emulator.trace import TraceFormatError, wire
from emulator.trace.reader import read_trace
from emulator.trace.schema import FIELDS, Kind, SourceLoc
from emulator.trace.writer import TraceWriter


def write_run(events, **footer) -> bytes:
    out = io.BytesIO()
    record_run(TraceWriter(out), events, **footer)
    return out.getvalue()


def forged(*records, header=None, footer=True, events=None) -> bytes:
    """A trace packed by hand: header, ``records``, and a footer counting the events."""
    header = header_record() if header is None else header
    if events is None:
        events = sum(1 for r in records if isinstance(r, list) and 1 <= r[0] <= 99)
    tail = [footer_record(events, end_time=1 << 20)] if footer else []
    return pack_objects(header, *records, *tail)


def error_of(data: bytes) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as info:
        read_trace(data)
    return info.value


# Round trips


def test_every_event_kind_decodes_to_what_was_emitted():
    events = every_kind_events()
    assert {e[0] for e in events} == set(Kind)
    trace = read_trace(write_run(events))
    assert list(trace.iter_decoded()) == events
    assert [trace.decode(i) for i in range(len(events))] == events


def test_events_hold_absolute_times_and_interned_ids():
    trace = read_trace(write_run(every_kind_events()))
    issue = next(e for e in trace.events if e[0] == Kind.ISSUE)
    assert issue[:4] == [Kind.ISSUE, 3, 0, 0]
    assert trace.strings[issue[4]] == "load_async"
    assert trace.locs[issue[11]] == loc(5)
    assert issue[8] == [64, 128] and issue[10] is False
    send = next(e for e in trace.events if e[0] == Kind.ISSUE and e[2] == 1)
    assert send[11] == -1  # a None loc
    assert [e[1] for e in trace.events] == [e[1] for e in every_kind_events()]


def test_header_keeps_the_run_keys_and_adds_format_version_producer():
    trace = read_trace(write_run(every_kind_events()))
    assert trace.version == (1, 6)  # its header has hbm_stacks (1.4) and provenance (1.6)
    assert trace.header["format"] == "kbt"
    assert trace.header["producer"] == "kbdebug 0.1.0"
    for key, value in make_header().items():
        assert trace.header[key] == value
    assert trace.sources == {KERNEL_FILE: KERNEL_SOURCE}


def test_same_calls_write_identical_bytes():
    events = decode_like_events(3000)
    assert write_run(events) == write_run(events)


def test_header_key_order_does_not_change_the_bytes():
    def run(header):
        out = io.BytesIO()
        writer = TraceWriter(out)
        writer.begin(header)
        writer.end({"status": "ok", "end_time": 0, "error": None, "error_loc": None})
        return out.getvalue()

    header = make_header()
    shuffled = {key: header[key] for key in reversed(list(header))}
    shuffled["config"] = dict(reversed(list(header["config"].items())))
    assert run(header) == run(shuffled)


def test_decode_like_trace_takes_at_most_16_bytes_per_event():
    events = decode_like_events(20000)
    data = write_run(events)
    assert len(data) / len(events) <= 16


def test_read_accepts_a_path_and_reports_progress(tmp_path):
    path = tmp_path / "run.kbt"
    path.write_bytes(write_run(decode_like_events(2000)))
    seen = []
    trace = read_trace(path, progress=lambda done, total: seen.append((done, total)))
    assert len(trace.events) > 2000
    size = path.stat().st_size
    assert seen[-1] == (size, size)
    assert all(total == size and 0 <= done <= size for done, total in seen)


# Footers


def test_a_finished_run_has_an_ok_footer_with_the_event_count():
    events = every_kind_events()
    trace = read_trace(write_run(events))
    assert not trace.truncated and trace.truncated_at is None
    assert trace.footer == {
        "status": "ok",
        "events": len(events),
        "end_time": events[-1][1],
        "error": None,
        "error_loc": None,
    }


def test_a_failed_run_has_an_error_footer_with_message_and_location():
    data = write_run(
        every_kind_events(), status="error", error="KernelError: boom", error_loc=loc(9)
    )
    footer = read_trace(data).footer
    assert footer["status"] == "error"
    assert footer["error"] == "KernelError: boom"
    assert footer["error_loc"] == SourceLoc(KERNEL_FILE, 9, "decode_attention")


def test_a_deadlocked_run_has_a_deadlock_footer():
    trace = read_trace(write_run(every_kind_events(), status="deadlock", error="2 PEs blocked"))
    assert trace.footer["status"] == "deadlock"
    assert trace.footer["error"] == "2 PEs blocked"
    assert any(e[0] == Kind.DEADLOCK for e in trace.events)


def test_footer_event_count_must_match():
    data = forged([Kind.KERNEL_END, 0, 0], events=2)
    assert "footer says 2 events, the trace has 1" in str(error_of(data))


def test_footer_status_must_be_known():
    data = pack_objects(header_record(), {**footer_record(0), "status": "crashed"})
    assert "footer status 'crashed'" in str(error_of(data))


def test_data_after_the_footer_is_rejected():
    data = forged() + msgpack.packb([Kind.KERNEL_END, 0, 0])
    assert "after the footer" in str(error_of(data))


# Versions


def test_older_minor_version_is_read(monkeypatch):
    data = write_run(every_kind_events())
    monkeypatch.setattr(wire, "FORMAT_VERSION", (1, 7))
    trace = read_trace(data)
    assert trace.version == (1, 6)
    assert list(trace.iter_decoded()) == every_kind_events()


def test_newer_minor_version_skips_what_it_adds():
    header = header_record(version=[1, 7], future_key={"x": 1})
    header["channels"][0]["kind"] = "dma_gather"
    data = forged(
        [Kind.KERNEL_END, 5, 0],
        [42, 10, 1, "a", [1, 2]],  # an event kind this reader does not know
        [110, "anything"],  # a definition kind this reader does not know
        [Kind.COMPLETE, 1, 0, 7, -1, "extra", 9],  # a known kind with extra fields
        header=header,
    )
    trace = read_trace(data)
    assert trace.version == (1, 7)
    assert trace.events == [[Kind.KERNEL_END, 5, 0], [Kind.COMPLETE, 16, 0, 7, -1]]
    assert trace.footer["events"] == 3


def test_unknown_kinds_are_rejected_in_a_trace_of_this_version():
    data = forged([42, 10, 1])
    assert "unknown record kind 42" in str(error_of(data))


def test_extra_fields_are_rejected_in_a_trace_of_this_version():
    data = forged([Kind.COMPLETE, 1, 0, 7, -1, 9])
    assert "COMPLETE has 3 fields, expected 2" in str(error_of(data))


def test_newer_major_version_is_refused_with_an_upgrade_message():
    error = error_of(forged(header=header_record(version=[2, 0])))
    assert "format version 2.0 is newer than this reader (1.x); upgrade kbdebug" in str(error)


def test_major_version_zero_is_refused():
    assert "format version 0.9 is not supported" in str(
        error_of(forged(header=header_record(version=[0, 9])))
    )


def test_a_file_that_is_not_a_trace_is_rejected():
    assert "not a kbt trace" in str(error_of(b'{"format": "kbt"}\n'))
    assert "not a kbt trace" in str(error_of(pack_objects({"format": "json"})))


# Validation of events


def test_error_names_source_event_index_and_byte_offset():
    good = [[Kind.KERNEL_END, 0, 0]] * 3
    bad = [Kind.WAIT_END, 0, 0, 1, 2, 3]
    data = forged(*good, bad)
    offset = len(pack_objects(header_record(), *good))
    error = error_of(data)
    assert error.event_index == 3
    assert error.offset == offset
    assert str(error) == f"<bytes>: event 3 at byte {offset}: WAIT_END has 3 fields, expected 2"


def test_error_message_names_the_path(tmp_path):
    path = tmp_path / "trace.kbt"
    path.write_bytes(forged([Kind.WAIT_END, 0, 0, 1]))
    with pytest.raises(TraceFormatError, match=r"^.*trace\.kbt: event 0 at byte \d+: WAIT_END"):
        read_trace(path)


def test_a_record_that_is_not_an_array_is_rejected():
    # Bytes index like a list of ints, so they must not pass for an event.
    error = error_of(forged(b"\x02\x00\x00", events=1))
    assert "expected a record (a non-empty array), got bytes" in str(error)
    assert "expected a record" in str(error_of(forged([], events=0)))


def test_wrong_arity_is_rejected():
    error = error_of(forged([Kind.CHAN_GRANT, 0, 0, 1]))
    assert "CHAN_GRANT has 1 fields, expected 2" in str(error)


def test_time_going_backward_is_rejected():
    error = error_of(forged([Kind.KERNEL_END, 10, 0], [Kind.KERNEL_END, -3, 1]))
    assert error.event_index == 1
    assert "KERNEL_END time goes back by 3 cycles" in str(error)


def test_undefined_string_id_is_rejected():
    error = error_of(forged([0, "compute"], [Kind.OP_LOG, 0, 0, 0, 1]))
    assert "OP_LOG op is string id 1, not defined yet (1 defined)" in str(error)


def test_string_used_before_its_definition_is_rejected():
    error = error_of(forged([Kind.OP_LOG, 0, 0, 0, 0], [0, "compute"]))
    assert "OP_LOG category is string id 0, not defined yet (0 defined)" in str(error)


def test_undefined_loc_id_is_rejected():
    error = error_of(forged([Kind.WAIT_BEGIN, 0, 0, 3, 0]))
    assert "WAIT_BEGIN loc is loc id 0, not defined yet (0 defined)" in str(error)


def test_wrong_field_type_is_rejected():
    error = error_of(forged([Kind.WAIT_END, 0, 0, "three", 0]))
    assert "WAIT_END future is str 'three', expected int" in str(error)


def test_int_where_bool_is_expected_is_rejected():
    record = [Kind.ISSUE, 0, 0, 1, 0, -1, -1, 0, [], 0, 1, -1]
    error = error_of(forged([0, "op"], record))
    assert "ISSUE blocking is int 1, expected bool" in str(error)


def test_negative_shape_dimension_is_rejected():
    record = [Kind.ISSUE, 0, 0, 1, 0, -1, -1, 0, [4, -1], 0, True, -1]
    assert "ISSUE shape" in str(error_of(forged([0, "op"], record)))


def test_pe_outside_the_mesh_is_rejected():
    assert "KERNEL_END pe 4 is outside the mesh of 4 PEs" in str(error_of(forged([2, 0, 4])))


def test_channel_outside_the_channel_table_is_rejected():
    n = len(make_header()["channels"])
    error = error_of(forged([Kind.CHAN_REQUEST, 0, 0, n, 1]))
    assert f"CHAN_REQUEST channel {n} is not in the header's {n} channels" in str(error)


def test_int_beyond_int64_is_rejected():
    error = error_of(forged([0, "op"], [Kind.ISSUE, 0, 0, 0, 0, -1, 2**63, 0, [], 0, False, -1]))
    assert "ISSUE addr" in str(error) and "int64" in str(error)


def test_cycles_past_2_to_the_53_are_refused_as_implausible():
    error = error_of(forged([Kind.WAIT_END, 0, 0, 1, 2**53 + 1]))
    assert "WAIT_END stalled 9007199254740993 is outside 0..9007199254740992 cycles" in str(error)
    error = error_of(forged([Kind.KERNEL_END, 2**53 + 1, 0]))
    assert "past the 9007199254740992-cycle limit" in str(error)


def test_ids_beyond_what_the_file_can_hold_are_refused_before_anything_is_sized_by_them():
    for cmd in (50_000_000, 10**18, 2**63 - 1):
        error = error_of(forged([Kind.COMPLETE, 0, 0, cmd, -1]))
        assert "event 0 at byte" in str(error)
        assert f"COMPLETE cmd {cmd} is not a possible id" in str(error)
    error = error_of(forged([Kind.WAIT_BEGIN, 0, 0, -5, -1]))
    assert "WAIT_BEGIN future -5 is negative" in str(error)


def test_header_channel_ids_must_be_their_positions():
    header = header_record()
    header["channels"][1]["id"] = 7
    assert "header channel 1 has id 7" in str(error_of(forged(header=header)))


def test_header_without_run_keys_is_rejected():
    header = header_record()
    del header["launch"]
    assert "header lacks 'launch'" in str(error_of(forged(header=header)))


def test_source_embedded_twice_is_rejected():
    error = error_of(forged([101, "k.py", "a"], [101, "k.py", "b"]))
    assert "source of 'k.py' embedded twice" in str(error)


def test_ext_types_are_rejected():
    data = pack_objects(header_record()) + msgpack.packb(msgpack.ExtType(5, b"xx"))
    assert "malformed msgpack" in str(error_of(data))


def test_every_field_kind_has_a_validation_rule():
    # A new schema field tag would need a wire encoding and a reader rule.
    assert {tag for fields in FIELDS.values() for _, tag in fields} == {
        "int",
        "bool",
        "str",
        "loc",
        "shape",
    }


# Limits: each is enforced before anything is allocated for it. The proof is the read's
# peak traced memory, against inputs that would take far more were the limit not checked
# where it is: msgpack's own default limits are looser (32 Mi elements or bytes), so each
# claim below sits between the format's limit and msgpack's, and each message names the
# format's limit.

PEAK_BYTES = 16 << 20
#: Elements that follow the over-long headers below: as a list, 4 Mi slots take 32 MiB.
MANY = 1 << 22


def refused_within_peak(data: bytes) -> TraceFormatError:
    """The error reading ``data`` raises, asserting first that the read peaked under
    PEAK_BYTES."""
    error = None
    tracemalloc.start()
    try:
        read_trace(data)
    except TraceFormatError as e:
        error = e
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"the read peaked at {peak:,} bytes"
    assert error is not None, "the read raised no TraceFormatError"
    return error


def array32(count: int) -> bytes:
    return b"\xdd" + count.to_bytes(4, "big")


def test_array_longer_than_the_limit_is_rejected_before_allocation():
    # An event record claiming 32 Mi elements, 4 Mi of them present.
    data = pack_objects(header_record()) + array32((1 << 25) - 1) + b"\xc0" * MANY
    error = refused_within_peak(data)
    assert f"exceeds max_array_len({wire.MAX_ARRAY_LEN})" in str(error)


def test_header_claiming_a_huge_array_is_rejected_before_allocation():
    data = b"\x81\xa8channels" + array32((1 << 25) - 1) + b"\xc0" * MANY
    error = refused_within_peak(data)
    assert f"exceeds max_array_len({wire.MAX_ARRAY_LEN})" in str(error) and error.offset == 0


def test_map_longer_than_the_limit_is_rejected_before_allocation():
    # A header map claiming 16 Mi entries, 256 Ki distinct keys present (over 30 MiB as a dict).
    entries = b"".join(msgpack.packb(f"k{i}") + b"\xc0" for i in range(1 << 18))
    data = b"\xdf" + ((1 << 24) - 1).to_bytes(4, "big") + entries
    error = refused_within_peak(data)
    assert f"exceeds max_map_len({wire.MAX_MAP_LEN})" in str(error)


# msgpack checks a str's or bin's length once it holds the whole of it: what bounds the
# memory there is the record limit (below); these limits bound what is kept.


def test_str_longer_than_the_source_limit_is_rejected(monkeypatch):
    monkeypatch.setattr(wire, "MAX_SOURCE_BYTES", 1000)
    error = error_of(forged([101, "k.py", "x" * 1001]))
    assert "exceeds max_str_len(1000)" in str(error)


def test_bin_longer_than_the_limit_is_rejected(monkeypatch):
    monkeypatch.setattr(wire, "MAX_SOURCE_BYTES", 1000)
    error = error_of(forged(header=header_record(blob=b"x" * 1001)))
    assert "exceeds max_bin_len(1000)" in str(error)


def test_interned_string_longer_than_the_limit_is_rejected():
    data = forged([0, "x" * (wire.MAX_STRING_BYTES + 1)])
    assert "interned string longer than the 65536-byte limit" in str(error_of(data))


def test_interned_string_limit_counts_utf8_bytes():
    text = "é" * (wire.MAX_STRING_BYTES // 2 + 1)  # fewer characters than bytes
    assert "interned string longer" in str(error_of(forged([0, text])))


def test_record_larger_than_the_limit_is_refused_without_buffering_it(monkeypatch):
    # One record of 20 MiB (many strings, each within the string limit) against a 1 MiB
    # record limit: the reader must stop once it holds 1 MiB of it, not buffer it all.
    monkeypatch.setattr(wire, "MAX_RECORD_BYTES", 1 << 20)
    data = forged([101, *["x" * (1 << 18)] * 80])
    error = refused_within_peak(data)
    assert "larger than the 1048576-byte limit" in str(error)
    assert error.offset == len(pack_objects(header_record()))


def test_mesh_larger_than_the_pe_limit_is_rejected():
    data = forged(header=header_record(mesh=[1024, 1024]))
    assert "outside 1..65536 PEs" in str(error_of(data))


def test_nesting_deeper_than_the_limit_is_rejected():
    data = pack_objects(header_record()) + b"\x91" * 5000 + b"\x00"
    assert "malformed msgpack" in str(error_of(data))


# Loc callers (format 1.1): [102, loc_id, caller_loc_id]

HELPER = SourceLoc(KERNEL_FILE, 30, "load_tile")


def test_a_helper_loc_is_written_after_its_caller_and_read_back_with_it():
    first, second = HELPER._replace(caller=loc(7)), HELPER._replace(caller=loc(11))
    events = [
        (Kind.WAIT_BEGIN, 0, 0, 1, first),
        (Kind.WAIT_BEGIN, 1, 0, 2, second),
        (Kind.WAIT_BEGIN, 2, 0, 3, first),
        (Kind.WAIT_BEGIN, 3, 0, 4, loc(7)),
    ]
    data = write_run(events)
    definitions = [r for r in msgpack.Unpacker(io.BytesIO(data)) if isinstance(r, list)]
    definitions = [r for r in definitions if r[0] >= 100 and r[0] != wire.EMBED_SOURCE]
    assert definitions == [
        [100, KERNEL_FILE, 7, "decode_attention"],
        [100, KERNEL_FILE, 30, "load_tile"],
        [102, 1, 0],
        [100, KERNEL_FILE, 11, "decode_attention"],
        [100, KERNEL_FILE, 30, "load_tile"],
        [102, 3, 2],
    ]
    trace = read_trace(data)
    assert [e[4] for e in trace.events] == [1, 3, 1, 0]
    assert list(trace.iter_decoded()) == events
    assert trace.locs[1].caller == loc(7) and trace.locs[3].caller == loc(11)
    assert str(trace.locs[1]) == f"{KERNEL_FILE}:30"


def test_loc_caller_errors_are_named():
    helper = [100, KERNEL_FILE, 30, "load_tile"]
    kernel = [100, KERNEL_FILE, 7, "k"]
    cases = [
        ([kernel, [102, 1, 0]], "loc caller definition for loc id 1, not defined yet"),
        ([kernel, helper, [102, 1, 5]], "loc 1's caller is loc id 5, not a loc defined before"),
        ([kernel, helper, [102, 0, 1]], "loc 0's caller is loc id 1, not a loc defined before"),
        ([kernel, helper, [102, 1, 1]], "loc 1's caller is loc id 1"),
        ([kernel, helper, [102, 1, -1]], "loc 1's caller is loc id -1"),
        ([kernel, helper, [102, 1, 0], [102, 1, 0]], "loc 1 is given a caller twice"),
        ([kernel, helper, [102, 1]], "a loc caller definition is [102, loc_id, caller_loc_id]"),
        ([kernel, helper, [102, 1, "0"]], "a loc caller definition is [102"),
    ]
    for records, message in cases:
        error = error_of(forged(*records))
        assert message in str(error), (records, str(error))
        assert error.offset == len(pack_objects(header_record(), *records[:-1]))


def test_a_trace_of_a_newer_minor_version_keeps_loc_callers():
    data = forged(
        [100, KERNEL_FILE, 7, "k"],
        [100, KERNEL_FILE, 30, "load_tile"],
        [102, 1, 0],
        [Kind.WAIT_BEGIN, 0, 0, 1, 1],
        header=header_record(version=[1, 4]),
    )
    trace = read_trace(data)
    caller = SourceLoc(KERNEL_FILE, 7, "k")
    assert trace.decode(0)[4] == SourceLoc(KERNEL_FILE, 30, "load_tile", caller)


def test_host_read_event_round_trips():
    events = [(Kind.HOST_READ, 5, 1, 3), (Kind.HOST_READ, 6, 0, -1)]
    trace = read_trace(write_run(events))
    assert trace.events == [[17, 5, 1, 3], [17, 6, 0, -1]]
    assert list(trace.iter_decoded()) == events
    error = error_of(forged([Kind.HOST_READ, 0, 0, "3"]))
    assert "HOST_READ future" in str(error)


def test_a_reserved_byte_is_named_malformed_without_an_empty_reason():
    # 0xC1 is never used by msgpack, and its error has no message of its own: the
    # line says where and what, not "(FormatError: )".
    data = pack_objects(header_record()) + b"\xc1"
    message = str(error_of(data))
    assert "malformed msgpack" in message
    assert ": )" not in message and "()" not in message
