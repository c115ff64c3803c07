"""The four Test Requirements of ADR-0062 (tl.load_async), taken literally.

With CFG a (64, 64) f16 tile (8192 bytes) holds the read channel 128 cycles
and completes 100 later: 228 cycles from its request, 232 from its issue. A
(64, 64) @ (64, 64) dot is 262144 MACs: 256 cycles on the GEMM engine.
"""

from __future__ import annotations

import numpy as np
from _shared_fuzz import cases
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator import HardwareConfig, LoadFuture, Memory, MemoryRecorder, run_kernel
from emulator.trace.schema import Kind

CFG = HardwareConfig(
    hbm_bytes_per_cycle=64,
    hbm_latency=100,
    issue_cycles=4,
    gemm_macs_per_cycle=1024,
    math_elems_per_cycle=64,
)
ISSUE = CFG.issue_cycles
TRANSFER = 64 * 64 * 2 // CFG.hbm_bytes_per_cycle  # a (64, 64) f16 tile on its channel
LOAD = ISSUE + TRANSFER + CFG.hbm_latency
GEMM = 64 * 64 * 64 // CFG.gemm_macs_per_cycle
A = np.eye(64, dtype=np.float32)
B = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)


def stored_tile(seed: int = 0, shape=(64, 64), dtype=np.float16):
    mem = Memory(1 << 16)
    data = (np.random.default_rng(seed).standard_normal(shape) * 100).astype(dtype)
    return mem, mem.put(data), data


def load_then_dot_blocking(tl, p):
    k = tl.load(p, (64, 64), "f16")
    tl.dot(A, B)
    return k


def load_async_then_dot(tl, p):
    f = tl.load_async(p, (64, 64), "f16")
    tl.dot(A, B)  # the GEMM runs while the tile is in flight
    return tl.wait(f)


# --- 1. overlap is real ---------------------------------------------------------------


def load_only(tl, p):
    tl.load(p, (64, 64), "f16")


def dot_only(tl):
    tl.dot(A, B)


def test_load_and_gemm_durations_alone():
    mem, ptr, _ = stored_tile()
    assert run_kernel(load_only, (ptr,), 1, mem, CFG).end_time == LOAD
    assert run_kernel(dot_only, (), 1, mem, CFG).end_time == GEMM


def test_load_async_overlaps_following_gemm_ending_near_max_not_sum():
    mem, ptr, _ = stored_tile()
    blocking = run_kernel(load_then_dot_blocking, (ptr,), 1, mem, CFG)
    overlapped = run_kernel(load_async_then_dot, (ptr,), 1, mem, CFG)

    assert blocking.end_time == LOAD + GEMM
    assert overlapped.end_time < LOAD + GEMM
    # Only the descriptor push is serial with the GEMM.
    assert overlapped.end_time == CFG.issue_cycles + max(LOAD - CFG.issue_cycles, GEMM)
    assert overlapped.end_time <= 1.05 * max(LOAD, GEMM)


def test_overlap_comes_from_concurrent_channel_and_engine_occupancy():
    mem, ptr, _ = stored_tile()
    rec = MemoryRecorder()
    run_kernel(load_async_then_dot, (ptr,), 1, mem, CFG, recorder=rec)
    names = {c["id"]: c["name"] for c in rec.header["channels"]}
    spans: dict[str, list[int]] = {}
    for kind, time, _pe, *f in rec.events:
        if kind in (Kind.CHAN_GRANT, Kind.CHAN_RELEASE):
            spans.setdefault(names[f[0]], []).append(time)
    assert spans == {"pe0.dma_read0": [4, 132], "pe0.gemm": [4, 260]}


# --- 2. correctness ---------------------------------------------------------------------


def test_wait_of_load_async_returns_the_same_bytes_as_blocking_load():
    mem, ptr, data = stored_tile(seed=3)
    got = {}

    def kernel(tl, p):
        got["async"] = np.asarray(tl.wait(tl.load_async(p, (64, 64), "f16")))
        got["blocking"] = np.asarray(tl.load(p, (64, 64), "f16"))

    run_kernel(kernel, (ptr,), 1, mem, CFG)
    assert got["async"].dtype == got["blocking"].dtype == np.float16
    assert np.array_equal(got["async"], got["blocking"])
    assert np.array_equal(got["async"].view(np.uint16), data.view(np.uint16))


@settings(max_examples=cases(30), deadline=None)
@given(
    dtype=st.sampled_from(["f16", "f32", "i8", "i32", "u8"]),
    rows=st.integers(1, 8),
    cols=st.integers(1, 8),
    offset=st.integers(0, 64),
    seed=st.integers(0, 2**16),
)
def test_load_async_and_load_agree_bit_for_bit_at_any_address(dtype, rows, cols, offset, seed):
    mem = Memory(4096)
    mem.data[:] = np.random.default_rng(seed).integers(0, 256, mem.size_bytes, dtype=np.uint8)
    got = {}

    def kernel(tl):
        got["async"] = np.asarray(tl.wait(tl.load_async(offset, (rows, cols), dtype)))
        got["blocking"] = np.asarray(tl.load(offset, (rows, cols), dtype))

    run_kernel(kernel, (), 1, mem, CFG)
    want = mem.get(offset, (rows, cols), dtype)
    for name in ("async", "blocking"):
        assert got[name].shape == (rows, cols)
        assert got[name].tobytes() == want.tobytes(), name


