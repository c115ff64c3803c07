"""Clean: a gated projection fed by a modulo ring holding two streams per slot.

y_j = (x_j @ W) * g_j. Slot ``j % depth`` of the ring holds tile j's x and
gate loads; the slot is refilled with tile j + depth right after x_j is
waited, and g_j is waited only after the GEMM, where it is first used. The
GEMM (2,048 cycles a tile) outlasts the two transfers, so the GEMM engine is
busy from the first tile's arrival to the end.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

CLEAN = dict(
    params=dict(n_tiles=48),
    sizes=[dict(n_tiles=6), dict(n_tiles=48)],
    note="a modulo ring, two loads per slot, each waited at its first use",
)

ROWS, K, N = 64, 128, 64
X_BYTES = ROWS * K * 2
G_BYTES = ROWS * N * 2
Y_BYTES = ROWS * N * 4


def kernel(tl, x_ptr, g_ptr, w_ptr, y_ptr, n_tiles, depth=2):
    def issue(j):
        fx = tl.load_async(x_ptr + j * X_BYTES, (ROWS, K), "f16")
        fg = tl.load_async(g_ptr + j * G_BYTES, (ROWS, N), "f16")
        return fx, fg

    fw = tl.load_async(w_ptr, (K, N), "f16")
    ring = [None] * depth
    for j in range(min(depth, n_tiles)):
        ring[j % depth] = issue(j)
    w = tl.wait(fw)
    for j in range(n_tiles):
        with tl.scope():
            fx, fg = ring[j % depth]
            x = tl.wait(fx)
            if j + depth < n_tiles:
                ring[j % depth] = issue(j + depth)
            s = tl.dot(x, w)
            g = tl.wait(fg)
            tl.store(y_ptr + j * Y_BYTES, s * g)


def launch(n_tiles=48, seed=17):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tiles * ROWS, K)).astype(np.float16)
    g = rng.uniform(0, 1, (n_tiles * ROWS, N)).astype(np.float16)
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + g.nbytes + w.nbytes + n_tiles * Y_BYTES + (1 << 16))
    x_ptr, g_ptr, w_ptr = mem.put(x), mem.put(g), mem.put(w)
    y_ptr = mem.alloc(n_tiles * Y_BYTES)

    def check(memory):
        want = (x.astype(np.float32) @ w.astype(np.float32)) * g.astype(np.float32)
        got = memory.get(y_ptr, want.shape, "f32")
        assert np.allclose(got, want, rtol=1e-3, atol=1e-3), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, g_ptr, w_ptr, y_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )
