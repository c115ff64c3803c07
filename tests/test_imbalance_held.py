"""KB111 when the PE with more work ends first: a split-K GEMM whose partial sums are added
up along a line of PEs. The heavy PE starts the chain and ends before the others, which
wait on its partial sum; the launch ends when it lets them."""

from __future__ import annotations

import numpy as np
import pytest

from emulator import HardwareConfig, Memory, run_kernel
from kbdebug.analysis import Analysis
from kbdebug.replay import Replay

PES = 6
#: 22 K tiles: 7, 3, 3, 3, 3, 3 with the remainder on PE 0, or 4, 4, 4, 4, 3, 3 spread.
K_TILES = 22
TILE = (32, 32)


def split_k(tl, a_ptr, b_ptr, c_ptr, k_tiles, spread):
    """C = A @ B with K split over the PEs (PE 0 takes the remainder unless ``spread``),
    a tile ahead prefetched; PE i adds PE i - 1's partial sum to its own and passes it
    right, the last PE stores C."""
    pid, pes = tl.program_id(0), tl.num_programs(0)
    per, extra = divmod(k_tiles, pes)
    if spread:
        lo = pid * per + min(pid, extra)
        hi = lo + per + (1 if pid < extra else 0)
    else:
        lo = 0 if pid == 0 else extra + pid * per
        hi = extra + (pid + 1) * per
    tile_bytes = 32 * 32 * 2

    def issue(k):
        return (
            tl.load_async(a_ptr + k * tile_bytes, TILE, "f16"),
            tl.load_async(b_ptr + k * tile_bytes, TILE, "f16"),
        )

    acc = tl.zeros(TILE, "f32")
    ahead = issue(lo)
    for k in range(lo, hi):
        a, b = tl.wait(ahead[0]), tl.wait(ahead[1])
        if k + 1 < hi:
            ahead = issue(k + 1)
        acc = acc + tl.dot(a, b)
    if pid > 0:
        acc = acc + tl.wait(tl.recv_async("left", TILE, "f32"))
    if pid + 1 < pes:
        tl.wait(tl.send("right", acc))
    else:
        tl.wait(tl.store(c_ptr, acc))


def record(path, spread: bool, pes=PES, k_tiles=K_TILES, macs=16, latency=500) -> Analysis:
    config = HardwareConfig(
        mesh_rows=1, mesh_cols=pes, gemm_macs_per_cycle=macs, hbm_latency=latency
    )
    memory = Memory(size_bytes=1 << 20)
    rng = np.random.default_rng(3)
    a_ptr = memory.put((rng.standard_normal((k_tiles, *TILE)) * 0.1).astype(np.float16))
    b_ptr = memory.put((rng.standard_normal((k_tiles, *TILE)) * 0.1).astype(np.float16))
    c_ptr = memory.alloc(32 * 32 * 4)
    args = (a_ptr, b_ptr, c_ptr, k_tiles, spread)
    run_kernel(split_k, args, (pes,), memory, config, trace=path)
    return Analysis(Replay.open(path, cache=False))


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    folder = tmp_path_factory.mktemp("split_k")
    return record(folder / "uneven.kbt", False), record(folder / "even.kbt", True)


def end_of(analysis: Analysis) -> int:
    return max(b.end for b in analysis.bounds)


def balanced_end(analysis: Analysis) -> int:
    bound, _ = analysis.launch_efficiency
    return min(b.start for b in analysis.bounds) + bound


def test_the_heavy_pe_that_ends_first_is_named_when_the_others_wait_on_it(twins):
    uneven, even = twins
    ends = {b.pe: b.end for b in uneven.bounds}
    assert ends[0] == min(ends.values())  # the heavy PE ends first ...
    assert max(ends, key=ends.get) == PES - 1  # ... the chain's last PE last
    (kb111,) = [f for f in uneven.findings if f.rule == "KB111"]
    assert kb111.pe == 0
    assert "the launch waits for PE 0 through its messages" in kb111.message
    # What the even split gains, measured on its twin: the estimate is close to that and
    # within what the balanced bound allows, and the twin ends no sooner than the bound.
    measured = end_of(uneven) - end_of(even)
    assert 0 < kb111.pe_saving <= kb111.saving
    assert kb111.saving == pytest.approx(measured, rel=0.05)
    assert kb111.saving <= end_of(uneven) - balanced_end(uneven)
    assert balanced_end(uneven) <= end_of(even)
    assert uneven.launch_efficiency[1] < 1.0


def test_the_even_split_of_the_same_chain_gets_none(twins):
    _, even = twins
    assert even.imbalance is None
    assert [f for f in even.findings if f.rule == "KB111"] == []


@pytest.mark.parametrize(
    ("pes", "k_tiles", "macs", "latency"),
    [(4, 11, 16, 500), (8, 30, 64, 500), (5, 13, 256, 2000)],
)
def test_no_even_split_of_a_chain_beats_its_balanced_bound(tmp_path, pes, k_tiles, macs, latency):
    """The remainder on the chain's root: the twin that spreads it ends no sooner than the
    balanced bound, and KB111 claims no more than that bound allows nor than the twin
    gains (to a percent)."""
    uneven = record(tmp_path / "uneven.kbt", False, pes, k_tiles, macs, latency)
    even = record(tmp_path / "even.kbt", True, pes, k_tiles, macs, latency)
    assert balanced_end(uneven) <= end_of(even)
    (kb111,) = [f for f in uneven.findings if f.rule == "KB111"]
    assert kb111.saving <= end_of(uneven) - balanced_end(uneven)
    assert kb111.saving <= 1.01 * (end_of(uneven) - end_of(even))
