"""Ring attention over 4 PEs (mesh wraps): each PE waits for its K|V block to be delivered.

Every step sends the block it holds to the right, posts the receive of the
next one from the left, and then - needlessly - waits on the send's handle
before computing. The send copies the block, so nothing later depends on
its delivery. The fixed twin never waits on the sends.
"""

from __future__ import annotations

import math

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB108", params=dict(pes=4), pes=[0, 1, 2, 3])

BR, KV, D = 32, 64, 64


def _step(tl, q, kv, m, l_sum, acc):
    s = tl.dot(q, tl.trans(kv[:, :D])) * (1 / math.sqrt(D))
    m_new = tl.maximum(m, tl.max(s, axis=1))
    p = tl.exp(s - m_new[:, None])
    a = tl.exp(m - m_new)
    return m_new, l_sum * a + tl.sum(p, axis=1), acc * a[:, None] + tl.dot(p, kv[:, D:])


def kernel_bug(tl, q_ptr, kv_ptr, o_ptr):
    me, n = tl.program_id(0), tl.num_programs(0)
    q_f = tl.load_async(q_ptr + me * BR * D * 2, (BR, D), "f16")
    kv = tl.load(kv_ptr + me * KV * 2 * D * 2, (KV, 2 * D), "f16")
    q = tl.wait(q_f)
    m, l_sum, acc = tl.full((BR,), -math.inf), tl.zeros((BR,)), tl.zeros((BR, D))
    for step in range(n):
        if step < n - 1:
            sent = tl.send("right", kv)
            incoming = tl.recv_async("left", (KV, 2 * D), "f16")
            tl.wait(sent)  # expect: KB108
        m, l_sum, acc = _step(tl, q, kv, m, l_sum, acc)
        if step < n - 1:
            tl.free(kv)
            kv = tl.wait(incoming)
    tl.store(o_ptr + me * BR * D * 2, (acc / l_sum[:, None]).to("f16"))


def kernel_fixed(tl, q_ptr, kv_ptr, o_ptr):
    me, n = tl.program_id(0), tl.num_programs(0)
    q_f = tl.load_async(q_ptr + me * BR * D * 2, (BR, D), "f16")
    kv = tl.load(kv_ptr + me * KV * 2 * D * 2, (KV, 2 * D), "f16")
    q = tl.wait(q_f)
    m, l_sum, acc = tl.full((BR,), -math.inf), tl.zeros((BR,)), tl.zeros((BR, D))
    for step in range(n):
        if step < n - 1:
            tl.send("right", kv)
            incoming = tl.recv_async("left", (KV, 2 * D), "f16")
        m, l_sum, acc = _step(tl, q, kv, m, l_sum, acc)
        if step < n - 1:
            tl.free(kv)
            kv = tl.wait(incoming)
    tl.store(o_ptr + me * BR * D * 2, (acc / l_sum[:, None]).to("f16"))


def ring_problem(kernel, pes, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((pes * BR, D)).astype(np.float16)
    kv = rng.standard_normal((pes * KV, 2 * D)).astype(np.float16)
    mem = Memory(size_bytes=2 * q.nbytes + kv.nbytes + 4096)
    q_ptr, kv_ptr, o_ptr = mem.put(q), mem.put(kv), mem.alloc(q.nbytes)

    def check(memory):
        s = q.astype(np.float64) @ kv[:, :D].T.astype(np.float64) / math.sqrt(D)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        want = p / p.sum(axis=1, keepdims=True) @ kv[:, D:].astype(np.float64)
        assert np.allclose(memory.get(o_ptr, q.shape, "f16"), want, rtol=2e-2, atol=2e-2)

    config = HardwareConfig(mesh_rows=1, mesh_cols=pes, mesh_wrap=True)
    return Scenario(kernel, (q_ptr, kv_ptr, o_ptr), (pes,), mem, config, check)


def launch_bug(pes=4):
    return ring_problem(kernel_bug, pes, seed=19)


def launch_fixed(pes=4):
    return ring_problem(kernel_fixed, pes, seed=19)
