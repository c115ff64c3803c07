"""tl.composite: numerics per epilogue, the pipelining bound, scratch, recording, contention."""

from __future__ import annotations

import numpy as np
import pytest

from emulator import (
    EmulatorError,
    HardwareConfig,
    Memory,
    MemoryRecorder,
    ScratchOverflowError,
    ShapeError,
    run_kernel,
)
from emulator.scenarios import gemm_blocking, gemm_composite, gemm_pipeline
from emulator.trace.schema import Kind

M, K, N, TILE = 256, 64, 32, 32


def operands(seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float32)
    mem = Memory(1 << 20)
    return mem, a, b, bias, mem.put(a), mem.put(b), mem.put(bias), mem.alloc(M * N * 4)


def ref(a, b) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize(
    "epilogue, expected",
    [
        ([], lambda x, bias: x),
        ([("scale", 0.25)], lambda x, bias: x * 0.25),
        (["bias"], lambda x, bias: x + bias),
        ([("scale", 0.1), "exp"], lambda x, bias: np.exp(x * 0.1)),
        (["relu"], lambda x, bias: np.maximum(x, 0)),
        ([("cast", "f16")], lambda x, bias: x.astype(np.float16).astype(np.float64)),
    ],
    ids=["none", "scale", "bias", "scale-exp", "relu", "cast"],
)
def test_each_epilogue_matches_numpy(epilogue, expected):
    mem, a, b, bias, ap, bp, biasp, cp = operands()
    epilogues = [("bias", biasp) if e == "bias" else e for e in epilogue]

    def kernel(tl):
        tl.composite(ap, (M, K), bp, (K, N), cp, tile=TILE, epilogues=epilogues)

    run_kernel(kernel, memory=mem)
    got = mem.get(cp, (M, N), "f32")
    np.testing.assert_allclose(got, expected(ref(a, b), bias), rtol=2e-3, atol=2e-3)


def test_cast_epilogue_writes_the_cast_dtype():
    mem, a, b, _, ap, bp, _, cp = operands()

    def kernel(tl):
        tl.composite(
            ap, (M, K), bp, (K, N), cp, tile=TILE, epilogues=[("cast", "f16")], out_dtype="f16"
        )

    run_kernel(kernel, memory=mem)
    np.testing.assert_allclose(mem.get(cp, (M, N), "f16"), ref(a, b), rtol=1e-2, atol=5e-2)


def test_composite_ends_near_the_max_of_dma_and_compute_and_before_a_blocking_loop():
    composite = gemm_composite().run()
    blocking = gemm_blocking().run()
    dma = composite.busy_cycles["pe0.dma_read0"]
    compute = composite.busy_cycles["pe0.gemm"] + composite.busy_cycles["pe0.math"]
    bound = max(dma, compute)
    assert composite.end_time < blocking.end_time
    assert composite.end_time < dma + compute  # overlap is real
    assert composite.end_time <= 1.1 * bound


def test_composite_is_at_least_as_fast_as_the_kernel_written_depth_2_pipeline():
    composite = gemm_composite()
    pipeline = gemm_pipeline()
    c, p = composite.run(), pipeline.run()
    composite.check(composite.memory)
    pipeline.check(pipeline.memory)
    assert c.end_time <= p.end_time
    assert c.metrics["dma_read_count"] == p.metrics["dma_read_count"]


def test_every_tile_load_logs_one_dma_read_tied_to_the_composite_line():
    mem, _, _, _, ap, bp, biasp, cp = operands()
    rec = MemoryRecorder()

    def kernel(tl):
        epilogues = [("bias", biasp), "exp"]
        tl.composite(ap, (M, K), bp, (K, N), cp, tile=TILE, epilogues=epilogues)  # here

    result = run_kernel(kernel, memory=mem, recorder=rec)
    tiles = M // TILE
    # B, the bias, and one load per tile.
    assert result.metrics["dma_read_count"] == tiles + 2
    assert result.metrics["gemm_count"] == tiles
    assert result.metrics["math_count"] == 2 * tiles
    assert result.metrics["dma_write_count"] == tiles
    issues = [e for e in rec.events if e[0] == Kind.ISSUE]
    line = next(
        i
        for i, text in enumerate(open(__file__).read().splitlines(), 1)
        if text.rstrip().endswith("# here")
    )
    assert {e[-1].line for e in issues} == {line}
    ops = [e[4] for e in issues]
    assert ops[0] == "composite"
    assert ops.count("composite.load") == tiles + 2
    assert ops.count("composite.gemm") == tiles
    assert ops.count("composite.store") == tiles


