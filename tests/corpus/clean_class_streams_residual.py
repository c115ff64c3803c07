"""Clean: two class-based streams (activations and residuals), each a few tiles ahead.

``Stream`` keeps up to ``depth`` loads of one tiled matrix in flight;
``take()`` waits the oldest and issues the next. The kernel computes
y_j = x_j @ W + r_j. It takes x_j before the GEMM and r_j only after it,
where the residual is first used, and both streams refill as they are taken.
The GEMM engine runs from the first tile's arrival to the end.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

CLEAN = dict(
    params=dict(n_tiles=32),
    sizes=[dict(n_tiles=4), dict(n_tiles=32)],
    note="class-held futures, refilled on take, the residual taken at its first use",
)

ROWS, D = 64, 128
X_BYTES = ROWS * D * 2
R_BYTES = ROWS * D * 4


class Stream:
    """Loads of the (ROWS, D) tiles of one matrix, ``depth`` in flight, taken in order."""

    def __init__(self, tl, base, n, tile_bytes, dtype, depth=2):
        self.tl, self.base, self.n = tl, base, n
        self.tile_bytes, self.dtype = tile_bytes, dtype
        self.issued = 0
        self.pending = []
        for _ in range(depth):
            self._issue()

    def _issue(self):
        if self.issued < self.n:
            addr = self.base + self.issued * self.tile_bytes
            self.pending.append(self.tl.load_async(addr, (ROWS, D), self.dtype))
            self.issued += 1

    def take(self):
        tile = self.tl.wait(self.pending.pop(0))
        self._issue()
        return tile


def kernel(tl, x_ptr, r_ptr, w_ptr, y_ptr, n_tiles):
    fw = tl.load_async(w_ptr, (D, D), "f16")
    xs = Stream(tl, x_ptr, n_tiles, X_BYTES, "f16")
    rs = Stream(tl, r_ptr, n_tiles, R_BYTES, "f32")
    w = tl.wait(fw)
    for j in range(n_tiles):
        with tl.scope():
            s = tl.dot(xs.take(), w)
            tl.store(y_ptr + j * R_BYTES, s + rs.take())


def launch(n_tiles=32, seed=18):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tiles * ROWS, D)).astype(np.float16)
    r = rng.standard_normal((n_tiles * ROWS, D)).astype(np.float32)
    w = (rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + 2 * r.nbytes + w.nbytes + (1 << 16))
    x_ptr, r_ptr, w_ptr = mem.put(x), mem.put(r), mem.put(w)
    y_ptr = mem.alloc(r.nbytes)

    def check(memory):
        want = x.astype(np.float32) @ w.astype(np.float32) + r
        got = memory.get(y_ptr, want.shape, "f32")
        assert np.allclose(got, want, rtol=1e-3, atol=1e-3), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, r_ptr, w_ptr, y_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )
