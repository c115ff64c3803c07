"""Two passes through an HBM workspace; pass 1 waits every workspace store at once.

y = exp(x) / sum(exp(x)) over a whole (n * 64, 128) f32 matrix. Pass 1 writes
each tile's exp to a workspace and keeps the running sum; pass 2 reloads the
tiles and scales them by the inverse sum. A reload must not be issued before
its tile's store landed, so the stores do need a wait, but the bug waits each
one right after issuing it, stalling pass 1 for a write and the HBM latency
per tile. The fixed twin keeps the handles and waits each store right before
the load that reads it back.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB108",
    params=dict(n_tiles=32),
    pes=[0],
    sizes=[dict(n_tiles=4), dict(n_tiles=32)],
)

ROWS, D = 64, 128
TILE_BYTES = ROWS * D * 4
DEPTH = 2


def kernel_bug(tl, x_ptr, ws_ptr, y_ptr, n_tiles):
    xs = [tl.load_async(x_ptr + j * TILE_BYTES, (ROWS, D), "f32") for j in range(DEPTH)]
    total = tl.zeros((), "f32")
    for j in range(n_tiles):
        with tl.scope():
            x = tl.wait(xs.pop(0))
            if j + DEPTH < n_tiles:
                xs.append(tl.load_async(x_ptr + (j + DEPTH) * TILE_BYTES, (ROWS, D), "f32"))
            e = tl.exp(x)
            total = total + tl.sum(e)
            stored = tl.store(ws_ptr + j * TILE_BYTES, e)
            tl.wait(stored)  # expect: KB108
    inv = 1.0 / total
    back = [tl.load_async(ws_ptr + j * TILE_BYTES, (ROWS, D), "f32") for j in range(DEPTH)]
    for j in range(n_tiles):
        with tl.scope():
            e = tl.wait(back.pop(0))
            if j + DEPTH < n_tiles:
                back.append(tl.load_async(ws_ptr + (j + DEPTH) * TILE_BYTES, (ROWS, D), "f32"))
            tl.store(y_ptr + j * TILE_BYTES, e * inv)


def kernel_fixed(tl, x_ptr, ws_ptr, y_ptr, n_tiles):
    xs = [tl.load_async(x_ptr + j * TILE_BYTES, (ROWS, D), "f32") for j in range(DEPTH)]
    total = tl.zeros((), "f32")
    stored = []
    for j in range(n_tiles):
        with tl.scope():
            x = tl.wait(xs.pop(0))
            if j + DEPTH < n_tiles:
                xs.append(tl.load_async(x_ptr + (j + DEPTH) * TILE_BYTES, (ROWS, D), "f32"))
            e = tl.exp(x)
            total = total + tl.sum(e)
            stored.append(tl.store(ws_ptr + j * TILE_BYTES, e))

    def reload(j):
        tl.wait(stored[j])  # the workspace tile must have landed
        return tl.load_async(ws_ptr + j * TILE_BYTES, (ROWS, D), "f32")

    back = [reload(j) for j in range(DEPTH)]
    inv = 1.0 / total
    for j in range(n_tiles):
        with tl.scope():
            e = tl.wait(back.pop(0))
            if j + DEPTH < n_tiles:
                back.append(reload(j + DEPTH))
            tl.store(y_ptr + j * TILE_BYTES, e * inv)


def _launch(kernel, n_tiles, seed=7):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tiles * ROWS, D)).astype(np.float32)
    mem = Memory(size_bytes=3 * x.nbytes + (1 << 16))
    x_ptr, ws_ptr, y_ptr = mem.put(x), mem.alloc(x.nbytes), mem.alloc(x.nbytes)

    def check(memory):
        e = np.exp(x.astype(np.float64))
        want = e / e.sum()
        got = memory.get(y_ptr, x.shape, "f32")
        assert np.allclose(got, want, rtol=1e-4, atol=1e-9), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, ws_ptr, y_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_tiles=32):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=32):
    return _launch(kernel_fixed, n_tiles)
