"""SiLU over row tiles, each output store waited right after it is issued.

y = x / (1 + exp(-x)) on (64, 256) f16 tiles, read through a two-deep
prefetch. Nothing in the kernel reads the outputs back and the kernel's end
drains every store anyway, but the bug waits each store where it is issued,
so every tile pays its 32 KB write and the HBM latency before the next tile's
work can start. The fixed twin drops the waits.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB108",
    params=dict(n_tiles=40),
    pes=[0],
    sizes=[dict(n_tiles=5), dict(n_tiles=40)],
)

ROWS, D = 64, 256
TILE_BYTES = ROWS * D * 2
DEPTH = 2


def kernel_bug(tl, x_ptr, y_ptr, n_tiles):
    xs = [tl.load_async(x_ptr + j * TILE_BYTES, (ROWS, D), "f16") for j in range(DEPTH)]
    for j in range(n_tiles):
        with tl.scope():
            x = tl.wait(xs.pop(0))
            if j + DEPTH < n_tiles:
                xs.append(tl.load_async(x_ptr + (j + DEPTH) * TILE_BYTES, (ROWS, D), "f16"))
            y = (x / (1.0 + tl.exp(-x))).to("f16")
            done = tl.store(y_ptr + j * TILE_BYTES, y)
            tl.wait(done)  # expect: KB108


def kernel_fixed(tl, x_ptr, y_ptr, n_tiles):
    xs = [tl.load_async(x_ptr + j * TILE_BYTES, (ROWS, D), "f16") for j in range(DEPTH)]
    for j in range(n_tiles):
        with tl.scope():
            x = tl.wait(xs.pop(0))
            if j + DEPTH < n_tiles:
                xs.append(tl.load_async(x_ptr + (j + DEPTH) * TILE_BYTES, (ROWS, D), "f16"))
            y = (x / (1.0 + tl.exp(-x))).to("f16")
            tl.store(y_ptr + j * TILE_BYTES, y)


def _launch(kernel, n_tiles, seed=8):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tiles * ROWS, D)).astype(np.float16)
    mem = Memory(size_bytes=2 * x.nbytes + (1 << 16))
    x_ptr, y_ptr = mem.put(x), mem.alloc(x.nbytes)

    def check(memory):
        xf = x.astype(np.float32)
        want = xf / (1.0 + np.exp(-xf))
        got = memory.get(y_ptr, x.shape, "f16").astype(np.float32)
        assert np.allclose(got, want, rtol=1e-2, atol=1e-2), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, y_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_tiles=40):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=40):
    return _launch(kernel_fixed, n_tiles)