def test_tile_buffers_are_recycled_as_tiles_finish():
    mem, _, _, _, ap, bp, _, cp = operands()
    rec = MemoryRecorder()
    config = HardwareConfig(composite_depth=2)

    def kernel(tl):
        tl.composite(ap, (M, K), bp, (K, N), cp, tile=TILE)

    result = run_kernel(kernel, memory=mem, config=config, recorder=rec)
    tile_bytes = TILE * K * 2
    assert result.scratch_peak[0] == K * N * 2 + 3 * tile_bytes
    allocs = sum(1 for e in rec.events if e[0] == Kind.SCRATCH_ALLOC)
    frees = sum(1 for e in rec.events if e[0] == Kind.SCRATCH_FREE)
    assert allocs == frees == M // TILE + 1
    in_use = [e for e in rec.events if e[0] == Kind.SCRATCH_FREE][-1][-1]
    assert in_use == 0


def test_depth_that_does_not_fit_in_scratch_fails_with_a_clear_error():
    mem, _, _, _, ap, bp, _, cp = operands()
    need = K * N * 2 + 3 * TILE * K * 2
    config = HardwareConfig(scratch_bytes=need - 1, composite_depth=2)

    def kernel(tl):
        tl.composite(ap, (M, K), bp, (K, N), cp, tile=TILE)

    with pytest.raises(ScratchOverflowError) as err:
        run_kernel(kernel, memory=mem, config=config)
    message = str(err.value)
    assert "PE 0" in message and "test_composite.py" in message
    assert f"needs {need} bytes" in message and "composite_depth" in message
    run_kernel(kernel, memory=mem, config=config.replace(scratch_bytes=need))


def test_bad_shapes_and_epilogues_are_refused():
    mem, _, _, _, ap, bp, _, cp = operands()

    def bad_shape(tl):
        tl.composite(ap, (M, K), bp, (K + 1, N), cp, tile=TILE)

    def bad_epilogue(tl):
        tl.composite(ap, (M, K), bp, (K, N), cp, tile=TILE, epilogues=["sqrt"])

    with pytest.raises(ShapeError, match="A \\(M, K\\) and B \\(K, N\\)"):
        run_kernel(bad_shape, memory=mem)
    with pytest.raises(EmulatorError, match="bad epilogue 'sqrt'"):
        run_kernel(bad_epilogue, memory=mem)


def test_composite_contends_with_the_kernels_own_load_async_for_the_read_channel():
    mem, a, b, _, ap, bp, _, cp = operands()
    rec = MemoryRecorder()
    other = mem.put(np.ones((256, 128), np.float16))

    def kernel(tl):
        fut = tl.load_async(other, (256, 128), "f16")
        tl.composite(ap, (M, K), bp, (K, N), cp, tile=TILE)
        tl.wait(fut)

    alone = run_kernel(lambda tl: tl.composite(ap, (M, K), bp, (K, N), cp, tile=TILE), memory=mem)
    shared = run_kernel(kernel, memory=mem, recorder=rec)
    # The composite's first load queued behind the kernel's 64 KiB load.
    requests = {e[4]: e[1] for e in rec.events if e[0] == Kind.CHAN_REQUEST}
    grants = {e[4]: e[1] for e in rec.events if e[0] == Kind.CHAN_GRANT}
    queued = [cmd for cmd in requests if grants[cmd] > requests[cmd]]
    assert queued, "no command waited for the read channel"
    assert shared.end_time > alone.end_time
    np.testing.assert_allclose(mem.get(cp, (M, N), "f32"), ref(a, b), rtol=2e-3, atol=2e-3)
