"""A class-based prefetcher, asked for the next tile only after this tile's work.

``TilePrefetcher`` holds the in-flight futures by tile index: ``prefetch(j)``
issues tile j's load, ``get(j)`` waits it (issuing it first if nobody did).
The kernel projects each 64x128 activation tile through one weight matrix. It
calls ``prefetch(j + 1)`` at the end of iteration j, after the GEMM, so the
load is waited at the top of the next iteration with nothing between: each
tile's transfer and latency are exposed. The fixed twin asks for tile j + 1
right after getting tile j, so the load runs under the GEMM.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB102",
    params=dict(n_tiles=32),
    pes=[0],
    sizes=[dict(n_tiles=4), dict(n_tiles=32)],
)

ROWS, D = 64, 128
TILE_BYTES = ROWS * D * 2


class TilePrefetcher:
    """In-flight loads of the tiles of one (n * ROWS, D) f16 matrix, by tile index."""

    def __init__(self, tl, base, n):
        self.tl, self.base, self.n = tl, base, n
        self.pending = {}

    def prefetch(self, j):
        if j < self.n and j not in self.pending:
            addr = self.base + j * TILE_BYTES
            self.pending[j] = self.tl.load_async(addr, (ROWS, D), "f16")  # expect: KB102

    def get(self, j):
        self.prefetch(j)
        return self.tl.wait(self.pending.pop(j))


def kernel_bug(tl, x_ptr, w_ptr, y_ptr, n_tiles):
    fw = tl.load_async(w_ptr, (D, D), "f16")
    tiles = TilePrefetcher(tl, x_ptr, n_tiles)
    tiles.prefetch(0)
    w = tl.wait(fw)
    for j in range(n_tiles):
        with tl.scope():
            x = tiles.get(j)
            y = tl.dot(x, w)
            tiles.prefetch(j + 1)  # expect-call
            tl.store(y_ptr + j * TILE_BYTES, y.to("f16"))


def kernel_fixed(tl, x_ptr, w_ptr, y_ptr, n_tiles):
    fw = tl.load_async(w_ptr, (D, D), "f16")
    tiles = TilePrefetcher(tl, x_ptr, n_tiles)
    tiles.prefetch(0)
    w = tl.wait(fw)
    for j in range(n_tiles):
        with tl.scope():
            x = tiles.get(j)
            tiles.prefetch(j + 1)
            y = tl.dot(x, w)
            tl.store(y_ptr + j * TILE_BYTES, y.to("f16"))


def _launch(kernel, n_tiles, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tiles * ROWS, D)).astype(np.float16)
    w = (rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float16)
    mem = Memory(size_bytes=2 * x.nbytes + w.nbytes + (1 << 16))
    x_ptr, w_ptr = mem.put(x), mem.put(w)
    y_ptr = mem.alloc(x.nbytes)

    def check(memory):
        want = x.astype(np.float32) @ w.astype(np.float32)
        got = memory.get(y_ptr, (n_tiles * ROWS, D), "f16").astype(np.float32)
        assert np.allclose(got, want, rtol=1e-2, atol=1e-2), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, w_ptr, y_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_tiles=32):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=32):
    return _launch(kernel_fixed, n_tiles)
