"""Re-timing adds a run of work steps at once: the same lengths as step by step, in any order."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from _shared_fuzz import cases
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.config import HardwareConfig
from emulator.kernel.runner import run_kernel
from emulator.memory import Memory
from kbdebug.analysis import retime
from kbdebug.analysis.model import BARRIER, COMPUTE, OPAQUE, Program, build_model
from kbdebug.analysis.retime import _put
from kbdebug.replay import Replay

TRACES = ("flawed_prefetch", "ring_attention", "gemm_composite", "prefill")


def page_walk(tl, idx_ptr, data_ptr, n):
    """Reads each tile's row from a table on the host: a barrier per tile."""
    for i in range(n):
        with tl.scope():
            entry = tl.wait(tl.load_async(idx_ptr + 8 * i, (1,), "i64"))
            row = int(entry.data[0])
            x = tl.wait(tl.load_async(data_ptr + row * 256, (8, 16), "f16"))
            tl.exp(x)


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> list[Program]:
    from test_ui_traces import trace

    paths = [trace(name) for name in TRACES]
    # More host reads than the bound's first room for buckets (64).
    memory = Memory(size_bytes=1 << 16)
    idx = memory.put(np.arange(100, dtype=np.int64) % 7)
    data = memory.put(np.ones((7 * 8, 16), np.float16))
    paths.append(str(tmp_path_factory.mktemp("walk") / "walk.kbt"))
    run_kernel(page_walk, (idx, data, 100), (1,), memory, HardwareConfig(), trace=paths[-1])
    out = []
    for path in paths:
        model = build_model(Replay.open(path, cache=False).index)
        out.extend(model.programs.values())
    assert sum(k == BARRIER for k in out[-1].kind) == 100
    return out


def one_at_a_time(prog: Program) -> Program:
    """A copy of ``prog`` that sees no runs of work steps (each step is its own next
    non-work step): re-timing it meets every step alone, as before runs were added up."""
    copy = dataclasses.replace(prog)
    work_before, _ = prog._work_runs
    copy.__dict__["_work_runs"] = (work_before, list(range(len(prog) + 1)))
    return copy


def step_by_step(prog: Program, order) -> int:
    return one_at_a_time(prog).simulate(order)


def test_recorded_order_gives_the_same_length_either_way(programs):
    for prog in programs:
        assert prog.simulate(range(len(prog))) == step_by_step(prog, range(len(prog)))


@settings(max_examples=cases(60), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), moves=st.integers(1, 40), drop=st.booleans())
def test_any_order_gives_the_same_length_either_way(programs, seed, moves, drop):
    # Orders like a finding's fix: the recorded one with some steps moved (and dropped).
    rng = random.Random(seed)
    for prog in programs:
        order = list(range(len(prog)))
        for _ in range(moves):
            s = order.pop(rng.randrange(len(order)))
            order.insert(rng.randrange(len(order) + 1), s)
        if drop:
            del order[rng.randrange(len(order))]
        assert prog.simulate(order) == step_by_step(prog, order), prog.pe


def test_the_bound_is_the_same_either_way(programs, monkeypatch):
    fast = [(prog.bound(), dict(prog.earliest)) for prog in programs]
    runs = retime._bound_runs

    def none(prog, cycles):
        work_before, _ = runs(prog, cycles)
        return work_before, list(range(len(prog) + 1))

    monkeypatch.setattr(retime, "_bound_runs", none)
    assert [(prog.bound(), dict(prog.earliest)) for prog in programs] == fast


def test_runs_of_work_cover_most_steps(programs):
    # What makes it faster: in these kernels most steps are work (compute or opaque),
    # in long runs, each re-timed at once.
    prog = max(programs, key=len)
    work = [kind in (COMPUTE, OPAQUE) for kind in prog.kind]
    runs = sum(1 for s in range(len(prog)) if work[s] and (s == 0 or not work[s - 1]))
    assert runs < len(prog) / 2


def test_the_bound_keeps_every_bucket_as_its_room_grows():
    values = np.empty(2)
    expected = []
    for i in range(200):
        values = _put(values, i, float(i) * 1.5)
        expected.append(float(i) * 1.5)
    assert values[:200].tolist() == expected
