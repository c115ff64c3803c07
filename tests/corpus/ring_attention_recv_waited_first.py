"""Ring attention over 4 PEs where each step waits for the next K|V block before using this one.

The receive is posted and waited back to back, and only then does the PE
attend to the block it already holds - work that could have run while the
next block crossed the link. The fixed twin waits after the step's work.
"""

from __future__ import annotations

import math

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB109", params=dict(pes=4), pes=[0, 1, 2, 3])

ROWS, BLK, HD = 32, 64, 64


class Partial:
    """Running softmax statistics of one query block."""

    def __init__(self, tl):
        self.tl = tl
        self.m = tl.full((ROWS,), -math.inf)
        self.l = tl.zeros((ROWS,))
        self.o = tl.zeros((ROWS, HD))

    def absorb(self, q, kv):
        tl = self.tl
        s = tl.dot(q, tl.trans(kv[:, :HD])) * (HD**-0.5)
        m = tl.maximum(self.m, tl.max(s, axis=1))
        p = tl.exp(s - m[:, None])
        r = tl.exp(self.m - m)
        self.m, self.l = m, self.l * r + tl.sum(p, axis=1)
        self.o = self.o * r[:, None] + tl.dot(p, kv[:, HD:])


def kernel_bug(tl, q_ptr, kv_ptr, o_ptr):
    pid, n = tl.program_id(0), tl.num_programs(0)
    q_f = tl.load_async(q_ptr + pid * ROWS * HD * 2, (ROWS, HD), "f16")
    held = tl.load(kv_ptr + pid * BLK * 2 * HD * 2, (BLK, 2 * HD), "f16")
    q = tl.wait(q_f)
    part = Partial(tl)
    for step in range(n):
        nxt = None
        if step + 1 < n:
            tl.send("right", held)
            nxt = tl.wait(tl.recv_async("left", (BLK, 2 * HD), "f16"))  # expect: KB109
        part.absorb(q, held)
        if nxt is not None:
            tl.free(held)
            held = nxt
    tl.store(o_ptr + pid * ROWS * HD * 2, (part.o / part.l[:, None]).to("f16"))


def kernel_fixed(tl, q_ptr, kv_ptr, o_ptr):
    pid, n = tl.program_id(0), tl.num_programs(0)
    q_f = tl.load_async(q_ptr + pid * ROWS * HD * 2, (ROWS, HD), "f16")
    held = tl.load(kv_ptr + pid * BLK * 2 * HD * 2, (BLK, 2 * HD), "f16")
    q = tl.wait(q_f)
    part = Partial(tl)
    for step in range(n):
        pending = None
        if step + 1 < n:
            tl.send("right", held)
            pending = tl.recv_async("left", (BLK, 2 * HD), "f16")
        part.absorb(q, held)
        if pending is not None:
            tl.free(held)
            held = tl.wait(pending)
    tl.store(o_ptr + pid * ROWS * HD * 2, (part.o / part.l[:, None]).to("f16"))


def _launch(kernel, pes):
    rng = np.random.default_rng(20)
    q = rng.standard_normal((pes * ROWS, HD)).astype(np.float16)
    kv = rng.standard_normal((pes * BLK, 2 * HD)).astype(np.float16)
    mem = Memory(size_bytes=2 * q.nbytes + kv.nbytes + 4096)
    q_ptr, kv_ptr, o_ptr = mem.put(q), mem.put(kv), mem.alloc(q.nbytes)

    def check(memory):
        s = q.astype(np.float64) @ kv[:, :HD].T.astype(np.float64) / math.sqrt(HD)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        want = p / p.sum(axis=1, keepdims=True) @ kv[:, HD:].astype(np.float64)
        assert np.allclose(memory.get(o_ptr, q.shape, "f16"), want, rtol=2e-2, atol=2e-2)

    config = HardwareConfig(mesh_rows=1, mesh_cols=pes, mesh_wrap=True)
    return Scenario(kernel, (q_ptr, kv_ptr, o_ptr), (pes,), mem, config, check)


def launch_bug(pes=4):
    return _launch(kernel_bug, pes)


def launch_fixed(pes=4):
    return _launch(kernel_fixed, pes)
