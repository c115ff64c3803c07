"""Scratch: one buffer per loaded tile, capacity, tl.scope recycling, in-flight buffers.

Tiles here are (16, 32) f16: 1024 bytes, 16 cycles on the read channel, done
100 cycles after release; MATH does 16 elements per cycle.
"""

from __future__ import annotations

import numpy as np
import pytest

from emulator import (
    HardwareConfig,
    InFlightRecycleError,
    Memory,
    MemoryRecorder,
    RecycledBufferError,
    ScratchOverflowError,
    run_kernel,
)
from emulator.kernels.pipeline import TilePipeline
from emulator.trace.schema import Kind

CFG = HardwareConfig(
    hbm_bytes_per_cycle=64,
    hbm_latency=100,
    issue_cycles=4,
    math_elems_per_cycle=16,
    scratch_bytes=8 * 1024,
)
TILE = (16, 32)
TILE_BYTES = 1024


def run(kernel, *args, config=CFG, n_tiles=32):
    mem = Memory(1 << 17)
    data = (np.arange(n_tiles * 512) % 7).astype(np.float16)
    base = mem.put(data)
    rec = MemoryRecorder()
    result = run_kernel(kernel, (base, *args), 1, mem, config, recorder=rec)
    return result, rec


def scratch_log(rec):
    """(kind, time, buffer, in_use) of every scratch alloc and free."""
    return [
        (kind.name, time, f[0], f[2])
        for kind, time, _pe, *f in rec.events
        if kind in (Kind.SCRATCH_ALLOC, Kind.SCRATCH_FREE)
    ]


def test_each_loaded_tile_allocates_its_bytes_until_the_kernel_ends():
    def kernel(tl, p):
        tl.load(p, TILE, "f16")
        tl.wait(tl.load_async(p + 1024, (8, 32), "f16"))
        tl.zeros((64, 64))  # computed tiles take no scratch

    result, rec = run(kernel)
    allocs = [f for k, _t, _pe, *f in rec.events if k is Kind.SCRATCH_ALLOC]
    assert allocs == [[0, 1024, 1024], [1, 512, 1536]]
    assert result.scratch_peak == {0: 1536}
    end = result.end_time
    assert scratch_log(rec)[-2:] == [("SCRATCH_FREE", end, 0, 512), ("SCRATCH_FREE", end, 1, 0)]


def test_allocation_beyond_capacity_raises_scratch_overflow():
    def kernel(tl, p):
        tiles = [tl.load_async(p + i * 1024, TILE, "f16") for i in range(3)]
        tl.wait(tiles[0])

    with pytest.raises(ScratchOverflowError) as info:
        run(kernel, config=CFG.replace(scratch_bytes=2048))
    error = info.value
    assert error.pe == 0
    assert "1024 bytes requested with 2048 of 2048 in use" in str(error)


def test_scratch_exactly_full_is_allowed():
    def kernel(tl, p):
        tiles = [tl.load_async(p + i * 1024, TILE, "f16") for i in range(2)]
        for f in tiles:
            tl.wait(f)

    result, _ = run(kernel, config=CFG.replace(scratch_bytes=2048))
    assert result.scratch_peak == {0: 2048}


def test_scope_recycles_the_buffers_allocated_inside_it():
    def kernel(tl, p):
        for i in range(3):
            with tl.scope():
                a = tl.load(p + i * 2048, TILE, "f16")
                b = tl.load(p + i * 2048 + 1024, TILE, "f16")
                tl.exp(a + b)

    result, rec = run(kernel)
    kinds = [(k, buf, in_use) for k, _t, buf, in_use in scratch_log(rec)]

    def per_scope(a, b):
        return [
            ("SCRATCH_ALLOC", a, 1024),
            ("SCRATCH_ALLOC", b, 2048),
            ("SCRATCH_FREE", a, 1024),
            ("SCRATCH_FREE", b, 0),
        ]

    assert kinds == per_scope(0, 1) + per_scope(2, 3) + per_scope(4, 5)
    assert result.scratch_peak == {0: 2048}


def test_load_not_waited_at_scope_exit_is_adopted_by_the_scope_that_waits_on_it():
    seen = {}

    def kernel(tl, p):
        with tl.scope():  # A
            f = tl.load_async(p, TILE, "f16")  # buffer 0, issued at 0, done at 120
            tl.load(p + 1024, TILE, "f16")  # buffer 1, queued behind it: done at 136
        # A's exit recycles buffer 1 only: f's load has landed but nobody waited on it.
        with tl.scope():  # B
            x = tl.wait(f)
            seen["x"] = np.asarray(tl.exp(x))  # 512 elements: 136 -> 168
        seen["x_after_b"] = x

    result, rec = run(kernel)
    assert scratch_log(rec) == [
        ("SCRATCH_ALLOC", 0, 0, 1024),
        ("SCRATCH_ALLOC", 4, 1, 2048),
        ("SCRATCH_FREE", 136, 1, 1024),  # A's exit
        ("SCRATCH_FREE", 168, 0, 0),  # B's exit
    ]
    wait_end = next(t for k, t, _pe, *f in rec.events if k is Kind.WAIT_END and f[0] == 0)
    assert wait_end == 136
    assert result.scratch_peak == {0: 2048}
    np.testing.assert_allclose(seen["x"], np.exp(np.arange(512) % 7).reshape(TILE), rtol=1e-3)
    assert seen["x_after_b"].buffer.freed


