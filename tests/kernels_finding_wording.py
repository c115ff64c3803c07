"""Kernels whose stream findings' words a test checks against the trace: a two-stream ring
buffer refilled one tile ahead (KB107 names both lines), and tiles fetched through a helper
below a blocking load (KB102's first issue goes above that load).

Lines a test looks for end with ``# mark: NAME`` (``kernels_for_findings.line_of``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from emulator import Memory, run_kernel
from kbdebug.replay import Replay

SLOTS = 3
X_TILE = (16, 64)  # 2 KB f16: the small stream
Y_TILE = (64, 128)  # 16 KB f16: the stream that stalls
X_BYTES = 16 * 64 * 2
Y_BYTES = 64 * 128 * 2
Q_SHAPE = (32, 128)
K_TILE = (64, 128)
K_BYTES = 64 * 128 * 2


def ring_one_ahead(tl, x_ptr, y_ptr, out_ptr, n):
    """A ring of SLOTS buffers per stream, primed with one tile and refilled one ahead."""
    xs = [None] * SLOTS
    ys = [None] * SLOTS
    xs[0] = tl.load_async(x_ptr, X_TILE, "f16")  # mark: x_first
    ys[0] = tl.load_async(y_ptr, Y_TILE, "f16")  # mark: y_first
    acc = tl.zeros((X_TILE[0], Y_TILE[1]), "f32")
    for i in range(n):
        x = tl.wait(xs[i % SLOTS])  # mark: x_wait
        y = tl.wait(ys[i % SLOTS])  # mark: y_wait
        if i + 1 < n:
            slot = (i + 1) % SLOTS
            xs[slot] = tl.load_async(x_ptr + (i + 1) * X_BYTES, X_TILE, "f16")  # mark: x_next
            ys[slot] = tl.load_async(y_ptr + (i + 1) * Y_BYTES, Y_TILE, "f16")  # mark: y_next
        acc = acc + tl.dot(x, y)
        tl.free(x)
        tl.free(y)
    tl.wait(tl.store(out_ptr, acc))


def fetch(tl, k_ptr, j):
    """Load tile ``j`` and wait for it at once."""
    return tl.wait(tl.load_async(k_ptr + j * K_BYTES, K_TILE, "f16"))  # mark: fetch


def issue(tl, k_ptr, j):
    """Issue the load of tile ``j``."""
    return tl.load_async(k_ptr + j * K_BYTES, K_TILE, "f16")


def fetched_below_blocking(tl, q_ptr, k_ptr, out_ptr, n):
    """A blocking load, then a loop over tiles each fetched (issued and waited) by a helper."""
    q = tl.load(q_ptr, Q_SHAPE, "f16")  # mark: q
    acc = tl.zeros((Q_SHAPE[0],), "f32")
    for j in range(n):
        with tl.scope():
            k = fetch(tl, k_ptr, j)  # mark: call
            acc = acc + tl.sum(tl.exp(tl.dot(q, tl.trans(k)) * 0.05), axis=1)
    tl.wait(tl.store(out_ptr, acc))


def first_above_blocking(tl, q_ptr, k_ptr, out_ptr, n):
    """fetched_below_blocking as KB102 says: tile 0 before the blocking load, each next tile
    right after the previous tile's wait."""
    future = issue(tl, k_ptr, 0)
    q = tl.load(q_ptr, Q_SHAPE, "f16")
    acc = tl.zeros((Q_SHAPE[0],), "f32")
    for j in range(n):
        with tl.scope():
            k = tl.wait(future)
            if j + 1 < n:
                future = issue(tl, k_ptr, j + 1)
            acc = acc + tl.sum(tl.exp(tl.dot(q, tl.trans(k)) * 0.05), axis=1)
    tl.wait(tl.store(out_ptr, acc))


def first_below_blocking(tl, q_ptr, k_ptr, out_ptr, n):
    """One tile ahead with tile 0 issued after the blocking load, just before the loop."""
    q = tl.load(q_ptr, Q_SHAPE, "f16")
    future = issue(tl, k_ptr, 0)
    acc = tl.zeros((Q_SHAPE[0],), "f32")
    for j in range(n):
        with tl.scope():
            k = tl.wait(future)
            if j + 1 < n:
                future = issue(tl, k_ptr, j + 1)
            acc = acc + tl.sum(tl.exp(tl.dot(q, tl.trans(k)) * 0.05), axis=1)
    tl.wait(tl.store(out_ptr, acc))


def run_ring(kernel, trace: Path, n: int = 12) -> Replay:
    """Run a ring kernel over ``n`` tiles of each stream, write ``trace`` and open it."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n * X_TILE[0], X_TILE[1])).astype(np.float16)
    y = rng.standard_normal((n * Y_TILE[0], Y_TILE[1])).astype(np.float16)
    memory = Memory(size_bytes=1 << 22)
    x_ptr, y_ptr = memory.put(x), memory.put(y)
    out_ptr = memory.alloc(X_TILE[0] * Y_TILE[1] * 4)
    run_kernel(kernel, (x_ptr, y_ptr, out_ptr, n), (1,), memory, trace=trace)
    return Replay.open(trace)


def run_fetch(kernel, trace: Path, n: int = 10) -> Replay:
    """Run a fetching kernel over ``n`` K tiles, write ``trace`` and open it."""
    rng = np.random.default_rng(2)
    q = (rng.standard_normal(Q_SHAPE) * 0.3).astype(np.float16)
    k = (rng.standard_normal((n * K_TILE[0], K_TILE[1])) * 0.3).astype(np.float16)
    memory = Memory(size_bytes=1 << 22)
    q_ptr, k_ptr = memory.put(q), memory.put(k)
    out_ptr = memory.alloc(Q_SHAPE[0] * 4)
    run_kernel(kernel, (q_ptr, k_ptr, out_ptr, n), (1,), memory, trace=trace)
    return Replay.open(trace)
