"""KB111 on a reduction chain over narrow links: moving the heavy PE's extra work to the
others makes the PEs upstream of it later, and the chain's serial part (receive, add,
send) follows them, so the estimate re-times the chain rather than each PE's end alone."""

from __future__ import annotations

import numpy as np
import pytest

from emulator import HardwareConfig, Memory, run_kernel
from kbdebug.analysis import Analysis
from kbdebug.replay import Replay

TILE = (64, 128)


def reduce_left(tl, x_ptr, w_ptr, out_ptr, counts):
    """Each PE sums ``counts[pe]`` products of its rows with W, one load at a time; the
    partial sums travel from the last PE down to PE 0, which stores the total."""
    pe, pes = tl.program_id(0), tl.num_programs(0)
    w = tl.wait(tl.load_async(w_ptr, (128, 128), "f16"))
    first = sum(counts[:pe])
    acc = tl.zeros(TILE, "f32")
    for i in range(first, first + counts[pe]):
        x = tl.wait(tl.load_async(x_ptr + i * 64 * 128 * 2, TILE, "f16"))
        acc = acc + tl.dot(x, w)
    if pe + 1 < pes:
        acc = acc + tl.wait(tl.recv_async("right", TILE, "f32"))
    if pe > 0:
        tl.wait(tl.send("left", acc))
    else:
        tl.wait(tl.store(out_ptr, acc))


def record(path, counts) -> Analysis:
    pes = len(counts)
    config = HardwareConfig(
        mesh_rows=1, mesh_cols=pes, gemm_macs_per_cycle=512, hbm_latency=100, ipcq_bytes_per_cycle=8
    )
    memory = Memory(size_bytes=1 << 20)
    rng = np.random.default_rng(11)
    x_ptr = memory.put((rng.standard_normal((sum(counts), *TILE)) * 0.1).astype(np.float16))
    w_ptr = memory.put((rng.standard_normal((128, 128)) * 0.1).astype(np.float16))
    out_ptr = memory.alloc(64 * 128 * 4)
    run_kernel(
        reduce_left, (x_ptr, w_ptr, out_ptr, tuple(counts)), (pes,), memory, config, trace=path
    )
    return Analysis(Replay.open(path, cache=False))


def end_of(analysis: Analysis) -> int:
    return max(b.end for b in analysis.bounds)


def balanced_end(analysis: Analysis) -> int:
    bound, _ = analysis.launch_efficiency
    return min(b.start for b in analysis.bounds) + bound


def uneven(pes: int, heavy: int) -> list[int]:
    """Two rows per PE, ``heavy`` with the rest: an even split gives every PE four."""
    counts = [2] * pes
    counts[heavy] = 2 + 2 * (pes - 1)
    return counts


@pytest.mark.parametrize("pes", [5, 7])
def test_the_estimate_keeps_the_chain_of_a_mid_chain_heavy_pe(tmp_path, pes):
    heavy = pes // 2
    bad = record(tmp_path / "uneven.kbt", uneven(pes, heavy))
    even = record(tmp_path / "even.kbt", [4] * pes)
    (kb111,) = [f for f in bad.findings if f.rule == "KB111"]
    assert kb111.pe == heavy
    measured = end_of(bad) - end_of(even)
    assert kb111.saving == pytest.approx(measured, rel=0.2)
    assert balanced_end(bad) <= end_of(even)


def test_no_saving_when_the_even_split_lengthens_the_chain(tmp_path):
    """The heavy PE ends the chain: its extra rows overlap the chain's messages, and
    spreading them makes every earlier PE, and so every message, later."""
    bad = record(tmp_path / "uneven.kbt", uneven(4, 0))
    even = record(tmp_path / "even.kbt", [4] * 4)
    assert end_of(even) > end_of(bad)
    assert [f for f in bad.findings if f.rule == "KB111"] == []
