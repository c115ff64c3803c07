"""The emulator's fast paths change nothing a user sees.

- A Channel (a FIFO modelled without simpy.Resource) gives the exact (event,
  cycle) log, same-cycle order included, of the simpy.Resource channel it
  replaced, under random command streams from several submitters.
- A run without a recorder has the result of the same run with one.
- Source locations of tl calls stay right when one line holds several calls
  and when a helper is called from several kernel lines.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import simpy

from emulator import HardwareConfig, Memory, MemoryRecorder, run_kernel
from emulator.hardware.channel import Channel
from emulator.scenarios import SCENARIOS, parameters
from emulator.trace.schema import Kind


class ResourceChannel:
    """The channel as it was before the fast path: a simpy.Resource of capacity 1."""

    def __init__(self, env: simpy.Environment, recorder, *, cid: int, pe: int, **_: Any):
        self.env, self.recorder, self.cid, self.pe = env, recorder, cid, pe
        self.resource = simpy.Resource(env, capacity=1)
        self.busy_until = 0
        self.busy_cycles = 0

    def submit(self, cmd, hold, latency=0, *, future=-1, on_grant=None, on_complete=None):
        env, emit = self.env, self.recorder.emit
        hold = max(int(hold), 1)
        self.busy_until = max(self.busy_until, env.now) + hold
        emit(Kind.CHAN_REQUEST, env.now, self.pe, self.cid, cmd)
        request = self.resource.request()

        def granted(_=None):
            emit(Kind.CHAN_GRANT, env.now, self.pe, self.cid, cmd)
            value = on_grant() if on_grant is not None else None
            hold_event = env.timeout(hold, value)
            hold_event.callbacks.append(released)
            return hold_event

        def released(hold_event):
            self.busy_cycles += hold
            emit(Kind.CHAN_RELEASE, env.now, self.pe, self.cid, cmd)
            self.resource.release(request)
            if latency:
                env.timeout(latency, hold_event.value).callbacks.append(completed)
            else:
                completed(hold_event)

        def completed(event):
            value = event.value
            if on_complete is not None:
                value = on_complete(value)
            emit(Kind.COMPLETE, env.now, self.pe, cmd, future)
            if done is not None:
                done.succeed(value)

        done = None
        if request.triggered:
            if not latency and on_complete is None:
                return granted()
            done = env.event()
            granted()
            return done
        done = env.event()
        request.callbacks.append(granted)
        return done


def random_run(channel_class: Callable[..., Any], seed: int) -> list[tuple[Any, ...]]:
    """Several submitters issue random commands to a few channels; everything they see
    (events, grant and completion callbacks, wake-ups) in order, with its cycle."""
    rng = random.Random(seed)
    env = simpy.Environment()
    rec = MemoryRecorder()
    channels = [
        channel_class(env, rec, cid=c, pe=0, kind="dma_read", index=c, name=f"c{c}")
        for c in range(rng.randint(1, 3))
    ]
    seen: list[tuple[Any, ...]] = []
    cmds = iter(range(10_000))

    def submitter(who: int):
        for _ in range(rng.randint(1, 12)):
            gap = rng.choice((0, 0, 0, 1, 2, 5))
            if gap:
                yield env.timeout(gap)
            cmd = next(cmds)
            hooks = rng.random()
            event = rng.choice(channels).submit(
                cmd,
                rng.choice((0, 1, 1, 2, 3, 7)),
                rng.choice((0, 0, 1, 4)),
                future=cmd if rng.random() < 0.5 else -1,
                on_grant=(lambda c=cmd: seen.append(("grant", c, env.now)) or c)
                if hooks < 0.5
                else None,
                on_complete=(lambda v, c=cmd: seen.append(("land", c, v, env.now)) or v)
                if 0.25 < hooks < 0.75
                else None,
            )
            if rng.random() < 0.6:
                value = yield event
                seen.append(("woke", who, cmd, value, env.now))

    for who in range(rng.randint(1, 4)):
        env.process(submitter(who))
    env.run()
    seen.extend(("busy", c.cid, c.busy_cycles, c.busy_until) for c in channels)
    return [(*e[:1], *e[1:]) for e in rec.events] + seen


@pytest.mark.parametrize("block", range(4))
def test_channel_orders_same_cycle_events_as_the_simpy_resource_it_replaced(block):
    for seed in range(block * 100, block * 100 + 100):
        assert random_run(Channel, seed) == random_run(ResourceChannel, seed), f"seed {seed}"


def test_free_channel_grants_at_request_and_queued_command_at_release():
    env = simpy.Environment()
    rec = MemoryRecorder()
    channel = Channel(env, rec, cid=0, pe=0, kind="dma_read", index=0, name="r")
    first = channel.submit(0, 10, 5)
    second = channel.submit(1, 3)
    env.run()
    assert [(e[0].name, e[1], e[4] if e[0] != Kind.COMPLETE else e[3]) for e in rec.events] == [
        ("CHAN_REQUEST", 0, 0),
        ("CHAN_GRANT", 0, 0),
        ("CHAN_REQUEST", 0, 1),
        ("CHAN_RELEASE", 10, 0),
        ("CHAN_GRANT", 10, 1),
        ("CHAN_RELEASE", 13, 1),
        ("COMPLETE", 13, 1),
        ("COMPLETE", 15, 0),
    ]
    assert first.processed and second.processed
    assert channel.busy_cycles == 13


@pytest.fixture(scope="module")
def traced_and_untraced():
    results = {}
    for name in ("decode_prefetch", "prefill", "ring_attention", "gemm_composite"):
        builder = SCENARIOS[name]
        kwargs = {"n_tiles": 3} if "n_tiles" in parameters(name) else {}
        traced = builder(**kwargs).run(keep_events=True)
        untraced = builder(**kwargs).run()
        results[name] = (traced, untraced)
    return results


@pytest.mark.parametrize("name", ["decode_prefetch", "prefill", "ring_attention", "gemm_composite"])
def test_untraced_run_has_the_result_of_the_traced_run(traced_and_untraced, name):
    traced, untraced = traced_and_untraced[name]
    assert traced.events
    assert untraced.events is None
    assert untraced.end_time == traced.end_time
    assert untraced.op_log == traced.op_log
    assert untraced.metrics == traced.metrics
    assert untraced.busy_cycles == traced.busy_cycles
    assert untraced.scratch_peak == traced.scratch_peak
    assert untraced.pe_end_times == traced.pe_end_times


def _two_calls_on_one_line(tl, ptr):
    c = tl.exp(tl.exp(tl.load(ptr, (4,), "f32")))
    tl.store(ptr, c)


def _helper(tl, x):
    return tl.exp(x)


def _helper_from_two_lines(tl, ptr):
    a = tl.load(ptr, (4,), "f32")
    b = _helper(tl, a)
    c = _helper(tl, b)
    tl.store(ptr, c)


def _locs(kernel):
    memory = Memory(1 << 12)
    memory.write(0, np.ones(4, np.float32))
    result = run_kernel(kernel, (0,), (1,), memory, HardwareConfig(), keep_events=True)
    return [
        (e[4], e[11].line, e[11].caller.line if e[11].caller else None)
        for e in result.events
        if e[0] == Kind.ISSUE
    ]


def test_calls_on_one_line_share_its_location():
    first = _two_calls_on_one_line.__code__.co_firstlineno
    assert _locs(_two_calls_on_one_line) == [
        ("load", first + 1, None),
        ("exp", first + 1, None),
        ("exp", first + 1, None),
        ("store", first + 2, None),
    ]


def test_helper_called_from_two_lines_records_each_calling_line():
    helper_line = _helper.__code__.co_firstlineno + 1
    first = _helper_from_two_lines.__code__.co_firstlineno
    assert _locs(_helper_from_two_lines) == [
        ("load", first + 1, None),
        ("exp", helper_line, first + 2),
        ("exp", helper_line, first + 3),
        ("store", first + 4, None),
    ]


def _two_steps(tl, x):
    y = x * 2.0
    return tl.maximum(y, 0.0)


def _steps_from_two_lines_twice(tl, ptr):
    a = tl.load(ptr, (4,), "f32")
    for _ in range(2):
        a = _two_steps(tl, a)
        a = _two_steps(tl, a)


def test_a_helper_called_again_from_each_line_keeps_each_calling_line():
    """Locs of a helper's calls are remembered per kernel line calling it: the second
    round of calls must not take the first round's (or the other line's) locs."""
    mul = _two_steps.__code__.co_firstlineno + 1
    first = _steps_from_two_lines_twice.__code__.co_firstlineno
    one_round = [
        ("mul", mul, first + 3),
        ("maximum", mul + 1, first + 3),
        ("mul", mul, first + 4),
        ("maximum", mul + 1, first + 4),
    ]
    assert _locs(_steps_from_two_lines_twice)[1:] == one_round * 2


def _zeros_forever(tl):
    while True:
        yield tl.zeros((4,), "f32")


def _generator_resumed_from_two_lines(tl, ptr):
    gen = _zeros_forever(tl)
    next(gen)
    next(gen)
    next(gen)


def test_a_generator_helper_records_the_line_that_resumed_it():
    line = _zeros_forever.__code__.co_firstlineno + 2
    first = _generator_resumed_from_two_lines.__code__.co_firstlineno
    assert _locs(_generator_resumed_from_two_lines) == [
        ("zeros", line, first + 2),
        ("zeros", line, first + 3),
        ("zeros", line, first + 4),
    ]


def _two_computes(tl):
    tl.exp(tl.zeros((64,), "f32"))


def test_every_program_issues_its_first_command_before_the_clock_moves():
    config = HardwareConfig(mesh_cols=2)
    result = run_kernel(_two_computes, (), (2,), Memory(1 << 12), config, keep_events=True)
    times = [e[1] for e in result.events]
    assert times == sorted(times)
    first_issues = [(e[2], e[1]) for e in result.events if e[0] == Kind.ISSUE][:2]
    assert first_issues == [(0, 0), (1, 0)]
    assert result.pe_end_times == {0: 2, 1: 2}


def test_kernel_that_runs_alone_keeps_its_exact_log():
    """Compute commands with nothing else due are processed without a driver switch:
    the log is still request, grant, release, complete at the engine's cycles."""
    result = run_kernel(
        _two_computes, (), (1,), Memory(1 << 12), HardwareConfig(), keep_events=True
    )
    log = [(e[0].name, e[1]) for e in result.events if e[0] != Kind.KERNEL_START]
    assert log == [
        ("ISSUE", 0),
        ("OP_LOG", 0),
        ("CHAN_REQUEST", 0),
        ("CHAN_GRANT", 0),
        ("CHAN_RELEASE", 1),
        ("COMPLETE", 1),
        ("ISSUE", 1),
        ("OP_LOG", 1),
        ("CHAN_REQUEST", 1),
        ("CHAN_GRANT", 1),
        ("CHAN_RELEASE", 2),
        ("COMPLETE", 2),
        ("KERNEL_END", 2),
    ]


