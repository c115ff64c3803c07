"""A circular cache of three tiles for a 3-point stencil; each new tile is a blocking load.

out_j = 0.25 * x_{j-1} + 0.5 * x_j + 0.25 * x_{j+1} over row tiles (clamped at
both ends). Each tile is used by three outputs, so the kernel keeps the last
three in ``cache[j % 3]`` and loads one new tile per output. The bug loads it
with ``tl.load`` at the top of the iteration: the transfer and the HBM latency
are exposed every tile, though the tile's address is known from the start.
The fixed twin keeps the next two tiles in flight and moves each into the
cache when it is needed.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB101",
    params=dict(n_tiles=48),
    pes=[0],
    sizes=[dict(n_tiles=5), dict(n_tiles=48)],
)

ROWS, D = 64, 128
TILE_BYTES = ROWS * D * 4  # f32
SLOTS = 3


def _stencil(tl, cache, j, n_tiles):
    left = cache[max(j - 1, 0) % SLOTS]
    mid = cache[j % SLOTS]
    right = cache[min(j + 1, n_tiles - 1) % SLOTS]
    return (left + right) * 0.25 + mid * 0.5


def kernel_bug(tl, x_ptr, y_ptr, n_tiles):
    cache = [None] * SLOTS
    cache[0] = tl.load(x_ptr, (ROWS, D), "f32")
    for j in range(n_tiles):
        if j + 1 < n_tiles:
            if j + 1 >= SLOTS:
                tl.free(cache[(j + 1) % SLOTS])  # x_{j-2} is no longer needed
            new = x_ptr + (j + 1) * TILE_BYTES
            cache[(j + 1) % SLOTS] = tl.load(new, (ROWS, D), "f32")  # expect: KB101
        tl.store(y_ptr + j * TILE_BYTES, _stencil(tl, cache, j, n_tiles))


def kernel_fixed(tl, x_ptr, y_ptr, n_tiles, ahead=2):
    cache = [None] * SLOTS
    coming = {}
    for i in range(min(1 + ahead, n_tiles)):
        coming[i] = tl.load_async(x_ptr + i * TILE_BYTES, (ROWS, D), "f32")
    cache[0] = tl.wait(coming.pop(0))
    for j in range(n_tiles):
        if j + 1 < n_tiles:
            if j + 1 >= SLOTS:
                tl.free(cache[(j + 1) % SLOTS])
            cache[(j + 1) % SLOTS] = tl.wait(coming.pop(j + 1))
            if j + 1 + ahead < n_tiles:
                nxt = j + 1 + ahead
                coming[nxt] = tl.load_async(x_ptr + nxt * TILE_BYTES, (ROWS, D), "f32")
        tl.store(y_ptr + j * TILE_BYTES, _stencil(tl, cache, j, n_tiles))


def _launch(kernel, n_tiles, seed=5):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tiles, ROWS, D)).astype(np.float32)
    mem = Memory(size_bytes=2 * x.nbytes + (1 << 16))
    x_ptr = mem.put(x)
    y_ptr = mem.alloc(x.nbytes)

    def check(memory):
        left = np.concatenate([x[:1], x[:-1]])
        right = np.concatenate([x[1:], x[-1:]])
        want = (left + right) * 0.25 + x * 0.5
        got = memory.get(y_ptr, x.shape, "f32")
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, y_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_tiles=48):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=48):
    return _launch(kernel_fixed, n_tiles)
