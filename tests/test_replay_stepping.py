"""gdb's next, step, finish and until over a recorded kernel with a loop and a helper."""

from __future__ import annotations

import numpy as np
import pytest
from kernels_stepping import chained, line, nested, record

from emulator.trace.schema import Kind
from kbdebug.replay import Replay
from kbdebug.replay.stepping import (
    Place,
    finish_stop,
    next_stop,
    step_stop,
    stops_of,
    until_stop,
)


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    return Replay.open(str(record(tmp_path_factory.mktemp("stepping") / "looped.kbt")))


@pytest.fixture(scope="module")
def stops(replay):
    return stops_of(replay.index, 0)


def shown(replay, stops, place: Place):
    """(line, function) a place shows: a helper's stop seen from the kernel is the
    kernel's calling line; the kernel's end is ("end", name)."""
    k = stops.stop_of(place.event)
    loc = replay.index.loc(int(replay.index.columns.loc[place.event]))
    if loc is None:
        return ("end", stops.function(place))
    if place.from_kernel and loc.caller is not None:
        return (loc.caller.line, stops.function(place))
    assert int(stops.lines[k]) == loc.line
    return (loc.line, stops.function(place))


def walk(replay, stops, move, start=0, direction=1, from_kernel=False, limit=60):
    """What ``move`` shows, pressed again and again from ``start`` until it finds nothing."""
    seen, position = [], start
    for _ in range(limit):
        place = move(stops, position, direction, from_kernel)
        if place is None:
            return seen
        seen.append(shown(replay, stops, place))
        position, from_kernel = place.event + 1, place.from_kernel
    raise AssertionError("did not stop")


def first_at(replay, stops, name: str, occurrence: int = 0) -> int:
    """The position just after the ``occurrence``-th stop on the line marked ``name``."""
    events = [int(e) for e in stops.events if int(stops.lines[stops.stop_of(e)]) == line(name)]
    return events[occurrence] + 1


KERNEL = "looped"
STEP = [(line("issue"), KERNEL), (line("wait"), KERNEL), (line("call"), KERNEL)]


def test_next_in_the_kernel_steps_over_each_helper_call_onto_its_calling_line(replay, stops):
    assert walk(replay, stops, next_stop) == [
        (line("def"), KERNEL),  # the kernel's start
        (line("first"), KERNEL),  # the blocking load's issue and its wait: one line
        *STEP * 3,
        (line("after"), KERNEL),
        ("end", KERNEL),
    ]


def test_reverse_next_retraces_next(replay, stops):
    forward = walk(replay, stops, next_stop)
    end = int(stops.events[-1]) + 1
    assert walk(replay, stops, next_stop, end, -1) == forward[-2::-1]


def test_step_goes_into_the_helper(replay, stops):
    places = walk(replay, stops, step_stop)
    assert places[3:8] == [
        (line("issue"), KERNEL),
        (line("wait"), KERNEL),
        (line("helper-exp"), "scaled"),
        (line("helper-dot"), "scaled"),
        (line("issue"), KERNEL),
    ]
    assert len(places) == len(stops.events)


def test_next_inside_the_helper_stays_in_it_then_returns_to_the_calling_line(replay, stops):
    exp = first_at(replay, stops, "helper-exp")
    dot = next_stop(stops, exp)
    assert shown(replay, stops, dot) == (line("helper-dot"), "scaled")
    back = next_stop(stops, dot.event + 1)
    # Out of the helper: the same stop, seen from the kernel (the call, done).
    assert back == Place(dot.event, True)
    assert shown(replay, stops, back) == (line("call"), KERNEL)
    assert shown(replay, stops, next_stop(stops, back.event + 1, 1, True)) == STEP[0]


def test_finish_returns_to_the_calling_line_and_reverse_finish_to_before_the_call(replay, stops):
    exp = first_at(replay, stops, "helper-exp")
    out = finish_stop(stops, exp)
    assert shown(replay, stops, out) == (line("call"), KERNEL) and out.event > exp - 1
    back = finish_stop(stops, exp, -1)
    assert shown(replay, stops, back) == (line("wait"), KERNEL) and back.event < exp - 1


def test_finish_in_the_kernel_has_nowhere_to_go(replay, stops):
    wait = first_at(replay, stops, "wait")
    assert finish_stop(stops, wait) is None
    assert finish_stop(stops, wait, -1) is None
    # A helper's stop seen from the kernel is the kernel's: nothing to finish either.
    call = next_stop(stops, wait)
    assert finish_stop(stops, call.event + 1, 1, call.from_kernel) is None


def test_until_at_the_bottom_of_the_loop_leaves_it(replay, stops):
    call = next_stop(stops, first_at(replay, stops, "wait"))
    assert shown(replay, stops, call) == (line("call"), KERNEL)
    out = until_stop(stops, call.event + 1, 1, True)
    assert shown(replay, stops, out) == (line("after"), KERNEL)


