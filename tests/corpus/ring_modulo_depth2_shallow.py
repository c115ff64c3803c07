"""A modulo ring of prefetched tiles, two slots deep, on a kernel that outruns it.

``futs[j % depth]`` holds tile j's load; the slot is refilled with tile
j + depth right after tile j is waited, as early as the ring allows. Each tile
is a thin projection (64x128 by 128x8, 256 GEMM cycles) and a row sum, less
work than the tile's 16 KB transfer, so the read channel should run back to
back; but two slots cover two transfers, not two transfers plus the 500-cycle
HBM latency, and every tile stalls. The fixed twin's ring has three slots.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB107",
    params=dict(n_tiles=64),
    pes=[0],
    sizes=[dict(n_tiles=6), dict(n_tiles=64)],
)

ROWS, D, OUT = 64, 128, 8
TILE_BYTES = ROWS * D * 2
OUT_BYTES = ROWS * OUT * 4


def kernel_bug(tl, x_ptr, w_ptr, y_ptr, n_tiles, depth=2):
    fw = tl.load_async(w_ptr, (D, OUT), "f16")
    futs = [None] * depth
    for j in range(min(depth, n_tiles)):
        futs[j % depth] = tl.load_async(x_ptr + j * TILE_BYTES, (ROWS, D), "f16")
    w = tl.wait(fw)
    for j in range(n_tiles):
        with tl.scope():
            x = tl.wait(futs[j % depth])
            if j + depth < n_tiles:
                nxt = x_ptr + (j + depth) * TILE_BYTES
                futs[j % depth] = tl.load_async(nxt, (ROWS, D), "f16")  # expect: KB107
            y = tl.dot(x, w)
            tl.store(y_ptr + j * OUT_BYTES, y)


def kernel_fixed(tl, x_ptr, w_ptr, y_ptr, n_tiles, depth=3):
    fw = tl.load_async(w_ptr, (D, OUT), "f16")
    futs = [None] * depth
    for j in range(min(depth, n_tiles)):
        futs[j % depth] = tl.load_async(x_ptr + j * TILE_BYTES, (ROWS, D), "f16")
    w = tl.wait(fw)
    for j in range(n_tiles):
        with tl.scope():
            x = tl.wait(futs[j % depth])
            if j + depth < n_tiles:
                nxt = x_ptr + (j + depth) * TILE_BYTES
                futs[j % depth] = tl.load_async(nxt, (ROWS, D), "f16")
            y = tl.dot(x, w)
            tl.store(y_ptr + j * OUT_BYTES, y)


def _launch(kernel, n_tiles, seed=4):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tiles * ROWS, D)).astype(np.float16)
    w = rng.standard_normal((D, OUT)).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + n_tiles * OUT_BYTES + (1 << 16))
    x_ptr, w_ptr = mem.put(x), mem.put(w)
    y_ptr = mem.alloc(n_tiles * OUT_BYTES)

    def check(memory):
        want = x.astype(np.float32) @ w.astype(np.float32)
        got = memory.get(y_ptr, (n_tiles * ROWS, OUT), "f32")
        assert np.allclose(got, want, rtol=1e-3, atol=1e-2), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, w_ptr, y_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_tiles=64):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=64):
    return _launch(kernel_fixed, n_tiles)
