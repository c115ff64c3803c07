"""Clean: a two-pass normalisation that spills its intermediate and reads it back.

Pass one writes the scaled tile to a workspace; the only ``tl.wait`` is on that
store, a fence the read-back of the same range genuinely needs.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

CLEAN = dict(params=dict(), note="the only tl.wait is a needed fence before a reload")

R, C = 64, 128


def kernel(tl, x_ptr, ws_ptr, out_ptr):
    x = tl.load(x_ptr, (R, C), "f32")
    scaled = x * (1.0 / tl.max(x))
    fence = tl.store(ws_ptr, scaled)
    tl.wait(fence)
    back = tl.load(ws_ptr, (R, C), "f32")
    tl.store(out_ptr, tl.exp(back))


def launch():
    rng = np.random.default_rng(33)
    x = rng.uniform(0.1, 2.0, (R, C)).astype(np.float32)
    mem = Memory(size_bytes=3 * x.nbytes + 4096)
    x_ptr, ws_ptr, out_ptr = mem.put(x), mem.alloc(x.nbytes), mem.alloc(x.nbytes)

    def check(memory):
        want = np.exp(x / x.max())
        assert np.allclose(memory.get(out_ptr, (R, C), "f32"), want, rtol=1e-5)

    return Scenario(kernel, (x_ptr, ws_ptr, out_ptr), (1,), mem, HardwareConfig(), check)
