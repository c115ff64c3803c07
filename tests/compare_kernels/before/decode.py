"""A small decode-style kernel, as first written: each tile is waited right after its issue."""

import numpy as np

from emulator import Memory
from emulator.scenarios import Scenario

TILE = 64


def kernel(tl, k_ptr, n_tiles):
    tile_bytes = TILE * 128 * 2
    for j in range(n_tiles):
        with tl.scope():
            f = tl.load_async(k_ptr + j * tile_bytes, (TILE, 128), "f16")
            k = tl.wait(f)
            m = tl.max(k, axis=1)
            s = tl.exp(tl.dot(k, tl.trans(k)) * 0.01)


def launch(n_tiles=6):
    mem = Memory(size_bytes=1 << 22)
    k_ptr = mem.put(np.ones((n_tiles * TILE, 128), np.float16))
    return Scenario(kernel=kernel, args=(k_ptr, n_tiles), grid=(1,), memory=mem)
