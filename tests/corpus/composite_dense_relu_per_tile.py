"""A dense + bias + ReLU layer as one tl.composite per 32-row tile, through a helper.

``dense_relu`` computes relu(X @ W + b) cast to f16 with one ``tl.composite``
and its epilogues. The kernel calls it once per 32-row tile of X, with the
same W (256, 64) and bias every time: each call reads W and its first X tile
cold and drains its output before the next starts, so the GEMM engine idles
for a weight transfer, a tile transfer and two HBM latencies per tile. The
fixed twin calls the helper once over all the rows.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB110",
    params=dict(n_tiles=48),
    pes=[0],
    sizes=[dict(n_tiles=6), dict(n_tiles=48)],
)

TILE, K, N = 32, 256, 64
X_TILE_BYTES = TILE * K * 2
Y_TILE_BYTES = TILE * N * 2


def dense_relu(tl, x_ptr, rows, w_ptr, bias_ptr, y_ptr):
    epilogues = [("bias", bias_ptr), "relu", ("cast", "f16")]
    opts = dict(tile=TILE, epilogues=epilogues, out_dtype="f16")
    tl.composite(x_ptr, (rows, K), w_ptr, (K, N), y_ptr, **opts)  # expect: KB110


def kernel_bug(tl, x_ptr, w_ptr, bias_ptr, y_ptr, n_tiles):
    for i in range(n_tiles):
        x_at, y_at = x_ptr + i * X_TILE_BYTES, y_ptr + i * Y_TILE_BYTES
        dense_relu(tl, x_at, TILE, w_ptr, bias_ptr, y_at)  # expect-call


def kernel_fixed(tl, x_ptr, w_ptr, bias_ptr, y_ptr, n_tiles):
    dense_relu(tl, x_ptr, n_tiles * TILE, w_ptr, bias_ptr, y_ptr)


def _launch(kernel, n_tiles, seed=10):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tiles * TILE, K)).astype(np.float16)
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float32)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + n_tiles * Y_TILE_BYTES + (1 << 16))
    x_ptr, w_ptr, bias_ptr = mem.put(x), mem.put(w), mem.put(bias)
    y_ptr = mem.alloc(n_tiles * Y_TILE_BYTES)

    def check(memory):
        want = np.maximum(x.astype(np.float32) @ w.astype(np.float32) + bias, 0)
        got = memory.get(y_ptr, want.shape, "f16").astype(np.float32)
        assert np.allclose(got, want, rtol=1e-2, atol=1e-2), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, w_ptr, bias_ptr, y_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_tiles=48):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=48):
    return _launch(kernel_fixed, n_tiles)