def test_load_still_transferring_at_scope_exit_is_not_recycled():
    seen = {}

    def kernel(tl, p):
        with tl.scope():
            f = tl.load_async(p, TILE, "f16")
        seen["done_at_exit"] = f.done
        seen["freed_at_exit"] = f.buffer.freed
        x = tl.wait(f)
        seen["x"] = np.asarray(x)

    result, rec = run(kernel)
    assert not seen["done_at_exit"] and not seen["freed_at_exit"]
    np.testing.assert_array_equal(seen["x"].ravel(), np.arange(512) % 7)
    assert result.scratch_peak == {0: 1024}
    # Waited outside any scope: recycled when the kernel ends.
    assert scratch_log(rec) == [("SCRATCH_ALLOC", 0, 0, 1024), ("SCRATCH_FREE", 120, 0, 0)]


def test_load_never_waited_is_recycled_when_the_kernel_ends():
    def kernel(tl, p):
        with tl.scope():
            tl.load_async(p, TILE, "f16")

    result, rec = run(kernel)
    assert result.end_time == 120
    assert scratch_log(rec) == [("SCRATCH_ALLOC", 0, 0, 1024), ("SCRATCH_FREE", 120, 0, 0)]


def adr_d4_pipeline(tl, base, n_tiles):
    """ADR-0062 D4, literally: prime two loads, then wait one and issue one per tile."""
    futures = [tl.load_async(base + j * TILE_BYTES, TILE, "f16") for j in range(min(2, n_tiles))]
    for j in range(n_tiles):
        with tl.scope():
            tile = tl.wait(futures[j])
            if j + 2 < n_tiles:
                futures.append(tl.load_async(base + (j + 2) * TILE_BYTES, TILE, "f16"))
            tl.exp(tile)


def test_depth_2_pipeline_keeps_scratch_bounded_over_many_tiles():
    short, _ = run(adr_d4_pipeline, 8)
    long, rec = run(adr_d4_pipeline, 32)
    assert long.metrics["dma_read_count"] == 32
    assert long.scratch_peak == short.scratch_peak
    # At most the two primed tiles (allocated outside any scope, so live to
    # the end), the tile in use and the two in flight.
    assert long.scratch_peak[0] <= 5 * TILE_BYTES
    assert scratch_log(rec)[-1][3] == 0


def pipeline_kernel(tl, base, n_tiles, depth):
    kv = TilePipeline(tl, [lambda j: (base + j * TILE_BYTES, TILE, "f16")], n_tiles, depth)
    for _ in range(n_tiles):
        with tl.scope():
            tl.exp(kv.next(0))


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_tile_pipeline_needs_scratch_for_depth_plus_one_tiles(depth):
    result, _ = run(pipeline_kernel, 24, depth)
    assert result.metrics["dma_read_count"] == 24
    assert result.scratch_peak == {0: (depth + 1) * TILE_BYTES}


def test_free_of_a_load_not_yet_waited_raises_in_flight_recycle():
    def kernel(tl, p):
        f = tl.load_async(p, TILE, "f16")
        tl.free(f)

    with pytest.raises(InFlightRecycleError, match="future 0 .* in flight"):
        run(kernel)


def test_free_of_a_waited_tile_recycles_it_at_once():
    def kernel(tl, p):
        x = tl.load(p, TILE, "f16")  # done at 120
        tl.free(x)
        tl.exp(np.zeros(16, np.float32))  # 120 -> 121
        tl.free(x)  # a second free is harmless

    result, rec = run(kernel)
    assert scratch_log(rec) == [("SCRATCH_ALLOC", 0, 0, 1024), ("SCRATCH_FREE", 120, 0, 0)]


def test_tensor_used_after_its_scope_recycled_it_raises():
    def kernel(tl, p):
        with tl.scope():
            x = tl.load(p, TILE, "f16")
        tl.exp(x)

    with pytest.raises(RecycledBufferError, match=r"tensor \(16, 32\) f16 .* buffer 0"):
        run(kernel)


def test_view_of_a_recycled_tile_is_recycled_too():
    def kernel(tl, p):
        with tl.scope():
            x = tl.load(p, TILE, "f16")
            row = x[0]
        row + 1

    with pytest.raises(RecycledBufferError):
        run(kernel)
