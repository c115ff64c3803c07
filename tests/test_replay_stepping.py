"""gdb's next, step, finish and until over a recorded kernel with a loop and a helper."""

from __future__ import annotations

import pytest
from kernels_stepping import line, record

from kbdebug.replay import Replay
from kbdebug.replay.stepping import finish_stop, next_stop, step_stop, stops_of, until_stop


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    return Replay.open(str(record(tmp_path_factory.mktemp("stepping") / "looped.kbt")))


@pytest.fixture(scope="module")
def stops(replay):
    return stops_of(replay.index, 0)


def place(replay, event):
    """(line, function) of the stop at ``event``; the kernel's end is ("end", None)."""
    loc = replay.index.loc(int(replay.index.columns.loc[event]))
    return ("end", None) if loc is None else (loc.line, loc.function)


def walk(replay, stops, move, start, direction=1, limit=40):
    """The places ``move`` visits from position ``start`` until it finds nothing."""
    seen, position = [], start
    for _ in range(limit):
        event = move(stops, position, direction)
        if event is None:
            return seen
        seen.append(place(replay, event))
        position = event + 1
    raise AssertionError("did not stop")


def test_next_in_the_kernel_steps_over_the_helper(replay, stops):
    loop = [(line("issue"), "looped"), (line("wait"), "looped")]
    assert walk(replay, stops, next_stop, 0) == [
        (line("def"), "looped"),  # the kernel's start
        (line("first"), "looped"),  # the blocking load's issue
        (line("first"), "looped"),  # and its wait
        *loop * 3,
        (line("after"), "looped"),
        ("end", None),
    ]


def test_reverse_next_retraces_next(replay, stops):
    forward = walk(replay, stops, next_stop, 0)
    end = int(stops.events[-1]) + 1
    assert walk(replay, stops, next_stop, end, -1) == forward[-2::-1]


def test_step_goes_into_the_helper(replay, stops):
    places = walk(replay, stops, step_stop, 0)
    assert places[5:9] == [
        (line("helper-exp"), "scaled"),
        (line("helper-dot"), "scaled"),
        (line("issue"), "looped"),
        (line("wait"), "looped"),
    ]
    assert len(places) == len(stops.events)


def test_next_inside_the_helper_stays_in_it_then_returns_to_the_kernel(replay, stops):
    exp = stops.events[[place(replay, e) == (line("helper-exp"), "scaled") for e in stops.events]]
    first = int(exp[0])
    assert place(replay, next_stop(stops, first + 1)) == (line("helper-dot"), "scaled")
    dot = next_stop(stops, first + 1)
    assert place(replay, next_stop(stops, dot + 1)) == (line("issue"), "looped")


def test_finish_leaves_the_helper_for_the_callers_next_call_and_back(replay, stops):
    dot = next(int(e) for e in stops.events if place(replay, e)[0] == line("helper-dot"))
    out = finish_stop(stops, dot + 1)
    assert place(replay, out) == (line("issue"), "looped")
    back = finish_stop(stops, dot + 1, -1)
    assert place(replay, back) == (line("wait"), "looped")
    assert back < dot < out


def test_finish_in_the_kernel_has_nowhere_to_go(replay, stops):
    wait = next(int(e) for e in stops.events if place(replay, e)[0] == line("wait"))
    assert finish_stop(stops, wait + 1) is None
    assert finish_stop(stops, wait + 1, -1) is None
    assert not stops.in_helper(wait + 1)


def test_until_at_the_bottom_of_the_loop_leaves_it(replay, stops):
    wait = next(int(e) for e in stops.events if place(replay, e)[0] == line("wait"))
    out = until_stop(stops, wait + 1)
    assert place(replay, out) == (line("after"), "looped")


def test_reverse_until_at_the_top_of_the_loop_leaves_it_backward(replay, stops):
    issues = [int(e) for e in stops.events if place(replay, e)[0] == line("issue")]
    assert place(replay, until_stop(stops, issues[-1] + 1, -1)) == (line("first"), "looped")


def test_until_at_the_top_of_the_loop_goes_to_the_next_line_first(replay, stops):
    issue = next(int(e) for e in stops.events if place(replay, e)[0] == line("issue"))
    assert place(replay, until_stop(stops, issue + 1)) == (line("wait"), "looped")


def test_until_in_the_helper_returns_to_the_kernel_after_its_last_line(replay, stops):
    dot = next(int(e) for e in stops.events if place(replay, e)[0] == line("helper-dot"))
    assert place(replay, until_stop(stops, dot + 1)) == (line("issue"), "looped")


def test_nothing_before_the_start_or_after_the_end(replay, stops):
    end = int(stops.events[-1]) + 1
    for move in (next_stop, step_stop, until_stop):
        assert move(stops, end) is None
        assert move(stops, 0, -1) is None
