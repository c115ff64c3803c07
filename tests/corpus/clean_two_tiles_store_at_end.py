"""Clean: two tiles, both requested up front and consumed in order; one store at the very end."""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

CLEAN = dict(params=dict(), note="short 2-tile kernel, store at the end")

S, D = 64, 128


def kernel(tl, x_ptr, out_ptr):
    first = tl.load_async(x_ptr, (S, D), "f16")
    second = tl.load_async(x_ptr + S * D * 2, (S, D), "f16")
    a = tl.wait(first)
    g = tl.dot(a, tl.trans(a))
    b = tl.wait(second)
    g = g + tl.dot(b, tl.trans(b))
    tl.store(out_ptr, g * (1.0 / D))


def launch():
    rng = np.random.default_rng(32)
    x = rng.standard_normal((2, S, D)).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + S * S * 4 + 4096)
    x_ptr, out_ptr = mem.put(x), mem.alloc(S * S * 4)

    def check(memory):
        xd = x.astype(np.float64)
        want = (xd[0] @ xd[0].T + xd[1] @ xd[1].T) / D
        assert np.allclose(memory.get(out_ptr, (S, S), "f32"), want, rtol=1e-3, atol=1e-2)

    return Scenario(kernel, (x_ptr, out_ptr), (1,), mem, HardwareConfig(), check)
