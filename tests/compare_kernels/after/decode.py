"""A small decode-style kernel, fixed: the next tile's load is issued before this tile's work."""

import numpy as np

from emulator import Memory
from emulator.scenarios import Scenario

TILE = 64


def kernel(tl, k_ptr, n_tiles):
    # Prefetch one tile ahead: the next transfer runs under this tile's dot.
    tile_bytes = TILE * 128 * 2
    fut = tl.load_async(k_ptr, (TILE, 128), "f16")
    for j in range(n_tiles):
        with tl.scope():
            k = tl.wait(fut)
            if j + 1 < n_tiles:
                fut = tl.load_async(k_ptr + (j + 1) * tile_bytes, (TILE, 128), "f16")
            s = tl.exp(tl.dot(k, tl.trans(k)) * 0.01)


def launch(n_tiles=6):
    mem = Memory(size_bytes=1 << 22)
    k_ptr = mem.put(np.ones((n_tiles * TILE, 128), np.float16))
    return Scenario(kernel=kernel, args=(k_ptr, n_tiles), grid=(1,), memory=mem)
