"""Exact (event, cycle) logs of channels and engines, and run-to-run determinism.

Every expected list is derived by hand from CFG: a DMA transfer of ``n``
bytes holds its channel ``n / 64`` cycles and completes 100 cycles after its
release; every DMA command costs the kernel 4 issue cycles before the
transfer is requested; GEMM does 64 MACs and MATH 16 elements per cycle.
"""

from __future__ import annotations

import numpy as np
import pytest

from emulator import HardwareConfig, Memory, MemoryRecorder, run_kernel
from emulator.scenarios import SCENARIOS
from emulator.trace.schema import Kind

CFG = HardwareConfig(
    hbm_bytes_per_cycle=64,
    hbm_latency=100,
    issue_cycles=4,
    gemm_macs_per_cycle=64,
    math_elems_per_cycle=16,
    scratch_bytes=1 << 16,
)
CHANNEL_KINDS = (Kind.CHAN_REQUEST, Kind.CHAN_GRANT, Kind.CHAN_RELEASE)


def run(kernel, *args, config=CFG, memory=None):
    rec = MemoryRecorder()
    memory = memory if memory is not None else Memory(1 << 16)
    result = run_kernel(kernel, args, (1,), memory, config, recorder=rec, keep_events=True)
    return result, rec


def kernel_log(rec, pe=0):
    """What the kernel did: issues (by op), waits (by future), its end."""
    log = []
    for kind, time, epe, *f in rec.events:
        if epe != pe:
            continue
        if kind is Kind.ISSUE:
            log.append((kind.name, time, f[1]))
        elif kind is Kind.WAIT_BEGIN:
            log.append((kind.name, time, f[0]))
        elif kind is Kind.WAIT_END:
            log.append((kind.name, time, f[0], f[1]))
        elif kind is Kind.KERNEL_END:
            log.append((kind.name, time))
    return log


def channel_log(rec, name):
    """What channel ``name`` did: (kind, time, cmd) of its requests, grants, releases and
    the completion of each command it carried."""
    ids = {c["id"] for c in rec.header["channels"] if c["name"] == name}
    assert ids, f"no channel {name}"
    cmds, log = set(), []
    for kind, time, _pe, *f in rec.events:
        if kind in CHANNEL_KINDS and f[0] in ids:
            cmds.add(f[1])
            log.append((kind.name, time, f[1]))
        elif kind is Kind.COMPLETE and f[0] in cmds:
            log.append((kind.name, time, f[0]))
    return log


def tile(mem: Memory, seed: int, shape=(16, 32)) -> tuple[int, np.ndarray]:
    """A random f16 tile (1024 bytes by default) stored in ``mem``."""
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float16)
    return mem.put(data), data


def test_single_load_async_requests_after_issue_and_completes_after_latency():
    mem = Memory(1 << 16)
    ptr, _ = tile(mem, 0)

    def kernel(tl, p):
        f = tl.load_async(p, (16, 32), "f16")
        tl.wait(f)

    result, rec = run(kernel, ptr, memory=mem)
    assert kernel_log(rec) == [
        ("ISSUE", 0, "load_async"),
        ("WAIT_BEGIN", 4, 0),
        ("WAIT_END", 120, 0, 116),
        ("KERNEL_END", 120),
    ]
    assert channel_log(rec, "pe0.dma_read0") == [
        ("CHAN_REQUEST", 4, 0),
        ("CHAN_GRANT", 4, 0),
        ("CHAN_RELEASE", 20, 0),
        ("COMPLETE", 120, 0),
    ]
    assert result.end_time == 120
    assert result.busy_cycles["pe0.dma_read0"] == 16
    assert result.metrics["stall_cycles"] == 116


def test_a_load_without_latency_is_waited_until_its_transfer_ends():
    # With hbm_latency 0 the channel's release is the load's completion: tl.wait must
    # still block until then (it used to take the data at once, the kernel ending
    # before its load had landed).
    mem = Memory(1 << 16)
    ptr, data = tile(mem, 0)
    got = []

    def kernel(tl, p):
        x = tl.wait(tl.load_async(p, (16, 32), "f16"))
        got.append(x.data.copy())

    config = HardwareConfig(
        hbm_bytes_per_cycle=64, hbm_latency=0, issue_cycles=4, scratch_bytes=1 << 16
    )
    result, rec = run(kernel, ptr, memory=mem, config=config)
    assert kernel_log(rec) == [
        ("ISSUE", 0, "load_async"),
        ("WAIT_BEGIN", 4, 0),
        ("WAIT_END", 20, 0, 16),
        ("KERNEL_END", 20),
    ]
    assert channel_log(rec, "pe0.dma_read0") == [
        ("CHAN_REQUEST", 4, 0),
        ("CHAN_GRANT", 4, 0),
        ("CHAN_RELEASE", 20, 0),
        ("COMPLETE", 20, 0),
    ]
    assert result.end_time == 20
    np.testing.assert_array_equal(got[0], data)


