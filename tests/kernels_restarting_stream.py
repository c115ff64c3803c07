"""A K-loop whose 2-deep prefetch starts over for every output tile: each iteration's
work covers a tile's transfer, yet the first waits of each tile stall."""

from __future__ import annotations

import numpy as np

from emulator import Memory
from emulator.scenarios import Scenario

T = 64
TILE_BYTES = T * T * 2


def per_tile_kernel(tl, x_ptr, y_ptr, n_out, n_k):
    for o in range(n_out):
        with tl.scope():
            base = x_ptr + o * n_k * TILE_BYTES
            f = [
                tl.load_async(base, (T, T), "f16"),
                tl.load_async(base + TILE_BYTES, (T, T), "f16"),
            ]
            acc = tl.zeros((T, T))
            for k in range(n_k):
                x = tl.wait(f[k % 2])  # mark: wait
                if k + 2 < n_k:
                    f[k % 2] = tl.load_async(base + (k + 2) * TILE_BYTES, (T, T), "f16")
                acc = acc + tl.dot(x, tl.trans(x))
            tl.wait(tl.store(y_ptr + o * T * T * 4, acc))


def launch(n_out=6, n_k=4):
    mem = Memory(size_bytes=1 << 24)
    x = np.random.default_rng(3).standard_normal((n_out * n_k * T, T)).astype(np.float16)
    x_ptr = mem.put(x, name="X")
    y_ptr = mem.alloc(n_out * T * T * 4)
    return Scenario(kernel=per_tile_kernel, args=(x_ptr, y_ptr, n_out, n_k), grid=(1,), memory=mem)
