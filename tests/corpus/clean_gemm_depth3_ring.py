"""Clean: a GEMM stream with a three-deep rotating buffer, more depth than it strictly needs."""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

CLEAN = dict(params=dict(n=40), note="depth 3, loads issued in wait order")

M, K, N = 32, 128, 32


def kernel(tl, a_ptr, b_ptr, c_ptr, n):
    a_pending = tl.load_async(a_ptr, (M, K), "f16")
    slot = [None, None, None]
    for i in range(3):
        slot[i] = tl.load_async(b_ptr + i * K * N * 2, (K, N), "f16")
    a = tl.wait(a_pending)
    acc = tl.zeros((M, N))
    for i in range(n):
        with tl.scope():
            b = tl.wait(slot[i % 3])
            if i + 3 < n:
                slot[i % 3] = tl.load_async(b_ptr + (i + 3) * K * N * 2, (K, N), "f16")
            acc = acc + tl.dot(a, b)
    tl.store(c_ptr, acc)


def launch(n=40):
    rng = np.random.default_rng(30)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = (rng.standard_normal((n, K, N)) / 8).astype(np.float16)
    mem = Memory(size_bytes=a.nbytes + b.nbytes + M * N * 4 + 4096)
    a_ptr, b_ptr, c_ptr = mem.put(a), mem.put(b), mem.alloc(M * N * 4)

    def check(memory):
        want = a.astype(np.float64) @ b.astype(np.float64).sum(axis=0)
        assert np.allclose(memory.get(c_ptr, (M, N), "f32"), want, rtol=1e-3, atol=1e-2)

    return Scenario(kernel, (a_ptr, b_ptr, c_ptr, n), (1,), mem, HardwareConfig(), check)
