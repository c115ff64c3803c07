"""Paged decode: a page table is read first, then each packed K|V page from its address.

The bug fetches each page with load_async and waits for it on the next line:
the page's address has been known since the table landed, so the issue could
have gone up above the previous page's attention work. The fixed twin keeps
a three-page ring ahead of the consumer, fed from the table.
"""

from __future__ import annotations

import math

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB102", params=dict(n_pages=64), pes=[0])

HEADS, DIM, PAGE = 8, 128, 64
PAGE_SHAPE = (PAGE, 2 * DIM)


def kernel_bug(tl, q_ptr, table_ptr, o_ptr, n_pages):
    q_pending = tl.load_async(q_ptr, (HEADS, DIM), "f16")
    table = tl.load(table_ptr, (n_pages,), "i64")
    q = tl.wait(q_pending)
    m = tl.full((HEADS,), -math.inf)
    den = tl.zeros((HEADS,))
    acc = tl.zeros((HEADS, DIM))
    for i in range(n_pages):
        with tl.scope():
            fut = tl.load_async(int(table.data[i]), PAGE_SHAPE, "f16")  # expect: KB102
            page = tl.wait(fut)
            s = tl.dot(q, tl.trans(page[:, :DIM])) * (1 / math.sqrt(DIM))
            m_i = tl.maximum(m, tl.max(s, axis=1))
            p = tl.exp(s - m_i[:, None])
            c = tl.exp(m - m_i)
            den = den * c + tl.sum(p, axis=1)
            acc = acc * c[:, None] + tl.dot(p, page[:, DIM:])
            m = m_i
    tl.store(o_ptr, (acc / den[:, None]).to("f16"))


def kernel_fixed(tl, q_ptr, table_ptr, o_ptr, n_pages, ahead=3):
    q_pending = tl.load_async(q_ptr, (HEADS, DIM), "f16")
    table = tl.load(table_ptr, (n_pages,), "i64")
    q = tl.wait(q_pending)
    m = tl.full((HEADS,), -math.inf)
    den = tl.zeros((HEADS,))
    acc = tl.zeros((HEADS, DIM))
    ring = [tl.load_async(int(table.data[i]), PAGE_SHAPE, "f16") for i in range(ahead)]
    for i in range(n_pages):
        with tl.scope():
            page = tl.wait(ring.pop(0))
            if i + ahead < n_pages:
                ring.append(tl.load_async(int(table.data[i + ahead]), PAGE_SHAPE, "f16"))
            s = tl.dot(q, tl.trans(page[:, :DIM])) * (1 / math.sqrt(DIM))
            m_i = tl.maximum(m, tl.max(s, axis=1))
            p = tl.exp(s - m_i[:, None])
            c = tl.exp(m - m_i)
            den = den * c + tl.sum(p, axis=1)
            acc = acc * c[:, None] + tl.dot(p, page[:, DIM:])
            m = m_i
    tl.store(o_ptr, (acc / den[:, None]).to("f16"))


def paged_cache(n_pages, seed):
    """Q, a pool of shuffled pages in HBM, and the table of each logical page's address."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((HEADS, DIM)).astype(np.float16)
    pages = rng.standard_normal((n_pages, *PAGE_SHAPE)).astype(np.float16)
    order = rng.permutation(n_pages)
    mem = Memory(size_bytes=pages.nbytes + (1 << 16))
    q_ptr = mem.put(q)
    pool = mem.put(pages[order])
    page_bytes = pages[0].nbytes
    table = np.empty(n_pages, np.int64)
    table[order] = pool + np.arange(n_pages) * page_bytes
    table_ptr = mem.put(table)
    return q, pages, mem, q_ptr, table_ptr


def _launch(kernel, n_pages):
    q, pages, mem, q_ptr, table_ptr = paged_cache(n_pages, seed=3)
    o_ptr = mem.alloc(q.nbytes)

    def check(memory):
        kv = pages.reshape(-1, 2 * DIM).astype(np.float64)
        s = q.astype(np.float64) @ kv[:, :DIM].T / math.sqrt(DIM)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        want = p / p.sum(axis=1, keepdims=True) @ kv[:, DIM:]
        assert np.allclose(memory.get(o_ptr, q.shape, "f16"), want, atol=2e-2, rtol=2e-2)

    return Scenario(kernel, (q_ptr, table_ptr, o_ptr, n_pages), (1,), mem, HardwareConfig(), check)


def launch_bug(n_pages=64):
    return _launch(kernel_bug, n_pages)


def launch_fixed(n_pages=64):
    return _launch(kernel_fixed, n_pages)
