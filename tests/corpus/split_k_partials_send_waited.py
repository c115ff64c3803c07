"""Split-K GEMM on two PEs (no wrap): PE 1 computes partial sums and ships them to PE 0.

PE 1 sends each partial C tile to the left and waits for its delivery before
starting the next tile's GEMM; nothing on PE 1 depends on it. Only PE 1 is
at fault: PE 0 merely receives late. The fixed twin lets the sends drain.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB108", params=dict(n_tiles=12), pes=[1])

BM, KH, N = 32, 128, 64  # rows per tile, half of K, columns


def kernel_bug(tl, a_ptr, b_ptr, c_ptr, n_tiles):
    half = tl.program_id(0)
    b_f = tl.load_async(b_ptr + half * KH * N * 2, (KH, N), "f16")
    a_q = [
        tl.load_async(a_ptr + (half * n_tiles + t) * BM * KH * 2, (BM, KH), "f16")
        for t in range(n_tiles)
    ]
    b = tl.wait(b_f)
    for t in range(n_tiles):
        with tl.scope():
            part = tl.dot(tl.wait(a_q[t]), b)
            if half == 1:
                h = tl.send("left", part)
                tl.wait(h)  # expect: KB108
            else:
                other = tl.wait(tl.recv_async("right", (BM, N), "f32"))
                tl.store(c_ptr + t * BM * N * 4, part + other)


def kernel_fixed(tl, a_ptr, b_ptr, c_ptr, n_tiles):
    half = tl.program_id(0)
    b_f = tl.load_async(b_ptr + half * KH * N * 2, (KH, N), "f16")
    a_q = [
        tl.load_async(a_ptr + (half * n_tiles + t) * BM * KH * 2, (BM, KH), "f16")
        for t in range(n_tiles)
    ]
    b = tl.wait(b_f)
    for t in range(n_tiles):
        with tl.scope():
            part = tl.dot(tl.wait(a_q[t]), b)
            if half == 1:
                tl.send("left", part)
            else:
                other = tl.wait(tl.recv_async("right", (BM, N), "f32"))
                tl.store(c_ptr + t * BM * N * 4, part + other)


def _launch(kernel, n_tiles):
    rng = np.random.default_rng(22)
    a = rng.standard_normal((n_tiles * BM, 2 * KH)).astype(np.float16)
    b = rng.standard_normal((2 * KH, N)).astype(np.float16)
    # A's K halves stored apart, each as row tiles: [half, tile, BM, KH].
    a_split = np.ascontiguousarray(a.reshape(n_tiles, BM, 2, KH).transpose(2, 0, 1, 3))
    mem = Memory(size_bytes=a.nbytes + b.nbytes + n_tiles * BM * N * 4 + 4096)
    a_ptr, b_ptr, c_ptr = mem.put(a_split), mem.put(b), mem.alloc(n_tiles * BM * N * 4)

    def check(memory):
        want = a.astype(np.float64) @ b.astype(np.float64)
        got = memory.get(c_ptr, (n_tiles * BM, N), "f32")
        assert np.allclose(got, want, rtol=1e-3, atol=1e-2)

    config = HardwareConfig(mesh_rows=1, mesh_cols=2, mesh_wrap=False)
    return Scenario(kernel, (a_ptr, b_ptr, c_ptr, n_tiles), (2,), mem, config, check)


def launch_bug(n_tiles=12):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=12):
    return _launch(kernel_fixed, n_tiles)
