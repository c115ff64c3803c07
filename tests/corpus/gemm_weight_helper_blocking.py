"""A GEMM that reads each B slab through a small helper, which uses a blocking tl.load.

The helper hides the load from the loop, and so hides that every slab's
transfer and latency are exposed in front of its GEMM. The fixed twin's
helper returns a future and the loop keeps two slabs in flight.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB101", params=dict(k_blocks=16), pes=[0])

BM, BK, BN = 16, 128, 128


def load_slab(tl, b_ptr, kb):
    """B rows [kb*BK, +BK) as one (BK, BN) slab."""
    return tl.load(b_ptr + kb * BK * BN * 2, (BK, BN), "f16")  # expect: KB101


def kernel_bug(tl, a_ptr, b_ptr, c_ptr, k_blocks):
    a = tl.load(a_ptr, (BM, k_blocks * BK), "f16")  # the whole row block stays resident
    acc = tl.zeros((BM, BN), "f32")
    for kb in range(k_blocks):
        with tl.scope():
            b = load_slab(tl, b_ptr, kb)  # expect-call
            acc = acc + tl.dot(a[:, kb * BK : (kb + 1) * BK], b)
    tl.store(c_ptr, acc)


def request_slab(tl, b_ptr, kb):
    return tl.load_async(b_ptr + kb * BK * BN * 2, (BK, BN), "f16")


def kernel_fixed(tl, a_ptr, b_ptr, c_ptr, k_blocks):
    a_f = tl.load_async(a_ptr, (BM, k_blocks * BK), "f16")  # the row block stays resident
    slabs = [request_slab(tl, b_ptr, kb) for kb in range(2)]
    a = tl.wait(a_f)
    acc = tl.zeros((BM, BN), "f32")
    for kb in range(k_blocks):
        with tl.scope():
            b = tl.wait(slabs.pop(0))
            if kb + 2 < k_blocks:
                slabs.append(request_slab(tl, b_ptr, kb + 2))
            acc = acc + tl.dot(a[:, kb * BK : (kb + 1) * BK], b)
    tl.store(c_ptr, acc)


def _launch(kernel, k_blocks):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((BM, k_blocks * BK)).astype(np.float16)
    b = rng.standard_normal((k_blocks * BK, BN)).astype(np.float16)
    mem = Memory(size_bytes=a.nbytes + b.nbytes + BM * BN * 4 + 4096)
    a_ptr, b_ptr, c_ptr = mem.put(a), mem.put(b), mem.alloc(BM * BN * 4)

    def check(memory):
        want = a.astype(np.float64) @ b.astype(np.float64)
        assert np.allclose(memory.get(c_ptr, (BM, BN), "f32"), want, atol=1e-2, rtol=1e-3)

    return Scenario(kernel, (a_ptr, b_ptr, c_ptr, k_blocks), (1,), mem, HardwareConfig(), check)


def launch_bug(k_blocks=16):
    return _launch(kernel_bug, k_blocks)


def launch_fixed(k_blocks=16):
    return _launch(kernel_fixed, k_blocks)
