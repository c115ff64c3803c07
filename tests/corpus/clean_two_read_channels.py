"""Clean: a DMA-bound K/V stream on a PE with two read channels, four tiles in flight."""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

CLEAN = dict(params=dict(n_tiles=64), note="dma_read_channels=2")

H, D, T = 8, 128, 64
TB = T * D * 2


def kernel(tl, q_ptr, k_ptr, v_ptr, o_ptr, n_tiles):
    q_f = tl.load_async(q_ptr, (H, D), "f16")
    kq, vq = [], []
    for j in range(4):
        kq.append(tl.load_async(k_ptr + j * TB, (T, D), "f16"))
        vq.append(tl.load_async(v_ptr + j * TB, (T, D), "f16"))
    q = tl.wait(q_f)
    acc = tl.zeros((H, D))
    for j in range(n_tiles):
        with tl.scope():
            k = tl.wait(kq.pop(0))
            if j + 4 < n_tiles:
                kq.append(tl.load_async(k_ptr + (j + 4) * TB, (T, D), "f16"))
                vq.append(tl.load_async(v_ptr + (j + 4) * TB, (T, D), "f16"))
            p = tl.exp(tl.dot(q, tl.trans(k)) * 0.01)
            acc = acc + tl.dot(p, tl.wait(vq.pop(0)))
    tl.store(o_ptr, acc)


def launch(n_tiles=64):
    rng = np.random.default_rng(31)
    q = rng.standard_normal((H, D)).astype(np.float16)
    k = rng.standard_normal((n_tiles * T, D)).astype(np.float16)
    v = rng.standard_normal((n_tiles * T, D)).astype(np.float16)
    mem = Memory(size_bytes=k.nbytes + v.nbytes + (1 << 16))
    q_ptr, k_ptr, v_ptr, o_ptr = mem.put(q), mem.put(k), mem.put(v), mem.alloc(H * D * 4)

    def check(memory):
        p = np.exp(q.astype(np.float64) @ k.T.astype(np.float64) * 0.01)
        want = p @ v.astype(np.float64)
        assert np.allclose(memory.get(o_ptr, (H, D), "f32"), want, rtol=1e-3, atol=1e-1)

    config = HardwareConfig(dma_read_channels=2)
    return Scenario(kernel, (q_ptr, k_ptr, v_ptr, o_ptr, n_tiles), (1,), mem, config, check)
