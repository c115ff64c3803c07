"""One tl.composite per 64-row tile of A, all with the same B.

C = A @ B for A (n * 64, 128) and B (128, 128), f16 in, f32 out. The kernel
calls ``tl.composite`` once per row tile, so each call starts its pipeline
from nothing: it reads all of B and its one A tile cold, runs one GEMM and
drains its store before the next call begins. The fixed twin makes one call
over all the rows, which reads B once and keeps the next A tiles in flight
under each GEMM.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB110",
    params=dict(n_tiles=32),
    pes=[0],
    sizes=[dict(n_tiles=4), dict(n_tiles=32)],
)

TILE, K, N = 64, 128, 128
A_TILE_BYTES = TILE * K * 2
C_TILE_BYTES = TILE * N * 4


def kernel_bug(tl, a_ptr, b_ptr, c_ptr, n_tiles):
    for i in range(n_tiles):
        a_at, c_at = a_ptr + i * A_TILE_BYTES, c_ptr + i * C_TILE_BYTES
        tl.composite(a_at, (TILE, K), b_ptr, (K, N), c_at, tile=TILE)  # expect: KB110


def kernel_fixed(tl, a_ptr, b_ptr, c_ptr, n_tiles):
    tl.composite(a_ptr, (n_tiles * TILE, K), b_ptr, (K, N), c_ptr, tile=TILE)


def _launch(kernel, n_tiles, seed=9):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n_tiles * TILE, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    mem = Memory(size_bytes=a.nbytes + b.nbytes + n_tiles * C_TILE_BYTES + (1 << 16))
    a_ptr, b_ptr = mem.put(a), mem.put(b)
    c_ptr = mem.alloc(n_tiles * C_TILE_BYTES)

    def check(memory):
        want = a.astype(np.float32) @ b.astype(np.float32)
        got = memory.get(c_ptr, want.shape, "f32")
        assert np.allclose(got, want, rtol=1e-3, atol=1e-2), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(a_ptr, b_ptr, c_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_tiles=32):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=32):
    return _launch(kernel_fixed, n_tiles)
