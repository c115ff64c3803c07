"""2-D tiled GEMM with a thin K step: a one-step-ahead prefetch cannot hide the latency.

C = A @ B over (m, n) output tiles of 64x64, K in steps of 32. A and B are
stored as contiguous blocks (A (64, 32) per (mi, ki), B (32, 64) per (ki, ni)).
The kernel prefetches the next step's A and B right after waiting the current
ones, as early as a one-deep pipeline allows; but a step's GEMM (512 cycles)
is shorter than two 4 KB transfers plus the HBM latency, so every step still
stalls. The fixed twin keeps three steps in flight. Both run the same body,
``_kernel``, with a different depth.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

SMALL = dict(m_tiles=1, n_tiles=2, k_tiles=4)
LARGE = dict(m_tiles=2, n_tiles=4, k_tiles=8)
PAIR = dict(rule="KB107", params=LARGE, pes=[0], sizes=[SMALL, LARGE])

TM, TK, TN = 64, 32, 64
A_BYTES = TM * TK * 2
B_BYTES = TK * TN * 2
C_BYTES = TM * TN * 4


def _kernel(tl, a_ptr, b_ptr, c_ptr, m_tiles, n_tiles, k_tiles, depth):
    steps = [
        (mi, ni, ki) for mi in range(m_tiles) for ni in range(n_tiles) for ki in range(k_tiles)
    ]
    pending = []
    for mi, ni, ki in steps[:depth]:
        pending.append(
            (
                tl.load_async(a_ptr + (mi * k_tiles + ki) * A_BYTES, (TM, TK), "f16"),
                tl.load_async(b_ptr + (ki * n_tiles + ni) * B_BYTES, (TK, TN), "f16"),
            )
        )
    acc = None
    for i, (mi, ni, ki) in enumerate(steps):
        if ki == 0:
            acc = tl.zeros((TM, TN), "f32")
        with tl.scope():
            fa, fb = pending.pop(0)
            a = tl.wait(fa)
            b = tl.wait(fb)
            if i + depth < len(steps):
                nm, nn, nk = steps[i + depth]
                a_at = a_ptr + (nm * k_tiles + nk) * A_BYTES
                b_at = b_ptr + (nk * n_tiles + nn) * B_BYTES
                fa = tl.load_async(a_at, (TM, TK), "f16")  # expect: KB107
                fb = tl.load_async(b_at, (TK, TN), "f16")
                pending.append((fa, fb))
            acc = acc + tl.dot(a, b)
        if ki == k_tiles - 1:
            tl.store(c_ptr + (mi * n_tiles + ni) * C_BYTES, acc)


def kernel_bug(tl, a_ptr, b_ptr, c_ptr, m_tiles, n_tiles, k_tiles):
    _kernel(tl, a_ptr, b_ptr, c_ptr, m_tiles, n_tiles, k_tiles, depth=1)  # expect-call


def kernel_fixed(tl, a_ptr, b_ptr, c_ptr, m_tiles, n_tiles, k_tiles):
    _kernel(tl, a_ptr, b_ptr, c_ptr, m_tiles, n_tiles, k_tiles, depth=3)


def _blocks(x, rows, cols, br, bc):
    """x as its (br, bc) blocks, row-major by block, each block contiguous."""
    return x.reshape(rows, br, cols, bc).transpose(0, 2, 1, 3).copy()


def _launch(kernel, m_tiles, n_tiles, k_tiles, seed=2):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m_tiles * TM, k_tiles * TK)).astype(np.float16)
    b = rng.standard_normal((k_tiles * TK, n_tiles * TN)).astype(np.float16)
    mem = Memory(size_bytes=a.nbytes + b.nbytes + m_tiles * n_tiles * C_BYTES + (1 << 16))
    a_ptr = mem.put(_blocks(a, m_tiles, k_tiles, TM, TK))
    b_ptr = mem.put(_blocks(b, k_tiles, n_tiles, TK, TN))
    c_ptr = mem.alloc(m_tiles * n_tiles * C_BYTES)

    def check(memory):
        want = a.astype(np.float32) @ b.astype(np.float32)
        got = memory.get(c_ptr, (m_tiles, n_tiles, TM, TN), "f32")
        got = got.transpose(0, 2, 1, 3).reshape(m_tiles * TM, n_tiles * TN)
        assert np.allclose(got, want, rtol=1e-3, atol=1e-2), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(a_ptr, b_ptr, c_ptr, m_tiles, n_tiles, k_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(m_tiles=2, n_tiles=4, k_tiles=8):
    return _launch(kernel_bug, m_tiles, n_tiles, k_tiles)


def launch_fixed(m_tiles=2, n_tiles=4, k_tiles=8):
    return _launch(kernel_fixed, m_tiles, n_tiles, k_tiles)
