"""TraceWriter: what it accepts, what it refuses, and when bytes reach the file."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from trace_synth import KERNEL_FILE, KERNEL_SOURCE, every_kind_events, loc, make_header, record_run

from emulator.trace import wire
from emulator.trace.reader import read_trace
from emulator.trace.schema import Kind
from emulator.trace.writer import TraceWriter

OK_FOOTER = {"status": "ok", "end_time": 100, "error": None, "error_loc": None}


def begun(target=None, **kwargs) -> tuple[TraceWriter, io.BytesIO]:
    out = io.BytesIO() if target is None else target
    writer = TraceWriter(out, **kwargs)
    writer.begin(make_header())
    return writer, out


def descriptors_of(path: Path) -> list[str]:
    """This process's open file descriptors on ``path`` (Linux)."""
    fds = Path("/proc/self/fd")
    return [fd.name for fd in fds.iterdir() if os.path.realpath(fd) == str(path.resolve())]


def test_a_begun_writer_to_a_path_holds_it_open(tmp_path):
    path = tmp_path / "run.kbt"
    writer = TraceWriter(path)
    writer.begin(make_header())
    assert len(descriptors_of(path)) == 1
    writer.end(dict(OK_FOOTER, end_time=0))


def test_writer_to_a_path_closes_the_file_at_end(tmp_path):
    path = tmp_path / "run.kbt"
    writer = TraceWriter(path)
    record_run(writer, every_kind_events())
    assert descriptors_of(path) == []
    assert read_trace(path).footer["status"] == "ok"


def test_writer_to_a_file_object_leaves_it_open():
    out = io.BytesIO()
    record_run(TraceWriter(out), every_kind_events())
    assert not out.closed
    assert read_trace(out.getvalue()).footer["events"] == len(every_kind_events())


def test_writer_takes_the_producer_string():
    writer, out = begun(producer="kbdebug 9.9.9")
    writer.end(OK_FOOTER)
    assert read_trace(out.getvalue()).header["producer"] == "kbdebug 9.9.9"


def test_events_count_what_was_emitted():
    writer, _ = begun()
    writer.add_source(KERNEL_FILE, KERNEL_SOURCE)
    for event in every_kind_events():
        writer.emit(*event)
    assert writer.events == len(every_kind_events())


def test_numpy_integer_fields_are_written_as_ints():
    writer, out = begun()
    writer.emit(Kind.WAIT_END, 5, 0, np.int32(3), np.int64(7))
    writer.emit(
        Kind.ISSUE,
        6,
        np.int64(1),
        1,
        "op",
        -1,
        np.uint64(4096),
        8,
        (np.int64(2),),
        "f32",
        True,
        None,
    )
    writer.end(OK_FOOTER)
    trace = read_trace(out.getvalue())
    assert trace.decode(0) == (Kind.WAIT_END, 5, 0, 3, 7)
    assert trace.decode(1)[6] == 4096 and trace.decode(1)[8] == (2,)


def test_emit_rejects_an_unknown_kind():
    writer, _ = begun()
    with pytest.raises(ValueError, match="unknown event kind 99"):
        writer.emit(99, 0, 0)


def test_emit_rejects_a_wrong_number_of_fields():
    writer, _ = begun()
    with pytest.raises(ValueError, match="WAIT_END has 3 fields, expected 2"):
        writer.emit(Kind.WAIT_END, 0, 0, 1, 2, 3)


def test_emit_rejects_time_going_backward():
    writer, _ = begun()
    writer.emit(Kind.KERNEL_END, 10, 0)
    with pytest.raises(ValueError, match="KERNEL_END at time 9 is before the previous event"):
        writer.emit(Kind.KERNEL_END, 9, 0)


def test_emit_rejects_a_float_time():
    writer, _ = begun()
    with pytest.raises(TypeError, match="time must be an int"):
        writer.emit(Kind.KERNEL_END, 1.5, 0)


def test_emit_before_begin_and_after_end_is_refused():
    writer = TraceWriter(io.BytesIO())
    with pytest.raises(ValueError, match="not begun"):
        writer.emit(Kind.KERNEL_END, 0, 0)
    writer.begin(make_header())
    writer.end(OK_FOOTER)
    with pytest.raises(ValueError, match="closed"):
        writer.emit(Kind.KERNEL_END, 200, 0)


def test_a_value_msgpack_cannot_write_fails_the_writer_keeping_what_came_before():
    writer, out = begun()
    writer.emit(Kind.KERNEL_END, 1, 0)
    with pytest.raises(TypeError, match="WAIT_END event .* cannot be written"):
        writer.emit(Kind.WAIT_END, 2, 0, object(), 0)
        writer.flush()
    writer.end({**OK_FOOTER, "status": "error", "error": "TypeError"})  # only closes
    trace = read_trace(out.getvalue())
    assert trace.truncated and trace.events == [[Kind.KERNEL_END, 1, 0]]


