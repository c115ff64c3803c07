"""Clean: a paged decode whose first pages cannot be fetched before the page table lands.

The table and Q are requested together; Q is scaled while the table is in
flight; then the first pages are issued from the table and the first one is
waited at once - there is no work left that does not need it, and its address
did not exist before the table arrived. Later pages ride a two-deep ring.
"""

from __future__ import annotations

import math

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

CLEAN = dict(params=dict(n_pages=48), note="dependent loads cannot be hoisted above the table")

HEADS, DIM, PAGE = 8, 128, 64


def kernel(tl, q_ptr, table_ptr, o_ptr, n_pages):
    q_f = tl.load_async(q_ptr, (HEADS, DIM), "f16")
    table_f = tl.load_async(table_ptr, (n_pages,), "i64")
    q = tl.wait(q_f) * (1 / math.sqrt(DIM))
    m = tl.full((HEADS,), -math.inf)
    den = tl.zeros((HEADS,))
    acc = tl.zeros((HEADS, DIM))
    table = tl.wait(table_f)
    addr = [int(a) for a in table.data]
    k_next = [tl.load_async(addr[i], (PAGE, DIM), "f16") for i in range(3)]
    v_next = [tl.load_async(addr[i] + PAGE * DIM * 2, (PAGE, DIM), "f16") for i in range(3)]
    for i in range(n_pages):
        with tl.scope():
            k = tl.wait(k_next.pop(0))
            if i + 3 < n_pages:
                k_next.append(tl.load_async(addr[i + 3], (PAGE, DIM), "f16"))
                v_next.append(tl.load_async(addr[i + 3] + PAGE * DIM * 2, (PAGE, DIM), "f16"))
            s = tl.dot(q, tl.trans(k))
            m_i = tl.maximum(m, tl.max(s, axis=1))
            p = tl.exp(s - m_i[:, None])
            c = tl.exp(m - m_i)
            den = den * c + tl.sum(p, axis=1)
            v = tl.wait(v_next.pop(0))
            acc = acc * c[:, None] + tl.dot(p, v)
            m = m_i
    tl.store(o_ptr, (acc / den[:, None]).to("f16"))


def launch(n_pages=48):
    rng = np.random.default_rng(11)
    q = rng.standard_normal((HEADS, DIM)).astype(np.float16)
    pages = rng.standard_normal((n_pages, 2, PAGE, DIM)).astype(np.float16)  # K page, V page
    order = rng.permutation(n_pages)
    mem = Memory(size_bytes=pages.nbytes + (1 << 16))
    q_ptr, pool = mem.put(q), mem.put(pages[order])
    table = np.empty(n_pages, np.int64)
    table[order] = pool + np.arange(n_pages) * pages[0].nbytes
    table_ptr, o_ptr = mem.put(table), mem.alloc(q.nbytes)

    def check(memory):
        k = pages[:, 0].reshape(-1, DIM).astype(np.float64)
        v = pages[:, 1].reshape(-1, DIM).astype(np.float64)
        s = q.astype(np.float64) @ k.T / math.sqrt(DIM)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        want = p / p.sum(axis=1, keepdims=True) @ v
        assert np.allclose(memory.get(o_ptr, q.shape, "f16"), want, atol=2e-2, rtol=2e-2)

    return Scenario(kernel, (q_ptr, table_ptr, o_ptr, n_pages), (1,), mem, HardwareConfig(), check)
