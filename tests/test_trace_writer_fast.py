"""TraceWriter's fast paths: the commonest records, built from a call-site cache, are
byte for byte what interning every string and loc by value gives, whatever objects
the emit sites pass (equal values in new objects, one line with several ops, a stale
cache entry, locs made anew for every call)."""

from __future__ import annotations

import io
import sys
from typing import Any

import pytest
from test_trace_compound_write import decode
from trace_synth import make_header

from emulator.recorder import ISSUE_GRANTED, RELEASE_COMPLETE, MemoryRecorder
from emulator.trace.schema import SourceLoc
from emulator.trace.writer import TraceWriter

KERNEL = SourceLoc("k.py", 3, "kernel")
HELPER = SourceLoc("h.py", 7, "helper", KERNEL)


class NeverCached(dict):
    """A site cache that never hits: every record interned by value, as without it."""

    def get(self, key: Any, default: Any = None) -> Any:
        return default


def granted(time: int, cmd: int, op: str, dtype: str, loc: Any, engine: str = "math") -> tuple:
    """A compute command issued to a free engine, as tl._compute emits it."""
    cid = 2 if engine == "math" else 1
    fields = (cmd, op, -1, -1, 64, (4, 4), dtype, True, loc, "compute", engine, cid, cmd)
    return (ISSUE_GRANTED, time, 0, *fields, cid, cmd)


def released(time: int, cmd: int, engine: str = "math") -> tuple:
    return (RELEASE_COMPLETE, time, 0, 2 if engine == "math" else 1, cmd, cmd, -1)


def write(calls: list[tuple], *, cached: bool = True, prime: Any = None) -> bytes:
    out = io.BytesIO()
    writer = TraceWriter(out)
    if not cached:
        writer._sites = NeverCached()
    if prime is not None:
        prime(writer)
    writer.begin(make_header())
    for call in calls:
        writer.emit_compound(*call)
    writer.end({"status": "ok", "end_time": 10_000, "error": None, "error_loc": None})
    return out.getvalue()


def expanded(calls: list[tuple]) -> list[tuple]:
    kept = MemoryRecorder()
    for call in calls:
        kept.emit_compound(*call)
    return kept.events


def commands(sites: list[tuple[str, str, Any, str]]) -> list[tuple]:
    """Each (op, dtype, loc, engine) issued, then released, in turn."""
    calls = []
    for cmd, (op, dtype, loc, engine) in enumerate(sites):
        calls.append(granted(2 * cmd, cmd, op, dtype, loc, engine))
        calls.append(released(2 * cmd + 1, cmd, engine))
    return calls


def same_bytes_and_events(calls: list[tuple]) -> bytes:
    data = write(calls)
    assert data == write(calls, cached=False)
    assert decode(data)[0] == expanded(calls)
    return data


def test_one_line_with_several_ops_and_dtypes_keeps_each_op_and_dtype():
    # `s = tl.dot(q, tl.trans(k)) * scale`: three ops from one loc object, in a loop.
    sites = [("trans", "f16", KERNEL, "math"), ("dot", "f32", KERNEL, "gemm")]
    sites += [("mul", "f32", KERNEL, "math"), ("mul", "f16", KERNEL, "math")]
    data = same_bytes_and_events(commands(sites * 3))
    events = decode(data)[0]
    assert [e[4] for e in events[::6]] == ["trans", "dot", "mul", "mul"] * 3
    assert [e[9] for e in events[::6]] == ["f16", "f32", "f32", "f16"] * 3


def test_equal_values_in_new_objects_get_the_ids_of_the_first():
    # Locs and strings equal to earlier ones but made anew (a user's recorder, a loc
    # rebuilt per call) are interned by value: one definition each, the same ids.
    sites = []
    for line in (3, 3, 7, 3):
        loc = SourceLoc("k.py", line, "kernel") if line == 3 else HELPER
        op = "".join(["e", "xp"])
        sites.append((op, "".join(["f", "32"]), loc, "".join(["ma", "th"])))
    data = same_bytes_and_events(commands(sites))
    assert data.count(b"\xa3exp") == 1  # "exp" defined once
    assert data.count(b"\xa4k.py") == 1  # the kernel's loc defined once (the helper's caller)


def test_a_stale_entry_under_a_sites_key_is_not_used():
    # Another site's entry under this site's key (as two sums of ids could collide):
    # identity checks reject it, the record is interned by value.
    op, dtype, loc = "exp", "f32", HELPER

    def prime(writer: TraceWriter) -> None:
        writer._sites[id(loc) + id(op)] = (
            SourceLoc("other.py", 1, "f"), op, dtype, "compute", "math", 50, 51, 52, 53, 54
        )  # fmt: skip

    calls = commands([(op, dtype, loc, "math")] * 2)
    data = write(calls, prime=prime)
    assert data == write(calls, cached=False)
    assert decode(data)[0] == expanded(calls)


def test_locs_made_anew_for_every_call_keep_the_cache_bounded():
    # The site cache holds an entry (a few objects, its loc among them) per loc object:
    # with a loc made anew for every call, 16,384 more calls (four times the bound of
    # 4,096 entries) would keep some 48,000 more memory blocks were it not bounded; at
    # most a full cache's, some 12,000, if it is.
    out = io.BytesIO()
    writer = TraceWriter(out)
    writer.begin(make_header())

    def emit(cmds: range) -> None:
        for cmd in cmds:
            loc = SourceLoc("k.py", 3, "kernel")
            writer.emit_compound(*granted(cmd, cmd, "exp", "f32", loc))

    emit(range(5000))
    blocks = sys.getallocatedblocks()
    emit(range(5000, 21_384))
    grown = sys.getallocatedblocks() - blocks
    assert grown < 16_384, f"{grown:,} more memory blocks"
    writer.end({"status": "ok", "end_time": 21_384, "error": None, "error_loc": None})
    assert out.getvalue().count(b"\xa4k.py") == 1


def test_a_none_loc_is_written_as_no_loc():
    calls = commands([("exp", "f32", None, "math"), ("exp", "f32", KERNEL, "math")] * 2)
    same_bytes_and_events(calls)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (granted(5, 1, "exp", "f32", KERNEL)[:-1], r"CHAN_GRANT has 14 fields, expected 15"),
        (released(5, 1)[:-1], r"CHAN_RELEASE\+COMPLETE has 3 fields, expected 4"),
        (granted(1, 1, "exp", "f32", KERNEL), r"at time 1 is before the previous event \(5\)"),
    ],
)
def test_the_fast_paths_refuse_what_the_others_refuse(call, message):
    writer = TraceWriter(io.BytesIO())
    writer.begin(make_header())
    writer.emit_compound(*released(5, 0))
    with pytest.raises(ValueError, match=message):
        writer.emit_compound(*call)


def test_the_fast_paths_refuse_a_writer_not_begun():
    writer = TraceWriter(io.BytesIO())
    with pytest.raises(ValueError, match="called on a trace writer that is not begun"):
        writer.emit_compound(*granted(1, 1, "exp", "f32", KERNEL))
    with pytest.raises(ValueError, match="called on a trace writer that is not begun"):
        writer.emit_compound(*released(1, 1))
