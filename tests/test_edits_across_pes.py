"""One line's edit re-timed on every PE that runs it, and receive waits of one step
moved together, on kernels written as a user would.

``ring_two_early``: a ring whose PEs take their neighbours' blocks from both sides each
step and wait on both receives before work that needs neither (the fix: both waits
below that work). ``pipe_store_waited``: a 4-stage pipeline whose stages wait on each
micro-batch's saved activation before sending it on (the fix: no wait; the kernel's end
drains the stores); every stage waits on its neighbour, so one stage's fix alone gains
little. Each finding names the line, holds on every PE, saves what the fixed twin
measures, and the twin (which never ends below the buggy run's bound) has none.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from emulator import HardwareConfig, Memory, run_kernel
from kbdebug.analysis import Analysis
from kbdebug.analysis.model import build_model, launch_efficiency
from kbdebug.replay import Replay

R, C = 32, 128
MB, D = 64, 64
ACT_BYTES = MB * D * 2


def ring_two_early(tl, x_ptr, w_ptr, out_ptr, steps, tail=0):
    """Each step: pass the block both ways, wait on both neighbours', then work (PE 0
    then does ``tail`` more steps of work on its own)."""
    pid = tl.program_id(0)
    x = tl.wait(tl.load_async(x_ptr + pid * R * C * 4, (R, C), "f32"))
    w = tl.wait(tl.load_async(w_ptr, (C, C), "f32"))
    acc = tl.zeros((R, C), "f32")
    cur = x
    sends = []
    for _ in range(steps):
        sends.append(tl.send("right", cur))
        sends.append(tl.send("left", cur))
        from_left = tl.wait(tl.recv_async("left", (R, C), "f32"))  # mark: first
        from_right = tl.wait(tl.recv_async("right", (R, C), "f32"))  # mark: second
        acc = acc + tl.dot(x, w)  # needs neither message
        cur = from_left + from_right
        acc = acc + cur
    for _ in range(tail if pid == 0 else 0):
        acc = acc + tl.dot(x, w)
    for s in sends:
        tl.wait(s)
    tl.wait(tl.store(out_ptr + pid * R * C * 4, acc))


def ring_two_late(tl, x_ptr, w_ptr, out_ptr, steps):
    """The same ring, both receives waited below the work that needs neither."""
    pid = tl.program_id(0)
    x = tl.wait(tl.load_async(x_ptr + pid * R * C * 4, (R, C), "f32"))
    w = tl.wait(tl.load_async(w_ptr, (C, C), "f32"))
    acc = tl.zeros((R, C), "f32")
    cur = x
    sends = []
    for _ in range(steps):
        sends.append(tl.send("right", cur))
        sends.append(tl.send("left", cur))
        left = tl.recv_async("left", (R, C), "f32")
        right = tl.recv_async("right", (R, C), "f32")
        acc = acc + tl.dot(x, w)
        cur = tl.wait(left) + tl.wait(right)
        acc = acc + cur
    for s in sends:
        tl.wait(s)
    tl.wait(tl.store(out_ptr + pid * R * C * 4, acc))


def pipe_store_waited(tl, x_ptr, w_ptr, act_ptr, n_micro):
    """A stage: each micro-batch's activation saved, its store waited, then sent on."""
    pid, n = tl.program_id(0), tl.num_programs(0)
    w = tl.wait(tl.load_async(w_ptr + pid * D * D * 2, (D, D), "f16"))
    zero = tl.zeros((MB, D), "f32")
    sends = []
    for m in range(n_micro):
        if pid == 0:
            x = tl.wait(tl.load_async(x_ptr + m * ACT_BYTES, (MB, D), "f16"))
        else:
            x = tl.wait(tl.recv_async("left", (MB, D), "f16"))
        h = tl.maximum(tl.dot(x, w), zero).to("f16")
        st = tl.store(act_ptr + (pid * n_micro + m) * ACT_BYTES, h)
        tl.wait(st)  # mark: store-wait
        if pid + 1 < n:
            sends.append(tl.send("right", h))
    for s in sends:
        tl.wait(s)


def pipe_store_drained(tl, x_ptr, w_ptr, act_ptr, n_micro):
    """The same stage leaving its stores to drain at the kernel's end."""
    pid, n = tl.program_id(0), tl.num_programs(0)
    w = tl.wait(tl.load_async(w_ptr + pid * D * D * 2, (D, D), "f16"))
    zero = tl.zeros((MB, D), "f32")
    sends = []
    for m in range(n_micro):
        if pid == 0:
            x = tl.wait(tl.load_async(x_ptr + m * ACT_BYTES, (MB, D), "f16"))
        else:
            x = tl.wait(tl.recv_async("left", (MB, D), "f16"))
        h = tl.maximum(tl.dot(x, w), zero).to("f16")
        tl.store(act_ptr + (pid * n_micro + m) * ACT_BYTES, h)
        if pid + 1 < n:
            sends.append(tl.send("right", h))
    for s in sends:
        tl.wait(s)