def test_two_loads_on_one_read_channel_queue_for_it_and_overlap_their_latencies():
    mem = Memory(1 << 16)
    p0, _ = tile(mem, 0)
    p1, _ = tile(mem, 1)

    def kernel(tl, p0, p1):
        f0 = tl.load_async(p0, (16, 32), "f16")
        f1 = tl.load_async(p1, (16, 32), "f16")
        tl.wait(f0)
        tl.wait(f1)

    result, rec = run(kernel, p0, p1, memory=mem)
    # The second is requested at 8, waits for the first's release at 20, and
    # completes 16 cycles after the first, not a whole transfer+latency later.
    assert channel_log(rec, "pe0.dma_read0") == [
        ("CHAN_REQUEST", 4, 0),
        ("CHAN_GRANT", 4, 0),
        ("CHAN_REQUEST", 8, 1),
        ("CHAN_RELEASE", 20, 0),
        ("CHAN_GRANT", 20, 1),
        ("CHAN_RELEASE", 36, 1),
        ("COMPLETE", 120, 0),
        ("COMPLETE", 136, 1),
    ]
    assert kernel_log(rec) == [
        ("ISSUE", 0, "load_async"),
        ("ISSUE", 4, "load_async"),
        ("WAIT_BEGIN", 8, 0),
        ("WAIT_END", 120, 0, 112),
        ("WAIT_BEGIN", 120, 1),
        ("WAIT_END", 136, 1, 16),
        ("KERNEL_END", 136),
    ]
    assert result.end_time == 136


def test_two_read_channels_grant_two_loads_at_once():
    mem = Memory(1 << 16)
    p0, _ = tile(mem, 0)
    p1, _ = tile(mem, 1)

    def kernel(tl, p0, p1):
        f0 = tl.load_async(p0, (16, 32), "f16")
        f1 = tl.load_async(p1, (16, 32), "f16")
        tl.wait(f0)
        tl.wait(f1)

    result, rec = run(kernel, p0, p1, memory=mem, config=CFG.replace(dma_read_channels=2))
    assert channel_log(rec, "pe0.dma_read0") == [
        ("CHAN_REQUEST", 4, 0),
        ("CHAN_GRANT", 4, 0),
        ("CHAN_RELEASE", 20, 0),
        ("COMPLETE", 120, 0),
    ]
    assert channel_log(rec, "pe0.dma_read1") == [
        ("CHAN_REQUEST", 8, 1),
        ("CHAN_GRANT", 8, 1),
        ("CHAN_RELEASE", 24, 1),
        ("COMPLETE", 124, 1),
    ]
    assert result.end_time == 124
    assert result.busy_cycles == {
        "pe0.dma_read0": 16,
        "pe0.dma_read1": 16,
        "pe0.dma_write0": 0,
        "pe0.gemm": 0,
        "pe0.math": 0,
    }


def test_dot_holds_gemm_for_macs_over_rate_and_blocks_the_kernel():
    a = np.arange(16 * 32, dtype=np.float32).reshape(16, 32) / 100
    b = np.arange(32 * 8, dtype=np.float32).reshape(32, 8) / 100
    out = {}

    def kernel(tl):
        out["c"] = np.asarray(tl.dot(a, b))

    result, rec = run(kernel)
    # 16 * 32 * 8 = 4096 MACs at 64 per cycle.
    assert channel_log(rec, "pe0.gemm") == [
        ("CHAN_REQUEST", 0, 0),
        ("CHAN_GRANT", 0, 0),
        ("CHAN_RELEASE", 64, 0),
        ("COMPLETE", 64, 0),
    ]
    assert kernel_log(rec) == [("ISSUE", 0, "dot"), ("KERNEL_END", 64)]
    np.testing.assert_allclose(out["c"], a @ b, rtol=1e-6)
    assert [(op.time, op.category, op.op) for op in result.op_log] == [(0, "compute", "gemm")]


def test_math_ops_hold_math_for_elements_over_rate_one_after_another():
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16)
    row = np.arange(16, dtype=np.float32)

    def kernel(tl):
        e = tl.exp(x)  # 64 elements: 4 cycles
        s = e + row  # broadcast to 64 elements: 4 cycles
        tl.sum(s, axis=1)  # reduces 64 elements: 4 cycles

    result, rec = run(kernel)
    assert channel_log(rec, "pe0.math") == [
        ("CHAN_REQUEST", 0, 0),
        ("CHAN_GRANT", 0, 0),
        ("CHAN_RELEASE", 4, 0),
        ("COMPLETE", 4, 0),
        ("CHAN_REQUEST", 4, 1),
        ("CHAN_GRANT", 4, 1),
        ("CHAN_RELEASE", 8, 1),
        ("COMPLETE", 8, 1),
        ("CHAN_REQUEST", 8, 2),
        ("CHAN_GRANT", 8, 2),
        ("CHAN_RELEASE", 12, 2),
        ("COMPLETE", 12, 2),
    ]
    assert kernel_log(rec) == [
        ("ISSUE", 0, "exp"),
        ("ISSUE", 4, "add"),
        ("ISSUE", 8, "sum"),
        ("KERNEL_END", 12),
    ]
    assert result.busy_cycles["pe0.math"] == 12
    assert result.metrics["math_count"] == 3


