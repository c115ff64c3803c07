"""Prefill over 4 PEs on a packed K|V cache; the last PE takes a separately written path.

PEs 0-2 stream K|V tiles through a two-deep ring. The last PE owns the block
of rows that someone special-cased, and its loop issues each tile and waits
for it on the next line: only PE 3 serialises. The fixed twin sends every PE
through the ring.
"""

from __future__ import annotations

import math

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB102", params=dict(n_tiles=24), pes=[3])

ROWS, D, TOK = 32, 64, 64
KV_BYTES = TOK * 2 * D * 2


class Flash:
    def __init__(self, tl, q):
        self.tl, self.q = tl, q
        self.m = tl.full((ROWS,), -math.inf)
        self.l = tl.zeros((ROWS,))
        self.o = tl.zeros((ROWS, D))

    def step(self, kv):
        tl = self.tl
        s = tl.dot(self.q, tl.trans(kv[:, :D])) * (D**-0.5)
        m = tl.maximum(self.m, tl.max(s, axis=1))
        p = tl.exp(s - m[:, None])
        a = tl.exp(self.m - m)
        self.l = self.l * a + tl.sum(p, axis=1)
        self.o = self.o * a[:, None] + tl.dot(p, kv[:, D:])
        self.m = m

    def out(self):
        return (self.o / self.l[:, None]).to("f16")


def _prime(tl, kv_ptr):
    return [tl.load_async(kv_ptr + j * KV_BYTES, (TOK, 2 * D), "f16") for j in range(2)]


def _ring(tl, fa, kv_ptr, n_tiles, pending):
    for j in range(n_tiles):
        with tl.scope():
            kv = tl.wait(pending.pop(0))
            if j + 2 < n_tiles:
                pending.append(tl.load_async(kv_ptr + (j + 2) * KV_BYTES, (TOK, 2 * D), "f16"))
            fa.step(kv)


def kernel_bug(tl, q_ptr, kv_ptr, o_ptr, n_tiles):
    pe = tl.program_id(0)
    tail = pe == tl.num_programs(0) - 1
    q = tl.load_async(q_ptr + pe * ROWS * D * 2, (ROWS, D), "f16")
    pending = None if tail else _prime(tl, kv_ptr)
    fa = Flash(tl, tl.wait(q))
    if not tail:
        _ring(tl, fa, kv_ptr, n_tiles, pending)
    else:
        for j in range(n_tiles):
            with tl.scope():
                f = tl.load_async(kv_ptr + j * KV_BYTES, (TOK, 2 * D), "f16")  # expect: KB102
                fa.step(tl.wait(f))
    tl.store(o_ptr + pe * ROWS * D * 2, fa.out())


def kernel_fixed(tl, q_ptr, kv_ptr, o_ptr, n_tiles):
    pe = tl.program_id(0)
    q = tl.load_async(q_ptr + pe * ROWS * D * 2, (ROWS, D), "f16")
    pending = _prime(tl, kv_ptr)
    fa = Flash(tl, tl.wait(q))
    _ring(tl, fa, kv_ptr, n_tiles, pending)
    tl.store(o_ptr + pe * ROWS * D * 2, fa.out())


def _launch(kernel, n_tiles, pes=4):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((pes * ROWS, D)).astype(np.float16)
    kv = rng.standard_normal((n_tiles * TOK, 2 * D)).astype(np.float16)
    mem = Memory(size_bytes=kv.nbytes + 2 * q.nbytes + 4096)
    q_ptr, kv_ptr, o_ptr = mem.put(q), mem.put(kv), mem.alloc(q.nbytes)

    def check(memory):
        s = q.astype(np.float64) @ kv[:, :D].T.astype(np.float64) / math.sqrt(D)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        want = p / p.sum(axis=1, keepdims=True) @ kv[:, D:].astype(np.float64)
        assert np.allclose(memory.get(o_ptr, q.shape, "f16"), want, atol=2e-2, rtol=2e-2)

    config = HardwareConfig(mesh_rows=1, mesh_cols=pes)
    return Scenario(kernel, (q_ptr, kv_ptr, o_ptr, n_tiles), (pes,), mem, config, check)


def launch_bug(n_tiles=24):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=24):
    return _launch(kernel_fixed, n_tiles)