def line_of(kernel, mark: str) -> int:
    """The source line of ``kernel`` carrying ``# mark: {mark}``."""
    lines, first = inspect.getsourcelines(kernel)
    (i,) = [i for i, text in enumerate(lines) if f"# mark: {mark}" in text]
    return first + i


def run_ring(kernel, path, pes: int = 8, steps: int = 6, *tail: int):
    memory = Memory(size_bytes=1 << 22)
    x_ptr = memory.put(np.ones((pes * R, C), np.float32))
    w_ptr = memory.put(np.eye(C, dtype=np.float32))
    out_ptr = memory.alloc(pes * R * C * 4)
    config = HardwareConfig(mesh_rows=1, mesh_cols=pes, mesh_wrap=True)
    args = (x_ptr, w_ptr, out_ptr, steps, *tail)
    run_kernel(kernel, args, (pes,), memory, config, trace=path)
    return Replay.open(path, cache=False)


def run_pipe(kernel, path, pes: int = 4, n_micro: int = 8):
    memory = Memory(size_bytes=1 << 22)
    rng = np.random.default_rng(3)
    x_ptr = memory.put((rng.standard_normal((n_micro * MB, D)) * 0.5).astype(np.float16))
    w_ptr = memory.put((rng.standard_normal((pes * D, D)) * 0.2).astype(np.float16))
    act_ptr = memory.alloc(pes * n_micro * ACT_BYTES)
    config = HardwareConfig(mesh_rows=1, mesh_cols=pes)
    run_kernel(kernel, (x_ptr, w_ptr, act_ptr, n_micro), (pes,), memory, config, trace=path)
    return Replay.open(path, cache=False)


# name: (buggy kernel, fixed twin, runner, rule, marked line, other marked lines)
PAIRS = {
    "ring-two-receives": (ring_two_early, ring_two_late, run_ring, "KB109", "first", ("second",)),
    "pipeline-store-wait": (
        pipe_store_waited,
        pipe_store_drained,
        run_pipe,
        "KB108",
        "store-wait",
        (),
    ),
}


@pytest.fixture(scope="module", params=sorted(PAIRS))
def pair(request, tmp_path_factory):
    """(the pair's entry in PAIRS, buggy run, fixed twin's run)."""
    entry = PAIRS[request.param]
    buggy, fixed, run = entry[:3]
    root = tmp_path_factory.mktemp(request.param)
    return entry, run(buggy, root / "buggy.kbt"), run(fixed, root / "fixed.kbt")


def _span(replay: Replay) -> int:
    model = build_model(replay.index)
    return model.end - model.start


def test_one_finding_names_the_lines_on_every_pe_with_the_measured_saving(pair):
    (buggy, _, _, rule, mark, others), bug, fixed = pair
    found = [f for f in Analysis(bug).findings if f.rule == rule]
    assert len(found) == 1, [(f.rule, f.loc.line, f.pes, f.saving) for f in found]
    (f,) = found
    assert f.loc.line == line_of(buggy, mark)
    assert sorted(x.line for x in f.also) == sorted(line_of(buggy, m) for m in others)
    # The line's edit holds on every PE that runs it, not only where it pays alone.
    assert f.pes == tuple(sorted(build_model(bug.index).programs)), f.pes
    measured = _span(bug) - _span(fixed)
    assert measured > 0
    assert abs(f.saving - measured) <= 0.2 * measured, (f.saving, measured)


def test_the_fixed_twin_has_no_finding_at_the_line_and_stays_above_the_bound(pair):
    (buggy, fixed_kernel, _, rule, _, _), bug, fixed = pair
    assert not [f for f in Analysis(fixed).findings if f.rule == rule]
    bound, _ = launch_efficiency(build_model(bug.index).bounds())
    assert _span(fixed) >= bound


def test_a_long_pe_holds_the_line_whose_launch_saving_is_below_its_own_floor(tmp_path):
    """PE 0 works on alone long after the ring (its 3 % floor exceeds what the line saves);
    the line's edit still changes it, so the one finding holds there too."""
    bug = run_ring(ring_two_early, tmp_path / "long.kbt", 8, 6, 60)
    model = build_model(bug.index)
    (f,) = [f for f in Analysis(bug).findings if f.rule == "KB109"]
    assert f.loc.line == line_of(ring_two_early, "first")
    assert f.saving < 0.03 * model.programs[0].achieved  # below PE 0's own floor
    assert f.pes == tuple(sorted(model.programs)), f.pes
