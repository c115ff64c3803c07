"""Pooled projection of 8 gathered row tiles, consumed through a generator helper that drains LIFO.

``drain`` yields the tiles newest first, so the very first wait is on the
last of eight transfers still queued behind the seven older ones; the
pooling work of every tile then runs after all DMA is done instead of under
it. The fixed twin's generator drains oldest first.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB104", params=dict(n=8), pes=[0])

ROWS, D, P = 64, 128, 16


def drain_newest_first(tl, futures):
    while futures:
        yield tl.wait(futures.pop())  # expect: KB104


def drain_in_order(tl, futures):
    for f in futures:
        yield tl.wait(f)


def _pool(tl, index, out_ptr, drain, w_f):
    futures = [tl.load_async(int(row), (ROWS, D), "f16") for row in index]
    w = tl.wait(w_f)
    acc = tl.zeros((ROWS, P))
    for tile in drain(tl, futures):  # expect-call
        acc = acc + tl.dot(tile, w)
    tl.store(out_ptr, acc)


def kernel_bug(tl, rows, w_ptr, out_ptr):
    w_f = tl.load_async(w_ptr, (D, P), "f16")
    _pool(tl, rows, out_ptr, drain_newest_first, w_f)


def kernel_fixed(tl, rows, w_ptr, out_ptr):
    w_f = tl.load_async(w_ptr, (D, P), "f16")
    _pool(tl, rows, out_ptr, drain_in_order, w_f)


def _launch(kernel, n):
    rng = np.random.default_rng(16)
    table = rng.standard_normal((2 * n, ROWS, D)).astype(np.float16)
    w = (rng.standard_normal((D, P)) / 8).astype(np.float16)
    pick = rng.choice(2 * n, n, replace=False)
    mem = Memory(size_bytes=table.nbytes + w.nbytes + ROWS * P * 4 + 4096)
    base, w_ptr = mem.put(table), mem.put(w)
    rows = [base + int(i) * table[0].nbytes for i in pick]  # the host knows the gather list
    out_ptr = mem.alloc(ROWS * P * 4)

    def check(memory):
        want = table[pick].astype(np.float64).sum(axis=0) @ w
        assert np.allclose(memory.get(out_ptr, (ROWS, P), "f32"), want, rtol=1e-3, atol=1e-2)

    return Scenario(kernel, (rows, w_ptr, out_ptr), (1,), mem, HardwareConfig(), check)


def launch_bug(n=8):
    return _launch(kernel_bug, n)


def launch_fixed(n=8):
    return _launch(kernel_fixed, n)
