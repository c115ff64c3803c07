"""The example kernels: numerically right, and timed the way their pipelines promise."""

from __future__ import annotations

import pytest

from emulator import MemoryRecorder, ScratchOverflowError
from emulator.scenarios import SCENARIOS
from emulator.trace.schema import Kind


def busy(result, pe: int, kind: str) -> int:
    """Cycles PE ``pe``'s channels whose name contains ``kind`` were held."""
    return sum(c for name, c in result.busy_cycles.items() if name.startswith(f"pe{pe}.{kind}"))


def spans(rec) -> dict[str, list[tuple[int, int]]]:
    """(grant, release) of every command, by channel name."""
    names = {c["id"]: c["name"] for c in rec.header["channels"]}
    granted, out = {}, {}
    for kind, time, _pe, *f in rec.events:
        if kind is Kind.CHAN_GRANT:
            granted[f[1]] = time
        elif kind is Kind.CHAN_RELEASE:
            out.setdefault(names[f[0]], []).append((granted.pop(f[1]), time))
    return out


def overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    return sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_output_matches_its_numpy_reference(name):
    scenario = SCENARIOS[name]()
    result = scenario.run()
    scenario.check(scenario.memory)
    assert result.end_time > 0
    assert set(result.pe_end_times) == set(range(len(result.scratch_peak)))


def test_check_rejects_a_wrong_output():
    scenario = SCENARIOS["decode_prefetch"](n_tiles=2)
    scenario.run()
    out_ptr = scenario.args[3]
    scenario.memory.data[out_ptr : out_ptr + 64] = 0
    with pytest.raises(AssertionError, match="differs from the numpy reference"):
        scenario.check(scenario.memory)


def test_decode_prefetch_beats_blocking_and_nears_the_max_bound():
    blocking = SCENARIOS["decode_blocking"]().run()
    prefetch = SCENARIOS["decode_prefetch"]().run()
    dma = busy(prefetch, 0, "dma_read")
    compute = busy(prefetch, 0, "gemm") + busy(prefetch, 0, "math")
    bound = max(dma, compute)

    assert prefetch.end_time < blocking.end_time
    assert bound <= prefetch.end_time <= 1.10 * bound
    # The same work, differently scheduled.
    assert prefetch.metrics["dma_read_count"] == blocking.metrics["dma_read_count"]
    assert prefetch.busy_cycles == blocking.busy_cycles
    # Decode is KV-load-bound with the default hardware, so the DMA sets the bound.
    assert dma > compute


def test_decode_blocking_pays_dma_and_compute_in_series():
    blocking = SCENARIOS["decode_blocking"]().run()
    dma = busy(blocking, 0, "dma_read")
    compute = busy(blocking, 0, "gemm") + busy(blocking, 0, "math")
    assert blocking.end_time >= dma + compute


def test_flawed_prefetch_is_no_faster_than_blocking():
    blocking = SCENARIOS["decode_blocking"]().run()
    flawed = SCENARIOS["flawed_prefetch"]().run()
    assert flawed.end_time >= blocking.end_time
    assert flawed.end_time <= 1.02 * blocking.end_time
    assert flawed.metrics["stall_cycles"] >= blocking.metrics["stall_cycles"]


def test_decode_prefetch_scratch_is_q_plus_three_tiles_each_of_k_and_v():
    scenario = SCENARIOS["decode_prefetch"]()
    q_bytes, tile_bytes = 8 * 128 * 2, 64 * 128 * 2
    need = q_bytes + 2 * 3 * tile_bytes
    assert scenario.run().scratch_peak == {0: need}

    tight = SCENARIOS["decode_prefetch"](config=scenario.config.replace(scratch_bytes=need))
    tight.run()
    tight.check(tight.memory)
    too_tight = SCENARIOS["decode_prefetch"](config=scenario.config.replace(scratch_bytes=need - 1))
    with pytest.raises(ScratchOverflowError):
        too_tight.run()


def test_decode_blocking_scratch_is_q_plus_one_k_and_one_v_tile():
    result = SCENARIOS["decode_blocking"]().run()
    assert result.scratch_peak == {0: 8 * 128 * 2 + 2 * 64 * 128 * 2}


def test_prefill_runs_one_query_block_per_pe_in_parallel():
    result = SCENARIOS["prefill"]().run()
    assert set(result.pe_end_times) == {0, 1, 2, 3}
    assert len(set(result.pe_end_times.values())) == 1
    per_pe_loads = {op.pe for op in result.op_log if op.op == "dma_read"}
    assert per_pe_loads == {0, 1, 2, 3}


def test_ring_attention_receives_with_recv_async_and_hides_ipcq_under_compute():
    rec = MemoryRecorder()
    result = SCENARIOS["ring_attention"]().run(recorder=rec)
    assert result.metrics["ipcq_recv_count"] > 0
    assert result.metrics["ipcq_recv_count"] == result.metrics["ipcq_send_count"]
    recv_futures = {
        f[2] for k, _t, _pe, *f in rec.events if k is Kind.ISSUE and f[1] == "recv_async"
    }
    assert len(recv_futures) == result.metrics["ipcq_recv_count"]

    by_channel = spans(rec)
    for pe in range(4):
        link = by_channel[f"pe{pe}.ipcq.right"]
        compute = by_channel[f"pe{pe}.gemm"] + by_channel[f"pe{pe}.math"]
        link_busy = sum(e - s for s, e in link)
        assert link_busy > 0
        assert overlap(link, compute) >= 0.9 * link_busy, f"PE {pe}"

    # Every receive had landed by the time the kernel waited on it.
    recv_stalls = [
        f[1] for k, _t, _pe, *f in rec.events if k is Kind.WAIT_END and f[0] in recv_futures
    ]
    assert len(recv_stalls) == len(recv_futures)
    assert sum(recv_stalls) == 0


def test_tiled_gemm_splits_rows_across_pes():
    result = SCENARIOS["tiled_gemm"](m=128, n=64, k=128).run()
    assert result.metrics["gemm_count"] == 2 * 2  # two PEs, two K blocks each
    assert {op.pe for op in result.op_log} == {0, 1}