# --- 3. two in flight -------------------------------------------------------------------


def test_two_outstanding_load_asyncs_resolve_to_independent_tensors_in_wait_order():
    mem = Memory(1 << 16)
    d0 = np.full((64, 64), 1.5, np.float16)
    d1 = np.arange(64 * 64).reshape(64, 64).astype(np.float16)
    p0, p1 = mem.put(d0), mem.put(d1)
    got = {}

    def kernel(tl, p0, p1):
        f0 = tl.load_async(p0, (64, 64), "f16")
        f1 = tl.load_async(p1, (64, 64), "f16")
        got["both_pending"] = not f0.done and not f1.done
        t1 = tl.wait(f1)  # the second first
        got["f0_done_at_t1"] = f0.done
        t0 = tl.wait(f0)
        got["t0"], got["t1"] = np.asarray(t0), np.asarray(t1)
        got["buffers"] = t0.buffer, t1.buffer
        got["sum"] = np.asarray(t0 + t1)

    rec = MemoryRecorder()
    run_kernel(kernel, (p0, p1), 1, mem, CFG, recorder=rec)
    assert got["both_pending"]
    # Queued on one channel, the first issued finished first; waiting on the
    # second does not change that, and the first then waits without a stall.
    assert got["f0_done_at_t1"]
    t0, t1 = got["t0"], got["t1"]
    assert np.array_equal(t0, d0) and np.array_equal(t1, d1)
    assert not np.shares_memory(t0, t1)
    b0, b1 = got["buffers"]
    assert b0.id != b1.id
    assert np.array_equal(got["sum"], d0 + d1)

    waits = [(k.name, f[0]) for k, _t, _pe, *f in rec.events if k is Kind.WAIT_END]
    assert waits == [("WAIT_END", 1), ("WAIT_END", 0)]
    issues = [t for k, t, _pe, *f in rec.events if k is Kind.ISSUE and f[1] == "load_async"]
    completes = [t for k, t, _pe, *f in rec.events if k is Kind.COMPLETE and f[1] >= 0]
    # The second, issued one issue later, is granted the channel when the first releases it.
    assert issues == [0, ISSUE] and completes == [LOAD, ISSUE + 2 * TRANSFER + CFG.hbm_latency]
    assert issues[1] < completes[0]  # both in flight at once


def test_load_async_returns_a_load_future_issued_by_its_pe():
    mem, ptr, _ = stored_tile()
    seen = []

    def kernel(tl, p):
        f = tl.load_async(p, (64, 64), "f16")
        seen.append(f)
        tl.wait(f)

    run_kernel(kernel, (ptr,), 1, mem, CFG)
    (f,) = seen
    assert isinstance(f, LoadFuture)
    assert (f.pe, f.shape, f.dtype) == (0, (64, 64), "f16")
    assert f.waited_at is not None and f.done


# --- 4. op_log compatibility -------------------------------------------------------------


def three_blocking_loads(tl, p):
    for i in range(3):
        tl.load(p + i * 2048, (32, 32), "f16")
        tl.exp(np.zeros(64, np.float32))


def three_async_loads(tl, p):
    fs = [tl.load_async(p + i * 2048, (32, 32), "f16") for i in range(3)]
    for f in fs:
        tl.wait(f)
        tl.exp(np.zeros(64, np.float32))


def test_each_load_async_logs_exactly_one_dma_read():
    mem = Memory(1 << 16)
    rec = MemoryRecorder()
    result = run_kernel(three_async_loads, (0,), 1, mem, CFG, recorder=rec)
    reads = [op for op in result.op_log if (op.category, op.op) == ("memory", "dma_read")]
    assert [op.time for op in reads] == [0, 4, 8]  # one per issue, logged at the issue
    assert result.metrics["dma_read_count"] == 3
    op_events = [f for k, _t, _pe, *f in rec.events if k is Kind.OP_LOG]
    assert op_events.count(["memory", "dma_read"]) == 3
    assert {op.category for op in result.op_log} == {"memory", "compute"}


def test_dma_read_count_is_the_same_for_blocking_and_async_versions():
    mem = Memory(1 << 16)
    blocking = run_kernel(three_blocking_loads, (0,), 1, mem, CFG)
    overlapped = run_kernel(three_async_loads, (0,), 1, mem, CFG)
    assert blocking.metrics["dma_read_count"] == overlapped.metrics["dma_read_count"] == 3
    assert sorted((o.category, o.op) for o in blocking.op_log) == sorted(
        (o.category, o.op) for o in overlapped.op_log
    )
    assert overlapped.end_time < blocking.end_time
