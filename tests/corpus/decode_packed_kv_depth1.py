"""Decode attention over a packed KV cache (each row holds K then V), prefetched one tile ahead.

One iteration's Q.K^T, softmax and P.V take about 530 cycles, while a packed
tile takes 683 cycles on the read channel and 500 more to land: issuing just
one tile ahead cannot cover it. The fixed twin keeps three tiles in flight.
"""

from __future__ import annotations

import math

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB107", params=dict(n_tiles=64), pes=[0], depth=3)

H, D, T = 8, 128, 64  # query heads, head dim, tokens per tile
KV_BYTES = T * 2 * D * 2


def _attend(tl, q, kv, state):
    m, l_sum, acc = state
    k, v = kv[:, :D], kv[:, D:]
    s = tl.dot(q, tl.trans(k)) * (1.0 / math.sqrt(D))
    m_new = tl.maximum(m, tl.max(s, axis=1))
    p = tl.exp(s - m_new[:, None])
    corr = tl.exp(m - m_new)
    return m_new, l_sum * corr + tl.sum(p, axis=1), acc * corr[:, None] + tl.dot(p, v)


def kernel_bug(tl, q_ptr, kv_ptr, o_ptr, n_tiles):
    q_async = tl.load_async(q_ptr, (H, D), "f16")
    nxt = tl.load_async(kv_ptr, (T, 2 * D), "f16")
    q = tl.wait(q_async)
    state = (tl.full((H,), -math.inf), tl.zeros((H,)), tl.zeros((H, D)))
    for j in range(n_tiles):
        with tl.scope():
            kv = tl.wait(nxt)
            if j + 1 < n_tiles:
                nxt = tl.load_async(kv_ptr + (j + 1) * KV_BYTES, (T, 2 * D), "f16")  # expect: KB107
            state = _attend(tl, q, kv, state)
    m, l_sum, acc = state
    tl.store(o_ptr, (acc / l_sum[:, None]).to("f16"))


def kernel_fixed(tl, q_ptr, kv_ptr, o_ptr, n_tiles, depth=3):
    q_async = tl.load_async(q_ptr, (H, D), "f16")
    inflight = [tl.load_async(kv_ptr + j * KV_BYTES, (T, 2 * D), "f16") for j in range(depth)]
    q = tl.wait(q_async)
    state = (tl.full((H,), -math.inf), tl.zeros((H,)), tl.zeros((H, D)))
    for j in range(n_tiles):
        with tl.scope():
            kv = tl.wait(inflight[j % depth])
            if j + depth < n_tiles:
                inflight[j % depth] = tl.load_async(
                    kv_ptr + (j + depth) * KV_BYTES, (T, 2 * D), "f16"
                )
            state = _attend(tl, q, kv, state)
    m, l_sum, acc = state
    tl.store(o_ptr, (acc / l_sum[:, None]).to("f16"))


def _launch(kernel, n_tiles):
    rng = np.random.default_rng(7)
    q = rng.standard_normal((H, D)).astype(np.float16)
    kv = rng.standard_normal((n_tiles * T, 2 * D)).astype(np.float16)
    mem = Memory(size_bytes=kv.nbytes + (1 << 16))
    q_ptr, kv_ptr, o_ptr = mem.put(q), mem.put(kv), mem.alloc(q.nbytes)

    def check(memory):
        k, v = kv[:, :D].astype(np.float64), kv[:, D:].astype(np.float64)
        s = q.astype(np.float64) @ k.T / math.sqrt(D)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        want = (p / p.sum(axis=1, keepdims=True)) @ v
        assert np.allclose(memory.get(o_ptr, (H, D), "f16"), want, atol=2e-2, rtol=2e-2)

    return Scenario(kernel, (q_ptr, kv_ptr, o_ptr, n_tiles), (1,), mem, HardwareConfig(), check)


def launch_bug(n_tiles=64):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=64):
    return _launch(kernel_fixed, n_tiles)
