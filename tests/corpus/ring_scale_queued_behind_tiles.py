"""A modulo ring of wide tiles two ahead, and a per-tile scale one ahead issued behind them.

y_j = (x_j @ W) * s_j with x_j a (64, 512) f16 tile (64 KB) and s_j a
64-entry f32 scale. The x tiles come through ``futs[j % 2]``, refilled two
tiles ahead; the tiny scale is fetched one tile ahead. The bug issues the
next scale after the ring's refill, so it waits behind a 64 KB transfer that
is needed a tile later, and every tile starts a transfer and a latency late:
the read channel idles while the kernel waits for four bytes a row. The fixed
twin issues the scale first.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB103",
    params=dict(n_tiles=32),
    pes=[0],
    sizes=[dict(n_tiles=6), dict(n_tiles=32)],
)

ROWS, K, N = 64, 512, 8
X_BYTES = ROWS * K * 2
S_BYTES = ROWS * 4
Y_BYTES = ROWS * N * 4
DEPTH = 2


def kernel_bug(tl, x_ptr, s_ptr, w_ptr, y_ptr, n_tiles):
    fw = tl.load_async(w_ptr, (K, N), "f16")
    futs = [None] * DEPTH
    for j in range(min(DEPTH, n_tiles)):
        futs[j % DEPTH] = tl.load_async(x_ptr + j * X_BYTES, (ROWS, K), "f16")
    fs = tl.load_async(s_ptr, (ROWS, 1), "f32")
    w = tl.wait(fw)
    for j in range(n_tiles):
        with tl.scope():
            x = tl.wait(futs[j % DEPTH])
            s = tl.wait(fs)
            if j + DEPTH < n_tiles:
                futs[j % DEPTH] = tl.load_async(x_ptr + (j + DEPTH) * X_BYTES, (ROWS, K), "f16")
            if j + 1 < n_tiles:
                fs = tl.load_async(s_ptr + (j + 1) * S_BYTES, (ROWS, 1), "f32")  # expect: KB103
            tl.store(y_ptr + j * Y_BYTES, tl.dot(x, w) * s)


def kernel_fixed(tl, x_ptr, s_ptr, w_ptr, y_ptr, n_tiles):
    fw = tl.load_async(w_ptr, (K, N), "f16")
    futs = [None] * DEPTH
    fs = tl.load_async(s_ptr, (ROWS, 1), "f32")
    for j in range(min(DEPTH, n_tiles)):
        futs[j % DEPTH] = tl.load_async(x_ptr + j * X_BYTES, (ROWS, K), "f16")
    w = tl.wait(fw)
    for j in range(n_tiles):
        with tl.scope():
            x = tl.wait(futs[j % DEPTH])
            s = tl.wait(fs)
            if j + 1 < n_tiles:
                fs = tl.load_async(s_ptr + (j + 1) * S_BYTES, (ROWS, 1), "f32")
            if j + DEPTH < n_tiles:
                futs[j % DEPTH] = tl.load_async(x_ptr + (j + DEPTH) * X_BYTES, (ROWS, K), "f16")
            tl.store(y_ptr + j * Y_BYTES, tl.dot(x, w) * s)


def _launch(kernel, n_tiles, seed=21):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tiles * ROWS, K)).astype(np.float16)
    s = rng.uniform(0.5, 2.0, (n_tiles * ROWS, 1)).astype(np.float32)
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + s.nbytes + w.nbytes + n_tiles * Y_BYTES + (1 << 16))
    x_ptr, s_ptr, w_ptr = mem.put(x), mem.put(s), mem.put(w)
    y_ptr = mem.alloc(n_tiles * Y_BYTES)

    def check(memory):
        want = (x.astype(np.float32) @ w.astype(np.float32)) * s
        got = memory.get(y_ptr, want.shape, "f32")
        assert np.allclose(got, want, rtol=1e-3, atol=1e-3), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, s_ptr, w_ptr, y_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_tiles=32):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=32):
    return _launch(kernel_fixed, n_tiles)
