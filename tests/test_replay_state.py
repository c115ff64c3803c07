"""Replay state: at every position, what seek, step and state_at give equals a naive replay."""

from __future__ import annotations

import random

import pytest
from _shared_fuzz import cases
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_naive import RUNS, naive_states, write_trace

import kbdebug.replay.replay as replay_module
from emulator.trace.reader import read_trace
from kbdebug.replay import Replay
from kbdebug.replay.state import apply, initial_state, state_at

TRACES = [*RUNS, "truncated"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Per trace name: (path, the reader's Trace, the naive state at every position)."""
    directory = tmp_path_factory.mktemp("replay_state")
    out = {}
    for name in TRACES:
        path = write_trace(name, directory)
        trace = read_trace(path)
        out[name] = (path, trace, naive_states(trace))
    return out


@pytest.fixture(params=TRACES)
def case(request, traces):
    path, trace, naive = traces[request.param]
    return Replay.open(path), trace, naive


def test_every_trace_has_events_and_reaches_its_end(case):
    replay, trace, naive = case
    assert replay.n_events == len(trace.events) == len(naive) - 1 > 0


def test_state_at_equals_naive_replay_at_every_position(case):
    replay, _, naive = case
    for position, expected in enumerate(naive):
        assert state_at(replay.index, position) == expected, position


def test_applying_every_event_from_the_start_equals_naive_replay(case):
    replay, _, naive = case
    state = initial_state(replay.index)
    assert state == naive[0]
    for i in range(replay.n_events):
        apply(replay.index, state, i)
        assert state == naive[i + 1], i


def test_seek_forward_through_every_position_equals_naive_replay(case):
    replay, _, naive = case
    for position, expected in enumerate(naive):
        assert replay.seek(position) == expected, position
        assert replay.position == position


def test_seek_backward_through_every_position_equals_naive_replay(case):
    replay, _, naive = case
    for position in reversed(range(len(naive))):
        assert replay.seek(position) == naive[position], position


def test_seek_in_random_order_equals_naive_replay(case):
    replay, _, naive = case
    positions = list(range(len(naive))) * 2
    random.Random(7).shuffle(positions)
    for position in positions:
        assert replay.seek(position) == naive[position], position


def test_seek_with_tiny_checkpoint_spacing_equals_naive_replay(case, monkeypatch):
    monkeypatch.setattr(replay_module, "CHECKPOINT_EVERY", 5)
    replay, _, naive = case
    replay = Replay(replay.index)
    positions = list(range(len(naive)))
    random.Random(3).shuffle(positions)
    for position in positions[:300]:
        assert replay.seek(position) == naive[position], position


@pytest.mark.parametrize("name", ["decode_prefetch", "ring_attention", "deadlock", "truncated"])
def test_random_seek_sequences_equal_naive_replay(traces, name):
    path, _, naive = traces[name]
    replay = Replay.open(path)
    n = replay.n_events

    @settings(max_examples=cases(60), deadline=None)
    @given(st.lists(st.integers(min_value=-20, max_value=n + 20), min_size=1, max_size=40))
    def check(positions):
        for position in positions:
            clamped = max(0, min(position, n))
            assert replay.seek(position) == naive[clamped]
            assert replay.position == clamped

    check()


@pytest.mark.parametrize("name", ["prefill", "ring_attention"])
def test_random_step_sequences_equal_naive_replay(traces, name):
    path, _, naive = traces[name]
    replay = Replay.open(path)
    n = replay.n_events

    @settings(max_examples=cases(60), deadline=None)
    @given(
        st.integers(min_value=0, max_value=n),
        st.lists(st.integers(min_value=-600, max_value=600), min_size=1, max_size=30),
    )
    def check(start, steps):
        replay.seek(start)
        for n_steps in steps:
            expected = max(0, min(replay.position + n_steps, n))
            assert replay.step(n_steps) == naive[expected]

    check()


def test_stepping_back_undoes_stepping_forward(case):
    replay, _, _ = case
    for start in range(0, replay.n_events + 1, 7):
        before = replay.seek(start).copy()
        for n in (1, 2, 255, 256, 257, 600):
            replay.seek(start)
            moved = replay.step(n).position - start
            assert replay.step(-moved) == before


def test_step_one_at_a_time_forward_then_backward_retraces_the_states(case):
    replay, _, naive = case
    replay.seek(0)
    for position in range(1, len(naive)):
        assert replay.step() == naive[position]
    assert replay.step() == naive[-1]  # at the end already
    for position in reversed(range(len(naive) - 1)):
        assert replay.step(-1) == naive[position]
    assert replay.step(-1) == naive[0]


def test_seek_clamps_to_the_trace(case):
    replay, _, naive = case
    assert replay.seek(-5) == naive[0] and replay.position == 0
    assert replay.seek(replay.n_events + 10) == naive[-1]
    assert replay.position == replay.n_events
    replay.seek(3)
    assert replay.step(-10).position == 0
    assert replay.step(10**9).position == replay.n_events


def test_a_state_returned_earlier_is_not_changed_by_moving_on(case):
    replay, _, naive = case
    state = replay.seek(2)
    replay.step(1)
    replay.step(40)
    replay.seek(replay.n_events)
    assert state == naive[2]


def test_seek_time_goes_just_after_the_last_event_at_or_before_the_cycle(case):
    replay, trace, _ = case
    times = [record[1] for record in trace.events]
    for cycle in sorted({-1, 0, *times[::5], times[-1], times[-1] + 1}):
        expected = sum(1 for t in times if t <= cycle)
        assert replay.seek_time(cycle).position == expected
        assert replay.time == (times[expected - 1] if expected else 0)


def test_time_is_that_of_the_current_event(case):
    replay, trace, _ = case
    for position in (1, replay.n_events // 2, replay.n_events):
        replay.seek(position)
        assert replay.time == trace.events[position - 1][1]


def test_deadlocked_run_ends_with_both_pes_deadlocked_on_their_receives(traces):
    replay = Replay.open(traces["deadlock"][0])
    assert replay.status == "deadlock"
    end = replay.seek(replay.n_events)
    # Futures 0 and 1 are the tile loads; 2 and 3 the receives that never come.
    assert [(p.status, p.future) for p in end.pes] == [("deadlocked", 2), ("deadlocked", 3)]
    assert end.live == {2: 4, 3: 4}  # both waited, never resolved
    before = replay.seek(replay.n_events - 2)
    assert [(p.status, p.future) for p in before.pes] == [("stalled", 2), ("stalled", 3)]


def test_errored_run_ends_with_the_failing_pe_in_error(traces):
    replay = Replay.open(traces["error"][0])
    assert replay.status == "error"
    end = replay.seek(replay.n_events)
    assert end.pes[1].status == "error"
    assert end.pes[0].status == "running"


def test_truncated_trace_opens_with_status_truncated_and_a_consistent_end(traces):
    path, trace, naive = traces["truncated"]
    whole = Replay.open(traces["decode_prefetch"][0])
    replay = Replay.open(path)
    assert trace.truncated and replay.status == "truncated"
    assert 0 < replay.n_events < whole.n_events
    assert replay.end_time == trace.events[-1][1]
    # Up to the cut, the truncated trace replays exactly like the whole one, except
    # for waits whose end was cut off: those still block at the end.
    for position in range(0, replay.n_events + 1, 11):
        cut, full = replay.seek(position), whole.seek(position)
        assert cut.live == full.live and cut.channels == full.channels
        assert [p.scratch for p in cut.pes] == [p.scratch for p in full.pes]
    assert replay.seek(replay.n_events) == naive[-1]


# 1 byte off cuts inside the footer (as 2, 3 or 17 would: the same 2,076 events, truncated
# at the same offset); 500, 4001 and 9000 cut inside events further and further back.
@pytest.mark.parametrize("cut", [1, 500, 4001, 9000])
def test_trace_cut_anywhere_opens_and_replays_consistently(tmp_path, traces, cut):
    whole = traces["ring_attention"][0].read_bytes()
    path = tmp_path / "cut.kbt"
    path.write_bytes(whole[:-cut])
    replay = Replay.open(path)
    naive = naive_states(read_trace(path))
    assert replay.status == "truncated"
    assert replay.n_events == len(naive) - 1 > 0
    for position in range(len(naive)):
        assert replay.seek(position) == naive[position]


@pytest.mark.parametrize("keep", [0, 1, 40])
def test_trace_cut_inside_its_header_opens_empty(tmp_path, traces, keep):
    path = tmp_path / "cut.kbt"
    path.write_bytes(traces["decode_prefetch"][0].read_bytes()[:keep])
    replay = Replay.open(path)
    assert replay.status == "truncated"
    assert replay.n_events == 0 and replay.end_time == 0
    assert replay.seek(5).position == 0 and replay.step(-1).position == 0
    assert replay.state.live == {} and replay.continue_() is None
