"""Gated projection: each block's input is requested after the previous block's big GEMM.

The load_async is issued late - after the 2048-cycle GEMM it could have run
under - and only a short gate computation separates it from its wait: KB102
(the issue could move above earlier work) names the issue line. The fixed twin
issues the next block before the GEMM.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB102", params=dict(n_blocks=16), pes=[0])

R, D = 32, 128
BLK = R * D * 2


def kernel_bug(tl, x_ptr, w_ptr, y_ptr, n_blocks):
    w_f = tl.load_async(w_ptr, (D, D), "f16")
    cur = tl.load_async(x_ptr, (R, D), "f16")
    w = tl.wait(w_f)
    for b in range(n_blocks):
        with tl.scope():
            x = tl.wait(cur)
            y = tl.dot(x, w)
            if b + 1 < n_blocks:
                cur = tl.load_async(x_ptr + (b + 1) * BLK, (R, D), "f16")  # expect: KB102
            gate = tl.exp(tl.max(y, axis=1) * -0.01)
            tl.store(y_ptr + b * R * D * 4, y * gate[:, None])


def kernel_fixed(tl, x_ptr, w_ptr, y_ptr, n_blocks):
    w_f = tl.load_async(w_ptr, (D, D), "f16")
    cur = tl.load_async(x_ptr, (R, D), "f16")
    w = tl.wait(w_f)
    for b in range(n_blocks):
        with tl.scope():
            x = tl.wait(cur)
            if b + 1 < n_blocks:
                cur = tl.load_async(x_ptr + (b + 1) * BLK, (R, D), "f16")
            y = tl.dot(x, w)
            gate = tl.exp(tl.max(y, axis=1) * -0.01)
            tl.store(y_ptr + b * R * D * 4, y * gate[:, None])


def _launch(kernel, n_blocks):
    rng = np.random.default_rng(23)
    x = rng.standard_normal((n_blocks * R, D)).astype(np.float16)
    w = (rng.standard_normal((D, D)) / 8).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + n_blocks * R * D * 4 + 4096)
    x_ptr, w_ptr, y_ptr = mem.put(x), mem.put(w), mem.alloc(n_blocks * R * D * 4)

    def check(memory):
        y = x.astype(np.float64) @ w
        y = y.reshape(n_blocks, R, D)
        want = y * np.exp(y.max(axis=2, keepdims=True) * -0.01)
        got = memory.get(y_ptr, (n_blocks, R, D), "f32")
        assert np.allclose(got, want, rtol=1e-3, atol=1e-2)

    return Scenario(kernel, (x_ptr, w_ptr, y_ptr, n_blocks), (1,), mem, HardwareConfig(), check)


def launch_bug(n_blocks=16):
    return _launch(kernel_bug, n_blocks)


def launch_fixed(n_blocks=16):
    return _launch(kernel_fixed, n_blocks)
