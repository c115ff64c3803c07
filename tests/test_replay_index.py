"""Replay.open: the columns, command and future tables say what the decoded events say."""

from __future__ import annotations

import pytest
from replay_naive import RUNS, blocking_waits, write_trace

from emulator.trace import TraceFormatError, parser
from emulator.trace.reader import read_trace
from emulator.trace.schema import FIELDS, Kind
from kbdebug.replay import Replay
from kbdebug.replay.index import IndexBuilder, build_index

TRACES = [*RUNS, "truncated"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    directory = tmp_path_factory.mktemp("replay_index")
    return {name: write_trace(name, directory) for name in TRACES}


@pytest.fixture(params=TRACES)
def case(request, traces):
    path = traces[request.param]
    return Replay.open(path), read_trace(path)


def named(event) -> dict:
    return dict(zip([n for n, _ in FIELDS[event[0]]], event[3:], strict=True))


def test_every_event_reads_back_as_the_reader_decodes_it(case):
    replay, trace = case
    assert replay.n_events == len(trace.events)
    for i, expected in enumerate(trace.iter_decoded()):
        assert replay.event(i) == expected, i


def test_every_event_has_a_one_line_description(case):
    replay, trace = case
    for i, event in enumerate(trace.iter_decoded()):
        line = replay.describe(i)
        assert line.startswith(f"#{i} t={event[1]} PE{event[2]} {event[0].name.lower()}")
        assert "\n" not in line


def test_the_future_table_holds_each_futures_whole_passage(case):
    replay, trace = case
    events = list(trace.iter_decoded())
    f = replay.index.futures
    futures = {named(e)["future"] for e in events if e[0] == Kind.ISSUE} - {-1}
    assert replay.n_futures == (max(futures) + 1 if futures else 0)
    blocking = blocking_waits(trace)
    for future in futures:
        (issue,) = [i for i, e in enumerate(events)
                    if e[0] == Kind.ISSUE and named(e)["future"] == future]  # fmt: skip
        cmd = named(events[issue])["cmd"]

        def first(kind, key, value):
            found = [i for i, e in enumerate(events) if e[0] == kind and named(e)[key] == value]
            return found[0] if found else -1

        begin = first(Kind.WAIT_BEGIN, "future", future)
        end = first(Kind.WAIT_END, "future", future)
        assert f.cmd[future] == cmd
        assert f.pe[future] == events[issue][2]
        assert replay.index.loc(int(f.loc[future])) == named(events[issue])["loc"]
        assert f.issue[future] == issue
        assert f.request[future] == first(Kind.CHAN_REQUEST, "cmd", cmd)
        assert f.grant[future] == first(Kind.CHAN_GRANT, "cmd", cmd)
        assert f.release[future] == first(Kind.CHAN_RELEASE, "cmd", cmd)
        assert f.complete[future] == first(Kind.COMPLETE, "cmd", cmd)
        assert f.wait_begin[future] == begin
        assert f.wait_end[future] == end
        wait_loc = named(events[begin])["loc"] if begin >= 0 else None
        assert replay.index.loc(int(f.wait_loc[future])) == wait_loc
        assert f.stall[future] == (named(events[end])["stalled"] if end >= 0 else 0)
        assert bool(f.blocks[future]) == (future in blocking)
        assert replay.future_events(future) == sorted(
            int(t[future])
            for t in (f.issue, f.request, f.grant, f.release, f.complete, f.wait_begin, f.wait_end)
            if t[future] >= 0
        )


def test_the_command_table_holds_each_issue(case):
    replay, trace = case
    k = replay.index.commands
    for i, event in enumerate(trace.iter_decoded()):
        if event[0] != Kind.ISSUE:
            continue
        e = named(event)
        cmd = e["cmd"]
        assert k.issue[cmd] == i and k.pe[cmd] == event[2]
        assert replay.index.string(int(k.op[cmd])) == e["op"]
        assert (k.future[cmd], k.addr[cmd], k.nbytes[cmd]) == (e["future"], e["addr"], e["nbytes"])
        assert replay.index.shapes[int(k.shape[cmd])] == e["shape"]
        assert replay.index.string(int(k.dtype[cmd])) == e["dtype"]
        assert bool(k.blocking[cmd]) is e["blocking"]


def test_channel_commands_are_in_request_order(case):
    replay, trace = case
    expected = [[] for _ in replay.index.channels]
    for event in trace.iter_decoded():
        if event[0] == Kind.CHAN_REQUEST:
            expected[named(event)["channel"]].append(named(event)["cmd"])
    assert [c.tolist() for c in replay.index.channel_cmds] == expected


def test_future_phase_names_follow_the_lifecycle(traces):
    replay = Replay.open(traces["decode_prefetch"])
    f = replay.index.futures
    future = int(f.wait_end.argmax())  # a future that was waited and resolved
    assert replay.future_phase(future) == "not issued"
    for name, event in (("issued", f.issue), ("waiting", f.wait_begin), ("resolved", f.wait_end)):
        replay.seek(int(event[future]) + 1)
        assert replay.future_phase(future) == name
        assert replay.future_phases()[future] == ["issued", "queued", "transferring", "ready",
                                                  "waiting", "resolved"].index(name)  # fmt: skip
    assert replay.future_phase(replay.n_futures + 5) == "not issued"
    assert replay.future_events(replay.n_futures + 5) == []


def test_index_built_in_any_batches_is_the_same(traces):
    trace = read_trace(traces["prefill"])
    whole = build_index(trace)
    for size in (1, 7, 1000):
        builder = IndexBuilder()
        for start in range(0, len(trace.events), size):
            builder.add(trace.events[start : start + size])
        index = builder.build(trace)
        for name, column in vars(whole.columns).items():
            assert getattr(index.columns, name).tolist() == column.tolist(), name
        assert index.shapes == whole.shapes


def test_indexing_leaves_the_records_as_they_were(traces):
    trace = read_trace(traces["decode_prefetch"])
    before = [list(record) for record in trace.events]
    build_index(trace)
    assert trace.events == before


def test_open_reports_progress_up_to_one(traces):
    seen = []
    Replay.open(traces["ring_attention"], progress=seen.append)
    assert seen == sorted(seen) and seen[-1] == 1.0 and all(0 <= x <= 1 for x in seen)


def test_open_rejects_a_file_that_is_not_a_trace(tmp_path):
    path = tmp_path / "notes.kbt"
    path.write_bytes(b"\x93\x01\x02\x03")
    with pytest.raises(TraceFormatError, match="not a kbt trace"):
        Replay.open(path)


def test_end_time_and_status_come_from_the_footer(case):
    replay, trace = case
    if trace.footer is None:
        assert replay.status == "truncated"
        assert replay.end_time == trace.events[-1][1]
    else:
        assert replay.status == trace.footer["status"]
        assert replay.end_time == trace.footer["end_time"]


# read_trace's streaming API, which Replay.open reads through.


@pytest.mark.parametrize("keep_events", [True, False])
def test_read_trace_hands_every_record_over_in_chunks(traces, monkeypatch, keep_events):
    monkeypatch.setattr(parser, "CHUNK_BYTES", 2048)
    path = traces["ring_attention"]
    whole = read_trace(path)
    batches = []
    trace = read_trace(path, on_batch=batches.append, keep_events=keep_events)
    assert len(batches) > 5
    assert [record for batch in batches for record in batch] == whole.events
    assert trace.events == (whole.events if keep_events else [])
    assert trace.footer == whole.footer and not trace.truncated


@pytest.mark.parametrize("keep_events", [True, False])
def test_read_trace_names_the_same_bad_event_when_streaming(traces, monkeypatch, keep_events):
    monkeypatch.setattr(parser, "CHUNK_BYTES", 2048)
    data = bytearray(traces["prefill"].read_bytes())
    data[-3000:-2000] = b"\xc1" * 1000  # never used by msgpack
    with pytest.raises(TraceFormatError) as plain:
        read_trace(bytes(data))
    handed = []
    with pytest.raises(TraceFormatError) as streamed:
        read_trace(bytes(data), on_batch=handed.append, keep_events=keep_events)
    assert str(streamed.value) == str(plain.value)
    # The chunks before the bad one were handed over; the bad one's records never are.
    assert 0 < sum(map(len, handed)) <= streamed.value.event_index


def test_read_trace_stops_when_on_batch_raises(traces):
    def stop(records):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        read_trace(traces["decode_prefetch"], on_batch=stop, keep_events=False)
