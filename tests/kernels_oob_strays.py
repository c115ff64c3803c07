"""Kernels whose line strays from its tensor on one issue (an index one tile too far),
and one whose line walks several tensors on purpose: for tests/test_oob_strays.py."""

from __future__ import annotations

import numpy as np

from emulator import Memory
from emulator.scenarios import Scenario

ROWS, COLS = 8, 64
TILE = ROWS * COLS * 4


def kernel_prefetch_too_far(tl, src, dst, tiles):
    """Prefetches tile t + 1 with no ``t + 1 < tiles`` guard: the last prefetch starts
    exactly at the source's end."""
    pending = tl.load_async(src, (ROWS, COLS), "f32")
    for t in range(tiles):
        with tl.scope():
            x = tl.wait(pending)
            pending = tl.load_async(src + (t + 1) * TILE, (ROWS, COLS), "f32")
            tl.store(dst + t * TILE, x + 1.0)
    tl.wait(pending)


def kernel_walks_tensors(tl, first, second, third, dst):
    """One load line reading two tiles of each of three tensors in turn."""
    total = None
    for base in (first, second, third):
        for t in range(2):
            x = tl.wait(tl.load_async(base + t * TILE, (ROWS, COLS), "f32"))
            total = x if total is None else total + x
    tl.wait(tl.store(dst, total))


def kernel_leaves_and_returns(tl, first, second, dst):
    """One load line reading the first tensor's tiles with one tile of the second
    between them (a helper given either tensor): most of its issues in ``first``."""
    total = None
    for base, t in ((first, 0), (second, 0), (first, 1), (first, 2), (first, 3)):
        x = tl.wait(tl.load_async(base + t * TILE, (ROWS, COLS), "f32"))
        total = x if total is None else total + x
    tl.wait(tl.store(dst, total))


def _memory() -> Memory:
    return Memory(size_bytes=1 << 20)


def launch_prefetch_too_far(tiles: int = 4, gap: bool = False) -> Scenario:
    """The source then the output (named) right after it, or an unnamed buffer between."""
    mem = _memory()
    x = np.arange(tiles * ROWS * COLS, dtype=np.float32).reshape(tiles * ROWS, COLS)
    src = mem.put(x, name="SRC")
    if gap:
        mem.alloc(TILE)  # a workspace no tensor names
    dst = mem.alloc(x.nbytes)
    mem.name("DST", dst, x.shape, "f32")
    return Scenario(kernel_prefetch_too_far, (src, dst, tiles), (1,), mem)


def launch_walks_tensors() -> Scenario:
    """Three inputs of two tiles each, read by one line."""
    mem = _memory()
    ptrs = [
        mem.put(np.full((2 * ROWS, COLS), i, np.float32), name=name)
        for i, name in enumerate(("A", "B", "C"))
    ]
    dst = mem.alloc(TILE)
    mem.name("OUT", dst, (ROWS, COLS), "f32")
    return Scenario(kernel_walks_tensors, (*ptrs, dst), (1,), mem)


def launch_leaves_and_returns() -> Scenario:
    """Four tiles of A then one of B right after it, read by one line."""
    mem = _memory()
    a = mem.put(np.ones((4 * ROWS, COLS), np.float32), name="A")
    b = mem.put(np.ones((ROWS, COLS), np.float32), name="B")
    dst = mem.alloc(TILE)
    mem.name("OUT", dst, (ROWS, COLS), "f32")
    return Scenario(kernel_leaves_and_returns, (a, b, dst), (1,), mem)
