"""All-gather matmul on a 3-PE ring: A's row blocks rotate, each PE keeps its slice of B's columns.

Each step forwards the A block to the right, then posts and immediately waits
for the next block from the left, and only then multiplies the block it
already had - the GEMM could have covered the IPCQ transfer. No tl.scope,
blocks are freed by hand; f32 outputs are stored without waiting.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB109", params=dict(), pes=[0, 1, 2])

BM, K, BN, PES = 32, 128, 64, 3


def kernel_bug(tl, a_ptr, b_ptr, c_ptr):
    me = tl.program_id(0)
    n = tl.num_programs(0)
    a_f = tl.load_async(a_ptr + me * BM * K * 2, (BM, K), "f16")
    b_cols = tl.load(b_ptr + me * K * BN * 2, (K, BN), "f16")
    a_blk = tl.wait(a_f)
    owner = me
    for step in range(n):
        if step + 1 < n:
            tl.send("right", a_blk)
            r = tl.recv_async("left", (BM, K), "f16")
            a_next = tl.wait(r)  # expect: KB109
        tl.store(c_ptr + (owner * PES + me) * BM * BN * 4, tl.dot(a_blk, b_cols))
        if step + 1 < n:
            tl.free(a_blk)
            a_blk, owner = a_next, (owner - 1) % n


def kernel_fixed(tl, a_ptr, b_ptr, c_ptr):
    me = tl.program_id(0)
    n = tl.num_programs(0)
    a_f = tl.load_async(a_ptr + me * BM * K * 2, (BM, K), "f16")
    b_cols = tl.load(b_ptr + me * K * BN * 2, (K, BN), "f16")
    a_blk = tl.wait(a_f)
    owner = me
    for step in range(n):
        if step + 1 < n:
            tl.send("right", a_blk)
            r = tl.recv_async("left", (BM, K), "f16")
        tl.store(c_ptr + (owner * PES + me) * BM * BN * 4, tl.dot(a_blk, b_cols))
        if step + 1 < n:
            tl.free(a_blk)
            a_blk, owner = tl.wait(r), (owner - 1) % n


def _launch(kernel):
    rng = np.random.default_rng(21)
    a = rng.standard_normal((PES, BM, K)).astype(np.float16)
    b = rng.standard_normal((PES, K, BN)).astype(np.float16)  # column slices of B
    mem = Memory(size_bytes=a.nbytes + b.nbytes + PES * PES * BM * BN * 4 + 4096)
    a_ptr, b_ptr, c_ptr = mem.put(a), mem.put(b), mem.alloc(PES * PES * BM * BN * 4)

    def check(memory):
        want = np.einsum("imk,jkn->ijmn", a.astype(np.float64), b.astype(np.float64))
        got = memory.get(c_ptr, (PES, PES, BM, BN), "f32")
        assert np.allclose(got, want, rtol=1e-3, atol=1e-2)

    config = HardwareConfig(mesh_rows=1, mesh_cols=PES, mesh_wrap=True)
    return Scenario(kernel, (a_ptr, b_ptr, c_ptr), (PES,), mem, config, check)


def launch_bug():
    return _launch(kernel_bug)


def launch_fixed():
    return _launch(kernel_fixed)
