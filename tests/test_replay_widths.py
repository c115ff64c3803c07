"""The index's narrow columns: a value past int32 widens its column, never wraps; the
batches are indexed on a thread of their own, whose errors still reach the caller."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest
from trace_synth import decode_like_events, loc, record_run

from emulator.trace import TraceFormatError
from emulator.trace.reader import read_trace
from emulator.trace.schema import Kind
from emulator.trace.writer import TraceWriter
from kbdebug.replay import Replay
from kbdebug.replay import cache as index_cache
from kbdebug.replay.index import DTYPES, IndexBuilder

BIG = 1 << 40  # bytes, a buffer id: past int32, far below the int64 limit
LONG = 1 << 34  # cycles stalled


def big_value_events() -> list[tuple]:
    """One load of BIG bytes into scratch buffer BIG, waited LONG cycles."""
    return [
        (Kind.KERNEL_START, 0, 0, "decode_attention", loc(4)),
        (Kind.ISSUE, 1, 0, 0, "load_async", 0, BIG, BIG, (64, 128), "bf16", False, loc(6)),
        (Kind.SCRATCH_ALLOC, 1, 0, BIG, BIG, BIG),
        (Kind.CHAN_REQUEST, 1, 0, 0, 0),
        (Kind.CHAN_GRANT, 1, 0, 0, 0),
        (Kind.WAIT_BEGIN, 2, 0, 0, loc(9)),
        (Kind.CHAN_RELEASE, LONG + 2, 0, 0, 0),
        (Kind.COMPLETE, LONG + 2, 0, 0, 0),
        (Kind.WAIT_END, LONG + 2, 0, 0, LONG),
        (Kind.SCRATCH_FREE, LONG + 2, 0, BIG, BIG, 0),
        (Kind.KERNEL_END, LONG + 3, 0),
    ]


def write(path, events) -> None:
    out = io.BytesIO()
    record_run(TraceWriter(out), events)
    path.write_bytes(out.getvalue())


@pytest.fixture
def big_trace(tmp_path, monkeypatch):
    monkeypatch.setenv("KBDEBUG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(index_cache, "save_in_background", index_cache.save)
    path = tmp_path / "big.kbt"
    write(path, big_value_events())
    return path


def test_values_past_int32_read_back_exactly_fresh_and_from_the_cache(big_trace):
    expected = list(read_trace(big_trace).iter_decoded())
    for replay in (Replay.open(big_trace), Replay.open(big_trace)):  # built, then mapped
        assert [replay.event(i) for i in range(replay.n_events)] == expected
        c = replay.index.columns
        assert c.nbytes.dtype == c.aux.dtype == c.val.dtype == np.int64
        assert c.cmd.dtype == c.loc.dtype == np.int32
        assert int(replay.index.futures.stall[0]) == LONG
        assert replay.seek(replay.n_events - 2).pes[0].scratch == BIG


def small_then_big_events() -> list[tuple]:
    """A compute command of 256 bytes (command 0), then a load of BIG bytes (command 1)."""
    return [
        (Kind.KERNEL_START, 0, 0, "decode_attention", loc(4)),
        (Kind.ISSUE, 0, 0, 0, "dot", -1, -1, 256, (1, 64), "f32", True, loc(7)),
        (Kind.CHAN_REQUEST, 0, 0, 3, 0),
        (Kind.CHAN_GRANT, 0, 0, 3, 0),
        (Kind.CHAN_RELEASE, 1, 0, 3, 0),
        (Kind.COMPLETE, 1, 0, 0, -1),
        (Kind.ISSUE, 1, 0, 1, "load_async", 0, BIG, BIG, (64, 128), "bf16", False, loc(6)),
        (Kind.CHAN_REQUEST, 1, 0, 0, 1),
        (Kind.CHAN_GRANT, 1, 0, 0, 1),
        (Kind.WAIT_BEGIN, 2, 0, 0, loc(9)),
        (Kind.CHAN_RELEASE, LONG + 2, 0, 0, 1),
        (Kind.COMPLETE, LONG + 2, 0, 1, 0),
        (Kind.WAIT_END, LONG + 2, 0, 0, LONG),
        (Kind.KERNEL_END, LONG + 3, 0),
    ]


def test_a_column_widened_mid_trace_keeps_the_values_before(tmp_path):
    path = tmp_path / "small_then_big.kbt"
    write(path, small_then_big_events())
    trace = read_trace(path)
    first = trace.events[:6]  # byte counts that fit in int32
    narrow = IndexBuilder()
    narrow.add(first)
    assert narrow.build(trace).columns.nbytes.dtype == DTYPES["nbytes"]
    builder = IndexBuilder()
    builder.add(first)
    for start in range(6, len(trace.events), 3):
        builder.add(trace.events[start : start + 3])
    index = builder.build(trace)
    assert index.columns.nbytes.dtype == np.int64
    assert index.columns.nbytes.tolist()[:3] == [-1, 256, -1]
    assert int(index.commands.nbytes[1]) == BIG
    replay = Replay.open(path, cache=False)
    assert [replay.event(i) for i in range(replay.n_events)] == list(trace.iter_decoded())
    for name, column in vars(replay.index.columns).items():
        assert getattr(index.columns, name).tolist() == column.tolist(), name


def test_a_command_id_past_int32_is_refused_not_wrapped(big_trace):
    trace = read_trace(big_trace)
    records = [list(r) for r in trace.events]
    records[3][4] = (1 << 31) + 5  # the CHAN_REQUEST's command
    builder = IndexBuilder()
    builder.add(records)
    with pytest.raises(TraceFormatError, match="names command 2147483653, not a possible id"):
        builder.build(trace)


def test_the_reader_refuses_a_command_id_the_file_cannot_hold(tmp_path):
    events = big_value_events()
    events[3] = (Kind.CHAN_REQUEST, 1, 0, 0, 1 << 31)
    path = tmp_path / "absurd.kbt"
    write(path, events)
    with pytest.raises(TraceFormatError, match="2147483648"):
        Replay.open(path, cache=False)


def feed_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "kbdebug-index-feed"]


def test_an_error_while_indexing_reaches_the_caller_and_no_thread_is_left(big_trace, monkeypatch):
    def fail(self, tables):
        raise RuntimeError("indexing failed")

    monkeypatch.setattr(IndexBuilder, "add_tables", fail)
    with pytest.raises(RuntimeError, match="indexing failed"):
        Replay.open(big_trace, cache=False)
    assert feed_threads() == []


def test_a_cancelled_open_leaves_no_thread(big_trace):
    def cancel(fraction):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Replay.open(big_trace, progress=cancel, cache=False)
    assert feed_threads() == []


@pytest.mark.parametrize(
    "at, what",
    [
        (1, "ISSUE of command 0"),
        (3, "CHAN_REQUEST of command 0"),
        (4, "CHAN_GRANT of command 0"),
        (5, "WAIT_BEGIN of future 0"),
        (6, "CHAN_RELEASE of command 0"),
        (7, "COMPLETE of command 0"),
        (8, "WAIT_END of future 0"),
    ],
)
def test_a_duplicated_record_is_refused_naming_both_events(tmp_path, at, what):
    events = big_value_events()
    events.insert(at + 1, events[at])  # the same record twice, at ``at`` and ``at + 1``
    path = tmp_path / "twice.kbt"
    write(path, events)
    with pytest.raises(TraceFormatError, match=rf"{what} again \(first at event {at}\)") as e:
        Replay.open(path, cache=False)
    assert e.value.event_index == at + 1


def test_room_made_too_small_grows_without_losing_an_event(tmp_path):
    path = tmp_path / "decode.kbt"
    write(path, decode_like_events(30_000))  # some 4,400 ISSUEs: past a kept field's first room
    trace = read_trace(path)
    builder = IndexBuilder(capacity=2)  # columns for 2 events, kept fields for none
    for start in range(0, len(trace.events), 1000):
        builder.add(trace.events[start : start + 1000])
    index = builder.build(trace)
    replay = Replay.open(path, cache=False)
    for table in ("columns", "commands", "futures"):
        for name, column in vars(getattr(replay.index, table)).items():
            assert getattr(getattr(index, table), name).tolist() == column.tolist(), (table, name)
    for name in ("pe_loc_events", "pe_status_events", "pe_scratch_events", "channel_cmds"):
        assert [a.tolist() for a in getattr(index, name)] == [
            a.tolist() for a in getattr(replay.index, name)
        ], name
