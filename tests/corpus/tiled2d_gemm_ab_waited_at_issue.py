"""2-D tiled GEMM: each K-step's A and B tiles are issued together and waited at once.

C = A @ B over (m, n) output tiles with a K loop inside. A and B live in HBM
as contiguous 64x64 blocks (A block (mi, ki), B block (ki, ni)). The bug loads
each K-step's two tiles with ``load_async`` and waits both on the next lines,
so every step pays two transfers and the HBM latency before its GEMM, though
both could have been in flight under the previous step's GEMM. The fixed twin
runs one prefetch ring, two steps deep, over the flat list of (mi, ni, ki)
steps, across output-tile boundaries.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

SMALL = dict(m_tiles=2, n_tiles=2, k_tiles=2)
LARGE = dict(m_tiles=4, n_tiles=4, k_tiles=4)
PAIR = dict(rule="KB102", params=LARGE, pes=[0], sizes=[SMALL, LARGE])

T = 64
BLOCK_BYTES = T * T * 2  # one f16 block of A or B
OUT_BYTES = T * T * 4  # one f32 tile of C


def kernel_bug(tl, a_ptr, b_ptr, c_ptr, m_tiles, n_tiles, k_tiles):
    for mi in range(m_tiles):
        for ni in range(n_tiles):
            acc = tl.zeros((T, T), "f32")
            for ki in range(k_tiles):
                a_at = a_ptr + (mi * k_tiles + ki) * BLOCK_BYTES
                b_at = b_ptr + (ki * n_tiles + ni) * BLOCK_BYTES
                with tl.scope():
                    fa = tl.load_async(a_at, (T, T), "f16")  # expect: KB102
                    fb = tl.load_async(b_at, (T, T), "f16")
                    a = tl.wait(fa)
                    b = tl.wait(fb)
                    acc = acc + tl.dot(a, b)
            tl.store(c_ptr + (mi * n_tiles + ni) * OUT_BYTES, acc)


def kernel_fixed(tl, a_ptr, b_ptr, c_ptr, m_tiles, n_tiles, k_tiles, depth=2):
    steps = [
        (mi, ni, ki) for mi in range(m_tiles) for ni in range(n_tiles) for ki in range(k_tiles)
    ]

    def issue(step):
        mi, ni, ki = step
        fa = tl.load_async(a_ptr + (mi * k_tiles + ki) * BLOCK_BYTES, (T, T), "f16")
        fb = tl.load_async(b_ptr + (ki * n_tiles + ni) * BLOCK_BYTES, (T, T), "f16")
        return fa, fb

    ring = [issue(s) for s in steps[:depth]]
    acc = None
    for i, (mi, ni, ki) in enumerate(steps):
        if ki == 0:
            acc = tl.zeros((T, T), "f32")
        with tl.scope():
            fa, fb = ring.pop(0)
            a = tl.wait(fa)
            b = tl.wait(fb)
            if i + depth < len(steps):
                ring.append(issue(steps[i + depth]))
            acc = acc + tl.dot(a, b)
        if ki == k_tiles - 1:
            tl.store(c_ptr + (mi * n_tiles + ni) * OUT_BYTES, acc)


def _blocks(x, rows, cols):
    """x (rows*T, cols*T) as its T x T blocks, row-major by block, each block contiguous."""
    return x.reshape(rows, T, cols, T).transpose(0, 2, 1, 3).copy()


def _launch(kernel, m_tiles, n_tiles, k_tiles, seed=1):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m_tiles * T, k_tiles * T)).astype(np.float16)
    b = rng.standard_normal((k_tiles * T, n_tiles * T)).astype(np.float16)
    mem = Memory(size_bytes=a.nbytes + b.nbytes + m_tiles * n_tiles * OUT_BYTES + (1 << 16))
    a_ptr = mem.put(_blocks(a, m_tiles, k_tiles))
    b_ptr = mem.put(_blocks(b, k_tiles, n_tiles))
    c_ptr = mem.alloc(m_tiles * n_tiles * OUT_BYTES)

    def check(memory):
        want = a.astype(np.float32) @ b.astype(np.float32)
        got = memory.get(c_ptr, (m_tiles, n_tiles, T, T), "f32")
        got = got.transpose(0, 2, 1, 3).reshape(m_tiles * T, n_tiles * T)
        assert np.allclose(got, want, rtol=1e-3, atol=1e-2), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(a_ptr, b_ptr, c_ptr, m_tiles, n_tiles, k_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(m_tiles=4, n_tiles=4, k_tiles=4):
    return _launch(kernel_bug, m_tiles, n_tiles, k_tiles)


def launch_fixed(m_tiles=4, n_tiles=4, k_tiles=4):
    return _launch(kernel_fixed, m_tiles, n_tiles, k_tiles)
