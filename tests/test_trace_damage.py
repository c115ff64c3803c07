"""Damaged traces: cut short at any byte, killed writers, random corruption."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import msgpack
from _shared_fuzz import cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_synth import decode_like_events, every_kind_events, record_run

from emulator.trace import TraceFormatError
from emulator.trace.reader import read_trace
from emulator.trace.writer import TraceWriter

ROOT = Path(__file__).resolve().parent.parent


def small_trace() -> bytes:
    out = io.BytesIO()
    record_run(TraceWriter(out), every_kind_events(), status="error", error="boom")
    return out.getvalue()


SMALL = small_trace()


def object_ends(data: bytes) -> list[tuple[int, bool]]:
    """(end offset, is an event record) of each object of a valid trace."""
    unpacker = msgpack.Unpacker()
    unpacker.feed(data)
    ends = []
    for obj in unpacker:
        ends.append((unpacker.tell(), isinstance(obj, list) and 1 <= obj[0] <= 99))
    return ends


def test_trace_cut_at_every_byte_returns_its_whole_records():
    full = read_trace(SMALL)
    ends = object_ends(SMALL)
    header_end = ends[0][0]
    for cut in range(len(SMALL)):
        trace = read_trace(SMALL[:cut])
        whole = [(end, is_event) for end, is_event in ends if end <= cut]
        n_events = sum(is_event for _, is_event in whole)
        assert trace.truncated, cut
        assert trace.footer is None, cut
        assert trace.truncated_at == (whole[-1][0] if whole else 0), cut
        assert trace.events == full.events[:n_events], cut
        if cut < header_end:
            assert trace.version is None and trace.header == {}, cut
        else:
            assert trace.version == full.version and trace.header == full.header, cut


def test_whole_trace_is_not_truncated():
    trace = read_trace(SMALL)
    assert not trace.truncated and trace.truncated_at is None


KILLED_WRITER = """
import os, signal, sys
from trace_synth import KERNEL_FILE, KERNEL_SOURCE, decode_like_events, make_header
from emulator.trace.writer import TraceWriter

writer = TraceWriter(sys.argv[1], flush_bytes=512)
writer.begin(make_header())
writer.add_source(KERNEL_FILE, KERNEL_SOURCE)
for i, event in enumerate(decode_like_events(20000)):
    writer.emit(*event)
    if i == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_writer_killed_mid_run_leaves_a_readable_truncated_prefix(tmp_path):
    path = tmp_path / "killed.kbt"
    kill_after = 15000
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    result = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(path), str(kill_after)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr.decode()
    trace = read_trace(path)
    assert trace.truncated and trace.footer is None
    # At most about flush_bytes (a few dozen events) were still buffered.
    assert kill_after - 200 < len(trace.events) <= kill_after + 1
    expected = decode_like_events(20000)[: len(trace.events)]
    assert list(trace.iter_decoded()) == expected


# Random corruption: only TraceFormatError, or a trace that decodes

mutation = st.tuples(
    st.sampled_from(["flip", "insert", "delete"]),
    st.integers(0, len(SMALL) - 1),
    st.integers(0, 255),
)


@settings(max_examples=cases(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=st.lists(mutation, min_size=1, max_size=4), cut=st.integers(0, len(SMALL)))
def test_corrupted_trace_raises_only_trace_format_error(mutations, cut):
    data = bytearray(SMALL[:cut] if cut else SMALL)
    for op, position, value in mutations:
        position = min(position, len(data))
        if op == "flip" and position < len(data):
            data[position] ^= value or 1
        elif op == "insert":
            data[position:position] = bytes([value])
        elif position < len(data):
            del data[position]
    try:
        trace = read_trace(bytes(data))
    except TraceFormatError as error:
        assert error.offset is None or 0 <= error.offset <= len(data)
        return
    for i in range(len(trace.events)):
        trace.decode(i)
