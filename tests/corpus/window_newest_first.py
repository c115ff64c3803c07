"""Sliding-window decode over the last three K tiles, scored newest first.

All three tiles are requested up front, in address order, then consumed
from the most recent token backwards: the first wait is on the tile issued
last, so it sits behind both older transfers while they are pending. The
online softmax does not care about order, so the fixed twin consumes the
tiles in the order they were requested.
"""

from __future__ import annotations

import math

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB104", params=dict(), pes=[0])

W, Q, D, TOK = 3, 32, 128, 64


def kernel_bug(tl, q_ptr, k_ptr, v_ptr, o_ptr):
    q_f = tl.load_async(q_ptr, (Q, D), "f16")
    ks = [tl.load_async(k_ptr + t * TOK * D * 2, (TOK, D), "f16") for t in range(W)]
    v = tl.load_async(v_ptr, (TOK, D), "f16")
    q = tl.wait(q_f)
    m = tl.full((Q,), -math.inf)
    den = tl.zeros((Q,))
    for t in reversed(range(W)):
        k = tl.wait(ks[t])  # expect: KB104
        s = tl.dot(q, tl.trans(k)) * (1 / math.sqrt(D))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        den = den * tl.exp(m - m_new) + tl.sum(tl.exp(s - m_new[:, None]), axis=1)
        m = m_new
    tl.store(o_ptr, tl.sum(tl.dot(q, tl.trans(tl.wait(v))), axis=1) / den)


def kernel_fixed(tl, q_ptr, k_ptr, v_ptr, o_ptr):
    q_f = tl.load_async(q_ptr, (Q, D), "f16")
    ks = [tl.load_async(k_ptr + t * TOK * D * 2, (TOK, D), "f16") for t in range(W)]
    v = tl.load_async(v_ptr, (TOK, D), "f16")
    q = tl.wait(q_f)
    m = tl.full((Q,), -math.inf)
    den = tl.zeros((Q,))
    for t in range(W):
        k = tl.wait(ks[t])
        s = tl.dot(q, tl.trans(k)) * (1 / math.sqrt(D))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        den = den * tl.exp(m - m_new) + tl.sum(tl.exp(s - m_new[:, None]), axis=1)
        m = m_new
    tl.store(o_ptr, tl.sum(tl.dot(q, tl.trans(tl.wait(v))), axis=1) / den)


def _launch(kernel):
    rng = np.random.default_rng(15)
    q = rng.standard_normal((Q, D)).astype(np.float16)
    k = rng.standard_normal((W * TOK, D)).astype(np.float16)
    v = rng.standard_normal((TOK, D)).astype(np.float16)
    mem = Memory(size_bytes=q.nbytes + k.nbytes + v.nbytes + 4096)
    q_ptr, k_ptr, v_ptr, o_ptr = mem.put(q), mem.put(k), mem.put(v), mem.alloc(Q * 4)

    def check(memory):
        s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(D)
        den = np.exp(s - s.max(axis=1, keepdims=True)).sum(axis=1)
        want = (q.astype(np.float64) @ v.T.astype(np.float64)).sum(axis=1) / den
        assert np.allclose(memory.get(o_ptr, (Q,), "f32"), want, rtol=1e-2, atol=1e-2)

    return Scenario(kernel, (q_ptr, k_ptr, v_ptr, o_ptr), (1,), mem, HardwareConfig(), check)


def launch_bug():
    return _launch(kernel_bug)


def launch_fixed():
    return _launch(kernel_fixed)
