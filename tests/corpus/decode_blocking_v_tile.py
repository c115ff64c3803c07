"""GQA decode attention: K tiles are prefetched, but every V tile is a blocking tl.load.

The V load sits between Q.K^T and P.V, so its whole transfer and latency are
exposed each tile, though nothing stops it from travelling under the next
tiles' work. The fixed twin streams V through the same prefetch ring as K.
"""

from __future__ import annotations

import math

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB101", params=dict(n_tiles=64), pes=[0])

TILE, HEADS, DIM = 64, 8, 128
TILE_BYTES = TILE * DIM * 2


def kernel_bug(tl, q_ptr, k_ptr, v_ptr, o_ptr, n_tiles, depth=3):
    scale = 1.0 / math.sqrt(DIM)
    q_future = tl.load_async(q_ptr, (HEADS, DIM), "f16")
    ks = [tl.load_async(k_ptr + j * TILE_BYTES, (TILE, DIM), "f16") for j in range(depth)]
    q = tl.wait(q_future)
    m = tl.full((HEADS,), -math.inf, "f32")
    l_sum = tl.zeros((HEADS,), "f32")
    acc = tl.zeros((HEADS, DIM), "f32")
    for j in range(n_tiles):
        with tl.scope():
            k = tl.wait(ks.pop(0))
            if j + depth < n_tiles:
                ks.append(tl.load_async(k_ptr + (j + depth) * TILE_BYTES, (TILE, DIM), "f16"))
            s = tl.dot(q, tl.trans(k)) * scale
            m_new = tl.maximum(m, tl.max(s, axis=1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m - m_new)
            l_sum = l_sum * alpha + tl.sum(p, axis=1)
            m = m_new
            v = tl.load(v_ptr + j * TILE_BYTES, (TILE, DIM), "f16")  # expect: KB101
            acc = acc * alpha[:, None] + tl.dot(p, v)
    tl.store(o_ptr, (acc / l_sum[:, None]).to("f16"))


def kernel_fixed(tl, q_ptr, k_ptr, v_ptr, o_ptr, n_tiles, depth=3):
    scale = 1.0 / math.sqrt(DIM)
    q_future = tl.load_async(q_ptr, (HEADS, DIM), "f16")

    def issue(j):
        off = j * TILE_BYTES
        return (
            tl.load_async(k_ptr + off, (TILE, DIM), "f16"),
            tl.load_async(v_ptr + off, (TILE, DIM), "f16"),
        )

    ring = [issue(j) for j in range(min(depth, n_tiles))]
    q = tl.wait(q_future)
    m = tl.full((HEADS,), -math.inf, "f32")
    l_sum = tl.zeros((HEADS,), "f32")
    acc = tl.zeros((HEADS, DIM), "f32")
    for j in range(n_tiles):
        with tl.scope():
            fk, fv = ring.pop(0)
            k = tl.wait(fk)
            if j + depth < n_tiles:
                ring.append(issue(j + depth))
            s = tl.dot(q, tl.trans(k)) * scale
            m_new = tl.maximum(m, tl.max(s, axis=1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m - m_new)
            l_sum = l_sum * alpha + tl.sum(p, axis=1)
            m = m_new
            v = tl.wait(fv)
            acc = acc * alpha[:, None] + tl.dot(p, v)
    tl.store(o_ptr, (acc / l_sum[:, None]).to("f16"))


def _launch(kernel, n_tiles, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((HEADS, DIM)).astype(np.float16)
    k = rng.standard_normal((n_tiles * TILE, DIM)).astype(np.float16)
    v = rng.standard_normal((n_tiles * TILE, DIM)).astype(np.float16)
    mem = Memory(size_bytes=k.nbytes + v.nbytes + (1 << 16))
    q_ptr, k_ptr, v_ptr = mem.put(q), mem.put(k), mem.put(v)
    o_ptr = mem.alloc(q.nbytes)

    def check(memory):
        s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(DIM)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        want = (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)
        got = memory.get(o_ptr, (HEADS, DIM), "f16").astype(np.float64)
        assert np.allclose(got, want, atol=2e-2, rtol=2e-2), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(q_ptr, k_ptr, v_ptr, o_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_tiles=64):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=64):
    return _launch(kernel_fixed, n_tiles)