def test_store_uses_write_channel_and_data_lands_at_completion():
    mem = Memory(1 << 16)
    dst = mem.alloc(1024)
    data = np.arange(256, dtype=np.float32)
    seen = []

    def kernel(tl, p):
        h = tl.store(p, data)  # returns at 4
        seen.append(mem.get(p, (256,), "f32"))
        tl.exp(np.zeros(16 * 50, np.float32))  # 4 -> 54, the store still in flight
        seen.append(mem.get(p, (256,), "f32"))
        assert tl.wait(h) is None  # 54 -> 120
        seen.append(mem.get(p, (256,), "f32"))

    result, rec = run(kernel, dst, memory=mem)
    assert channel_log(rec, "pe0.dma_write0") == [
        ("CHAN_REQUEST", 4, 0),
        ("CHAN_GRANT", 4, 0),
        ("CHAN_RELEASE", 20, 0),
        ("COMPLETE", 120, 0),
    ]
    assert kernel_log(rec) == [
        ("ISSUE", 0, "store"),
        ("ISSUE", 4, "exp"),
        ("WAIT_BEGIN", 54, 0),
        ("WAIT_END", 120, 0, 66),
        ("KERNEL_END", 120),
    ]
    assert channel_log(rec, "pe0.dma_read0") == []
    at_4, at_54, at_120 = seen
    assert not at_4.any() and not at_54.any()
    np.testing.assert_array_equal(at_120, data)
    assert result.metrics["dma_write_count"] == 1


def test_kernel_end_waits_for_a_store_it_never_waited():
    mem = Memory(1 << 16)
    dst = mem.alloc(1024)
    data = np.arange(256, dtype=np.float32)

    def kernel(tl, p):
        tl.store(p, data)

    result, rec = run(kernel, dst, memory=mem)
    assert kernel_log(rec) == [("ISSUE", 0, "store"), ("KERNEL_END", 120)]
    np.testing.assert_array_equal(mem.get(dst, (256,), "f32"), data)


def test_wait_on_finished_load_returns_without_stall():
    mem = Memory(1 << 16)
    ptr, data = tile(mem, 0)
    got = {}

    def kernel(tl, p):
        f = tl.load_async(p, (16, 32), "f16")
        tl.exp(np.zeros(16 * 200, np.float32))  # 4 -> 204, the load completes at 120
        got["done_before_wait"] = f.done
        got["x"] = np.asarray(tl.wait(f))

    result, rec = run(kernel, ptr, memory=mem)
    assert kernel_log(rec) == [
        ("ISSUE", 0, "load_async"),
        ("ISSUE", 4, "exp"),
        ("WAIT_BEGIN", 204, 0),
        ("WAIT_END", 204, 0, 0),
        ("KERNEL_END", 204),
    ]
    assert got["done_before_wait"]
    np.testing.assert_array_equal(got["x"], data)
    assert result.metrics["stall_cycles"] == 0


def test_keep_events_gives_what_a_recorder_receives():
    mem = Memory(1 << 16)
    ptr, _ = tile(mem, 0)

    def kernel(tl, p):
        tl.wait(tl.load_async(p, (16, 32), "f16"))

    result, rec = run(kernel, ptr, memory=mem)
    assert result.events == rec.events
    assert rec.footer["status"] == "ok"
    assert rec.footer["end_time"] == result.end_time


#: Scenario parameters small enough to run twice quickly.
SMALL = {
    "decode_blocking": {"n_tiles": 4},
    "decode_prefetch": {"n_tiles": 4},
    "flawed_prefetch": {"n_tiles": 4},
    "prefill": {"n_tiles": 4},
    "ring_attention": {},
    "tiled_gemm": {"k": 128},
    "gemm_blocking": {"m": 256},
    "gemm_pipeline": {"m": 256},
    "gemm_composite": {"m": 256},
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_scenario_twice_gives_identical_events(name):
    first = SCENARIOS[name](**SMALL[name]).run(keep_events=True)
    second = SCENARIOS[name](**SMALL[name]).run(keep_events=True)
    assert len(first.events) > 100
    assert first.events == second.events
    assert first.op_log == second.op_log
    assert first.busy_cycles == second.busy_cycles


def test_rerun_on_the_same_memory_gives_identical_events():
    scenario = SCENARIOS["decode_prefetch"](n_tiles=4)
    first = scenario.run(keep_events=True)
    second = scenario.run(keep_events=True)
    assert first.events == second.events