def test_str_field_must_be_a_str():
    writer, _ = begun()
    with pytest.raises(TypeError, match="expected a str field"):
        writer.emit(Kind.OP_LOG, 0, 0, 5, "dot")


def test_loc_field_must_be_a_source_loc_or_none():
    writer, _ = begun()
    with pytest.raises(TypeError, match="SourceLoc"):
        writer.emit(Kind.WAIT_BEGIN, 0, 0, 1, "kernel.py:3")


def test_begin_requires_the_run_keys():
    header = make_header()
    del header["channels"]
    with pytest.raises(ValueError, match="header lacks 'channels'"):
        TraceWriter(io.BytesIO()).begin(header)


def test_begin_refuses_the_writers_own_keys():
    with pytest.raises(ValueError, match="'version'"):
        TraceWriter(io.BytesIO()).begin({**make_header(), "version": [9, 9]})


def test_header_values_msgpack_cannot_write_raise_type_error():
    with pytest.raises(TypeError, match="cannot be written"):
        TraceWriter(io.BytesIO()).begin({**make_header(), "launch": {"kernel": object()}})


def test_end_requires_a_known_status_and_a_time_not_before_the_last_event():
    writer, _ = begun()
    writer.emit(Kind.KERNEL_END, 50, 0)
    with pytest.raises(ValueError, match="status 'fine'"):
        writer.end({**OK_FOOTER, "status": "fine"})
    with pytest.raises(ValueError, match="end_time 40"):
        writer.end({**OK_FOOTER, "end_time": 40})


def test_add_source_twice_with_the_same_text_writes_it_once():
    writer, out = begun()
    writer.add_source("k.py", "text")
    writer.add_source("k.py", "text")
    with pytest.raises(ValueError, match="different texts"):
        writer.add_source("k.py", "other")
    writer.end(OK_FOOTER)
    assert read_trace(out.getvalue()).sources == {"k.py": "text"}


def test_add_source_refuses_a_text_over_the_limit(monkeypatch):
    monkeypatch.setattr(wire, "MAX_SOURCE_BYTES", 10)
    writer, _ = begun()
    with pytest.raises(ValueError, match="exceeds 10 bytes"):
        writer.add_source("k.py", "x" * 11)


def test_long_strings_are_cut_to_the_interned_string_limit():
    writer, out = begun()
    message = "é" * wire.MAX_STRING_BYTES
    writer.emit(Kind.KERNEL_ERROR, 0, 0, message, None)
    writer.end({**OK_FOOTER, "status": "error", "error": message})
    trace = read_trace(out.getvalue())
    text = trace.decode(0)[3]
    assert message.startswith(text) and len(text.encode()) == wire.MAX_STRING_BYTES
    assert trace.footer["error"] == text


def test_nothing_reaches_the_file_object_between_flushes():
    out = io.BytesIO()
    writer = TraceWriter(out, flush_bytes=1 << 20)
    writer.begin(make_header())
    header_bytes = len(out.getvalue())
    for t in range(1000):
        writer.emit(Kind.WAIT_END, t, 0, t, 0)
    assert len(out.getvalue()) == header_bytes


def test_records_reach_the_file_once_flush_bytes_are_buffered():
    out = io.BytesIO()
    writer = TraceWriter(out, flush_bytes=256)
    writer.begin(make_header())
    for t in range(1000):
        writer.emit(Kind.WAIT_END, t, 0, t, 0)
    trace = read_trace(out.getvalue())
    assert trace.truncated
    assert 1000 - 100 < len(trace.events) <= 1000


def test_close_without_end_leaves_a_truncated_trace():
    out = io.BytesIO()
    with TraceWriter(out) as writer:
        writer.begin(make_header())
        writer.emit(Kind.WAIT_BEGIN, 3, 0, 1, loc(9))
    trace = read_trace(out.getvalue())
    assert trace.truncated and trace.footer is None
    assert trace.truncated_at == len(out.getvalue())
    assert list(trace.iter_decoded()) == [(Kind.WAIT_BEGIN, 3, 0, 1, loc(9))]


def test_constructor_rejects_bad_arguments():
    with pytest.raises(ValueError, match='"flush_bytes"'):
        TraceWriter(io.BytesIO(), flush_bytes=-1)
    with pytest.raises(TypeError, match='"target"'):
        TraceWriter(io.StringIO())