def _helper_loads(tl, ptr):
    return [tl.load(ptr + 4 * i, (1,), "f32") for i in range(2)]


def _comprehensions(tl, ptr):
    xs = [tl.exp(tl.load(ptr + 4 * i, (1,), "f32")) for i in range(2)]
    ys = _helper_loads(tl, ptr)
    tl.store(ptr, xs[0] + ys[0])


def _function_locs(kernel):
    memory = Memory(1 << 12)
    memory.write(0, np.ones(4, np.float32))
    result = run_kernel(kernel, (0,), (1,), memory, HardwareConfig(), keep_events=True)
    return [
        (e[4], e[11].line, e[11].function, e[11].caller.line if e[11].caller else None)
        for e in result.events
        if e[0] == Kind.ISSUE
    ]


def test_a_comprehension_s_calls_are_its_function_s_not_a_helper_s():
    """``[tl.load(...) for i in ...]`` in the kernel is the kernel's line (not a helper
    named <listcomp> called from that same line); in a helper, the helper's line with the
    kernel's calling line."""
    first = _comprehensions.__code__.co_firstlineno
    helper = _helper_loads.__code__.co_firstlineno + 1
    assert _function_locs(_comprehensions) == [
        ("load", first + 1, "_comprehensions", None),
        ("exp", first + 1, "_comprehensions", None),
        ("load", first + 1, "_comprehensions", None),
        ("exp", first + 1, "_comprehensions", None),
        ("load", helper, "_helper_loads", first + 2),
        ("load", helper, "_helper_loads", first + 2),
        ("add", first + 3, "_comprehensions", None),
        ("store", first + 3, "_comprehensions", None),
    ]