def test_reverse_until_at_the_top_of_the_loop_leaves_it_backward(replay, stops):
    last_issue = first_at(replay, stops, "issue", occurrence=2)
    assert shown(replay, stops, until_stop(stops, last_issue, -1)) == (line("first"), KERNEL)


def test_until_at_the_top_of_the_loop_goes_to_the_next_line_first(replay, stops):
    assert shown(replay, stops, until_stop(stops, first_at(replay, stops, "issue"))) == STEP[1]


def test_until_in_the_helper_returns_to_the_calling_line_after_its_last_line(replay, stops):
    dot = first_at(replay, stops, "helper-dot")
    assert shown(replay, stops, until_stop(stops, dot)) == (line("call"), KERNEL)


def test_nothing_before_the_start_or_after_the_end(replay, stops):
    end = int(stops.events[-1]) + 1
    for move in (next_stop, step_stop, until_stop):
        assert move(stops, end) is None
        assert move(stops, 0, -1) is None


def test_one_line_calling_the_helper_again_and_again_is_a_step_per_call(tmp_path):
    replay = Replay.open(str(record(tmp_path / "chained.kbt", 3, chained)))
    stops = stops_of(replay.index, 0)
    call = (line("chained-call"), "chained")
    assert walk(replay, stops, next_stop) == [
        (line("chained-def"), "chained"),
        (line("chained-load"), "chained"),
        call,
        call,
        call,
        ("end", "chained"),
    ]


def test_next_stops_once_per_run_of_a_line_on_its_last_tl_call(replay, stops):
    # The blocking load's line makes two tl calls (issue, wait): next lands on the wait.
    start = next_stop(stops, 0)
    load = next_stop(stops, start.event + 1)
    assert shown(replay, stops, load) == (line("first"), KERNEL)
    assert int(replay.index.columns.kind[load.event]) == int(Kind.WAIT_BEGIN)
    assert shown(replay, stops, next_stop(stops, load.event + 1)) == STEP[0]


@pytest.fixture(scope="module")
def nested_run(tmp_path_factory):
    replay = Replay.open(str(record(tmp_path_factory.mktemp("nested") / "n.kbt", 3, nested)))
    return replay, stops_of(replay.index, 0)


def test_next_at_a_nested_helpers_last_call_returns_to_its_caller_not_its_next_call(nested_run):
    replay, stops = nested_run
    # The second pair() call, from outer's loop: step into it, then next past its last call.
    pairs = [int(e) for e in stops.events if int(stops.lines[stops.stop_of(e)]) == line("pair")]
    assert len(pairs) == 6  # three calls, two loads each
    last_of_second = pairs[3] + 1
    back = next_stop(stops, last_of_second)
    assert shown(replay, stops, back) == (line("outer-work"), "outer")
    assert finish_stop(stops, last_of_second) == back
    # The first call (before outer's loop): back on outer's first wait, not in pair again.
    first_back = next_stop(stops, pairs[1] + 1)
    assert shown(replay, stops, first_back) == (line("outer-wait-k"), "outer")
    # Backward out of the call: outer's stop before it.
    assert shown(replay, stops, next_stop(stops, pairs[2] + 1, -1)) == (
        line("outer-wait-v"),
        "outer",
    )


def test_next_in_a_helper_stops_once_on_a_line_of_several_tl_calls(nested_run):
    replay, stops = nested_run
    wait_k = first_at(replay, stops, "outer-wait-k")
    walked = walk(replay, stops, next_stop, wait_k)
    # outer's lines, each once per iteration (dot and exp on one line: one stop), the
    # pair() call in between stepped over; out of outer, the kernel's line, done.
    work = (line("outer-work"), "outer")
    k, v = (line("outer-wait-k"), "outer"), (line("outer-wait-v"), "outer")
    assert walked == [
        v,
        work,
        k,
        v,
        work,
        k,
        v,
        work,
        (line("nested-call"), "nested"),
        ("end", "nested"),
    ]


def test_a_line_runs_again_only_where_its_calls_repeat_whole():
    from kbdebug.replay.stepping import _line_ends

    def sig(kind, op):
        return (int(kind) << 32) | (op + 1)

    mul, add, load, wait = (
        sig(Kind.ISSUE, 1),
        sig(Kind.ISSUE, 2),
        sig(Kind.ISSUE, 3),
        sig(Kind.WAIT_BEGIN, -1),
    )
    ends = _line_ends(np.array([5, 5, 5, 6]), np.array([mul, mul, add, load]))
    assert ends.tolist() == [False, False, True, True]  # a * b + c * d: one run
    ends = _line_ends(np.array([5, 5, 5, 5, 6]), np.array([load, wait, load, wait, mul]))
    assert ends.tolist() == [False, True, False, True, True]  # a loop over x = tl.load(...)
