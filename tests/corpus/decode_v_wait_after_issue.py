"""Decode attention without tl.scope: V is fetched with load_async but waited at once.

K rides a three-deep ring; V's load_async is issued right before P.V needs it,
so the Q.K^T and softmax work that came before could have hidden it and did
not. Tiles are freed by hand instead of with a scope.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB102", params=dict(n_tiles=48), pes=[0])

ROWS, HEAD, TOKENS = 8, 128, 64


def kernel_bug(tl, q_ptr, k_ptr, v_ptr, o_ptr, n_tiles):
    nbytes = TOKENS * HEAD * 2
    q_load = tl.load_async(q_ptr, (ROWS, HEAD), "f16")
    k_ring = deque(tl.load_async(k_ptr + t * nbytes, (TOKENS, HEAD), "f16") for t in range(3))
    q = tl.wait(q_load) * (1.0 / math.sqrt(HEAD))
    run_max = tl.full((ROWS,), -math.inf, "f32")
    denom = tl.zeros((ROWS,), "f32")
    out = tl.zeros((ROWS, HEAD), "f32")
    for t in range(n_tiles):
        k = tl.wait(k_ring.popleft())
        if t + 3 < n_tiles:
            k_ring.append(tl.load_async(k_ptr + (t + 3) * nbytes, (TOKENS, HEAD), "f16"))
        scores = tl.dot(q, tl.trans(k))
        new_max = tl.maximum(run_max, tl.max(scores, axis=1))
        probs = tl.exp(scores - new_max[:, None])
        rescale = tl.exp(run_max - new_max)
        denom = denom * rescale + tl.sum(probs, axis=1)
        run_max = new_max
        v_future = tl.load_async(v_ptr + t * nbytes, (TOKENS, HEAD), "f16")  # expect: KB102
        v = tl.wait(v_future)
        out = out * rescale[:, None] + tl.dot(probs, v)
        tl.free(k)
        tl.free(v)
    tl.store(o_ptr, (out / denom[:, None]).to("f16"))


def kernel_fixed(tl, q_ptr, k_ptr, v_ptr, o_ptr, n_tiles):
    nbytes = TOKENS * HEAD * 2
    q_load = tl.load_async(q_ptr, (ROWS, HEAD), "f16")
    k_ring, v_ring = deque(), deque()
    for t in range(3):
        k_ring.append(tl.load_async(k_ptr + t * nbytes, (TOKENS, HEAD), "f16"))
        v_ring.append(tl.load_async(v_ptr + t * nbytes, (TOKENS, HEAD), "f16"))
    q = tl.wait(q_load) * (1.0 / math.sqrt(HEAD))
    run_max = tl.full((ROWS,), -math.inf, "f32")
    denom = tl.zeros((ROWS,), "f32")
    out = tl.zeros((ROWS, HEAD), "f32")
    for t in range(n_tiles):
        k = tl.wait(k_ring.popleft())
        if t + 3 < n_tiles:
            k_ring.append(tl.load_async(k_ptr + (t + 3) * nbytes, (TOKENS, HEAD), "f16"))
            v_ring.append(tl.load_async(v_ptr + (t + 3) * nbytes, (TOKENS, HEAD), "f16"))
        scores = tl.dot(q, tl.trans(k))
        new_max = tl.maximum(run_max, tl.max(scores, axis=1))
        probs = tl.exp(scores - new_max[:, None])
        rescale = tl.exp(run_max - new_max)
        denom = denom * rescale + tl.sum(probs, axis=1)
        run_max = new_max
        v = tl.wait(v_ring.popleft())
        out = out * rescale[:, None] + tl.dot(probs, v)
        tl.free(k)
        tl.free(v)
    tl.store(o_ptr, (out / denom[:, None]).to("f16"))


def _scenario(kernel, n_tiles, seed=1):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((ROWS, HEAD)).astype(np.float16)
    k = rng.standard_normal((n_tiles * TOKENS, HEAD)).astype(np.float16)
    v = rng.standard_normal((n_tiles * TOKENS, HEAD)).astype(np.float16)
    mem = Memory(size_bytes=2 * k.nbytes + (1 << 16))
    q_ptr, k_ptr, v_ptr, o_ptr = mem.put(q), mem.put(k), mem.put(v), mem.alloc(q.nbytes)

    def check(memory):
        s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(HEAD)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        want = p / p.sum(axis=1, keepdims=True) @ v.astype(np.float64)
        got = memory.get(o_ptr, q.shape, "f16").astype(np.float64)
        assert np.allclose(got, want, atol=2e-2, rtol=2e-2)

    args = (q_ptr, k_ptr, v_ptr, o_ptr, n_tiles)
    return Scenario(kernel, args, (1,), mem, HardwareConfig(), check)


def launch_bug(n_tiles=48):
    return _scenario(kernel_bug, n_tiles)


def launch_fixed(n_tiles=48):
    return _scenario(kernel_fixed, n_tiles)
