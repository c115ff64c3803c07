"""GEMM + bias + ReLU epilogue over row tiles; every output tile's store is waited at once.

Nothing later reads C, yet each ``tl.wait`` on the store's handle makes the
kernel sit out the write's transfer and 500-cycle latency before it moves on
to the next tile. The fixed twin lets the stores drain on their own.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB108", params=dict(m=1024), pes=[0])

TILE, K, N = 64, 256, 16


def kernel_bug(tl, a_ptr, b_ptr, bias_ptr, c_ptr, m):
    b_f = tl.load_async(b_ptr, (K, N), "f16")
    bias_f = tl.load_async(bias_ptr, (N,), "f32")
    rows = [tl.load_async(a_ptr + i * TILE * K * 2, (TILE, K), "f16") for i in range(2)]
    b, bias = tl.wait(b_f), tl.wait(bias_f)
    for i in range(m // TILE):
        with tl.scope():
            a = tl.wait(rows.pop(0))
            if i + 2 < m // TILE:
                rows.append(tl.load_async(a_ptr + (i + 2) * TILE * K * 2, (TILE, K), "f16"))
            c = tl.maximum(tl.dot(a, b) + bias, 0.0)
            done = tl.store(c_ptr + i * TILE * N * 4, c)
            tl.wait(done)  # expect: KB108


def kernel_fixed(tl, a_ptr, b_ptr, bias_ptr, c_ptr, m):
    b_f = tl.load_async(b_ptr, (K, N), "f16")
    bias_f = tl.load_async(bias_ptr, (N,), "f32")
    rows = [tl.load_async(a_ptr + i * TILE * K * 2, (TILE, K), "f16") for i in range(2)]
    b, bias = tl.wait(b_f), tl.wait(bias_f)
    for i in range(m // TILE):
        with tl.scope():
            a = tl.wait(rows.pop(0))
            if i + 2 < m // TILE:
                rows.append(tl.load_async(a_ptr + (i + 2) * TILE * K * 2, (TILE, K), "f16"))
            c = tl.maximum(tl.dot(a, b) + bias, 0.0)
            tl.store(c_ptr + i * TILE * N * 4, c)


def _launch(kernel, m):
    rng = np.random.default_rng(17)
    a = rng.standard_normal((m, K)).astype(np.float16)
    b = (rng.standard_normal((K, N)) / 8).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float32)
    mem = Memory(size_bytes=a.nbytes + b.nbytes + m * N * 4 + 4096)
    a_ptr, b_ptr, bias_ptr, c_ptr = mem.put(a), mem.put(b), mem.put(bias), mem.alloc(m * N * 4)

    def check(memory):
        want = np.maximum(a.astype(np.float64) @ b + bias, 0)
        assert np.allclose(memory.get(c_ptr, (m, N), "f32"), want, rtol=1e-3, atol=1e-2)

    return Scenario(kernel, (a_ptr, b_ptr, bias_ptr, c_ptr, m), (1,), mem, HardwareConfig(), check)


def launch_bug(m=1024):
    return _launch(kernel_bug, m)


def launch_fixed(m=1024):
    return _launch(kernel_fixed, m)
