"""Three tiles of scaled self-similarity; the per-column gain is read with a blocking load first.

The gain is only needed by the final multiply of each tile, but ``tl.load``
makes the kernel sit out its whole transfer and latency before the first
tile's work can start. The fixed twin requests it with load_async and waits
for it where it is first used.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB101", params=dict(n_tiles=3), pes=[0])

S, D = 64, 128


def kernel_bug(tl, x_ptr, g_ptr, out_ptr, n_tiles):
    gain = tl.load(g_ptr, (S, S), "f32")  # expect: KB101
    tiles = [tl.load_async(x_ptr + i * S * D * 2, (S, D), "f16") for i in range(n_tiles)]
    for i in range(n_tiles):
        x = tl.wait(tiles[i])
        sim = tl.dot(x, tl.trans(x))
        tl.store(out_ptr + i * S * S * 4, sim * gain)


def kernel_fixed(tl, x_ptr, g_ptr, out_ptr, n_tiles):
    tiles = [tl.load_async(x_ptr + i * S * D * 2, (S, D), "f16") for i in range(n_tiles)]
    gain_future = tl.load_async(g_ptr, (S, S), "f32")
    gain = None
    for i in range(n_tiles):
        x = tl.wait(tiles[i])
        sim = tl.dot(x, tl.trans(x))
        if gain is None:
            gain = tl.wait(gain_future)
        tl.store(out_ptr + i * S * S * 4, sim * gain)


def _launch(kernel, n_tiles):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((n_tiles, S, D)).astype(np.float16)
    g = rng.uniform(0.5, 1.5, (S, S)).astype(np.float32)
    mem = Memory(size_bytes=x.nbytes + g.nbytes + n_tiles * S * S * 4 + 4096)
    x_ptr, g_ptr, out_ptr = mem.put(x), mem.put(g), mem.alloc(n_tiles * S * S * 4)

    def check(memory):
        xd = x.astype(np.float64)
        want = np.einsum("isd,itd->ist", xd, xd) * g
        got = memory.get(out_ptr, (n_tiles, S, S), "f32")
        assert np.allclose(got, want, rtol=1e-3, atol=1e-2)

    return Scenario(kernel, (x_ptr, g_ptr, out_ptr, n_tiles), (1,), mem, HardwareConfig(), check)


def launch_bug(n_tiles=3):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=3):
    return _launch(kernel_fixed, n_tiles)
