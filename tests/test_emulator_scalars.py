"""A numpy scalar in a tile's arithmetic is weakly typed, as in Triton: the tile keeps its dtype."""

from __future__ import annotations

import numpy as np
import pytest

from emulator import HardwareConfig, Memory, run_kernel


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_numpy_scalars_keep_the_tile_s_dtype_and_a_store_its_bytes(dtype):
    """np.float64(0.5) * an f32 tile used to make it f64: its store then wrote twice the
    tile's bytes, over the next PE's output (held-out: a paged-attention decode)."""
    seen = []

    def kernel(tl, src, dst):
        x = tl.load(src, (4,), dtype)
        for y in (x * np.float64(0.5), np.float32(2.0) * x, x + np.int64(3), x / np.float16(2)):
            seen.append(y.dtype)
        tl.store(dst, x * np.float64(0.5))

    np_dtype = {"f16": np.float16, "f32": np.float32}[dtype]
    memory = Memory(1024)
    src = memory.put(np.full(4, 3.0, np_dtype))
    dst = memory.put(np.full(8, 7.0, np_dtype))  # 4 for the result, 4 that must stay 7
    run_kernel(kernel, (src, dst), (1,), memory, HardwareConfig())
    assert seen == [dtype] * 4
    np.testing.assert_array_equal(memory.get(dst, (8,), dtype), [1.5] * 4 + [7.0] * 4)
