"""A paged-attention decode written as a user would: each sequence's K and V pages are
gathered through its page table, ``depth`` pages ahead of their waits.

The page table and the query are blocking loads (so a finding of their own gains more
alone than either page stream does); the K and V loads of a page are issued together
and waited together, so deepening one stream alone leaves each step waiting for the
other. Lines a test looks for carry a ``# mark: NAME`` comment.
"""

from __future__ import annotations

import numpy as np

from emulator import Memory, run_kernel

D, P, MAXP = 64, 16, 8
PAGE_BYTES = P * D * 2
N_PAGES = (3, 4, 2, 5)


def _issue_page(tl, k_ptr, v_ptr, page, fk, fv) -> None:
    """Issue the K and V loads of one page."""
    fk.append(tl.load_async(k_ptr + int(page) * PAGE_BYTES, (P, D), "f16"))  # mark: k
    fv.append(tl.load_async(v_ptr + int(page) * PAGE_BYTES, (P, D), "f16"))  # mark: v


def paged_decode(tl, q_ptr, pt_ptr, k_ptr, v_ptr, o_ptr, n_seqs, depth):
    """Per sequence: read its page table, then attend over its pages, ``depth`` ahead."""
    for s_i in range(n_seqs):
        with tl.scope():
            pt = tl.load(pt_ptr + s_i * MAXP * 4, (1, MAXP), "i32").data[0]
            n = int((pt >= 0).sum())
            q = tl.load(q_ptr + s_i * D * 2, (1, D), "f16")
            fk, fv = [], []

            for j in range(min(depth, n)):
                _issue_page(tl, k_ptr, v_ptr, pt[j], fk, fv)
            m = tl.full((1,), -1e30, "f32")
            l_sum = tl.zeros((1,), "f32")
            acc = tl.zeros((1, D), "f32")
            for j in range(n):
                k = tl.wait(fk[j])  # mark: k wait
                v = tl.wait(fv[j])
                if j + depth < n:
                    _issue_page(tl, k_ptr, v_ptr, pt[j + depth], fk, fv)
                s = tl.dot(q, tl.trans(k)) * (1.0 / np.sqrt(D))
                m_new = tl.maximum(m, tl.max(s, axis=1))
                alpha = tl.exp(m - m_new)
                p = tl.exp(s - m_new[:, None])
                l_sum = l_sum * alpha + tl.sum(p, axis=1)
                acc = acc * alpha[:, None] + tl.dot(p.to("f16"), v)
                m = m_new
            tl.wait(tl.store(o_ptr + s_i * D * 4, acc / l_sum[:, None]))


def run_paged(trace, depth: int) -> None:
    """Record ``paged_decode`` over scattered pages, ``depth`` pages ahead, to ``trace``."""
    rng = np.random.default_rng(3)
    total = sum(N_PAGES)
    perm = rng.permutation(total)
    pt = -np.ones((len(N_PAGES), MAXP), np.int32)
    start = 0
    for s, n in enumerate(N_PAGES):
        pt[s, :n] = perm[start : start + n]
        start += n
    mem = Memory(size_bytes=1 << 22)
    q_ptr = mem.put(rng.standard_normal((len(N_PAGES), D)).astype(np.float16), name="Q")
    pt_ptr = mem.put(pt, name="PT")
    k_ptr = mem.put(rng.standard_normal((total * P, D)).astype(np.float16), name="K")
    v_ptr = mem.put(rng.standard_normal((total * P, D)).astype(np.float16), name="V")
    o_ptr = mem.alloc(len(N_PAGES) * D * 4)
    args = (q_ptr, pt_ptr, k_ptr, v_ptr, o_ptr, len(N_PAGES), depth)
    run_kernel(paged_decode, args, (1,), mem, trace=trace)
