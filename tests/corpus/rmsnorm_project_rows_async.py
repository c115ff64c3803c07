"""RMSNorm then a projection, row block by row block, in f32; compute-bound.

Each (32, 256) f32 row block is fetched with load_async and waited on the
very next line, although the previous block's 4096-cycle projection could
have covered its 683-cycle transfer and 500-cycle latency. Fixed: the next
block is requested before the current one is worked on.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB102", params=dict(n_blocks=12), pes=[0])

R, C, P = 32, 256, 128
ROW_BYTES = R * C * 4


def _rmsnorm_project(tl, x, w):
    ms = tl.sum(x * x, axis=1) * (1.0 / C)
    inv = 1.0 / tl.exp(tl.log(ms + 1e-6) * 0.5)
    return tl.dot(x * inv[:, None], w)


def kernel_bug(tl, x_ptr, w_ptr, y_ptr, n_blocks):
    w = tl.load(w_ptr, (C, P), "f32")
    for b in range(n_blocks):
        with tl.scope():
            pending = tl.load_async(x_ptr + b * ROW_BYTES, (R, C), "f32")  # expect: KB102
            x = tl.wait(pending)
            tl.store(y_ptr + b * R * P * 4, _rmsnorm_project(tl, x, w))


def kernel_fixed(tl, x_ptr, w_ptr, y_ptr, n_blocks):
    w_async = tl.load_async(w_ptr, (C, P), "f32")
    pending = tl.load_async(x_ptr, (R, C), "f32")
    w = tl.wait(w_async)
    for b in range(n_blocks):
        with tl.scope():
            x = tl.wait(pending)
            if b + 1 < n_blocks:
                pending = tl.load_async(x_ptr + (b + 1) * ROW_BYTES, (R, C), "f32")
            tl.store(y_ptr + b * R * P * 4, _rmsnorm_project(tl, x, w))


def _launch(kernel, n_blocks):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((n_blocks * R, C)).astype(np.float32)
    w = (rng.standard_normal((C, P)) / 16).astype(np.float32)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + n_blocks * R * P * 4 + 4096)
    x_ptr, w_ptr, y_ptr = mem.put(x), mem.put(w), mem.alloc(n_blocks * R * P * 4)

    def check(memory):
        xn = x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + 1e-6)
        got = memory.get(y_ptr, (n_blocks * R, P), "f32")
        assert np.allclose(got, xn @ w, atol=1e-3, rtol=1e-3)

    return Scenario(kernel, (x_ptr, w_ptr, y_ptr, n_blocks), (1,), mem, HardwareConfig(), check)


def launch_bug(n_blocks=12):
    return _launch(kernel_bug, n_blocks)


def launch_fixed(n_blocks=12):
    return _launch(kernel_fixed, n_blocks)
