"""Small kernels written to trigger, or carefully not to trigger, each findings rule.

Each kernel streams ``n`` tiles of 64x64 f16 (8 KB: 171 cycles on a read
channel, data usable 500 cycles later under the default HardwareConfig).
Lines a test looks for carry a ``# mark: NAME`` comment; ``line_of`` finds them
so no test hard-codes a line number.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np

from emulator import HardwareConfig, Memory, run_kernel
from kbdebug.replay import Replay

TILE = (64, 64)
TILE_BYTES = 64 * 64 * 2
SMALL = (32, 64)  # tl.dot(SMALL, SMALL^T): 256 cycles on the GEMM engine


def blocking_then_compute(tl, a_ptr, b_ptr, out_ptr, n):
    """KB101: a blocking load followed by a 1024-cycle dot its transfer could hide under."""
    for j in range(n):
        with tl.scope():
            x = tl.load(a_ptr + j * TILE_BYTES, TILE, "f16")  # mark: load
            tl.dot(x, x)


def blocking_then_store(tl, a_ptr, b_ptr, out_ptr, n):
    """No KB101: blocking loads with no compute after them (a copy)."""
    for j in range(n):
        with tl.scope():
            x = tl.load(a_ptr + j * TILE_BYTES, TILE, "f16")  # mark: load
            tl.store(out_ptr, x)


def prefetched(tl, a_ptr, b_ptr, out_ptr, n):
    """No finding at all: each tile is issued a tile ahead and its dot hides the next load."""
    future = tl.load_async(a_ptr, TILE, "f16")  # mark: first
    for j in range(n):
        with tl.scope():
            x = tl.wait(future)  # mark: wait
            if j + 1 < n:
                future = tl.load_async(a_ptr + (j + 1) * TILE_BYTES, TILE, "f16")  # mark: load
            tl.dot(x, x)


def wait_right_after_issue(tl, a_ptr, b_ptr, out_ptr, n):
    """KB102: every load_async is waited at once, so its wait stalls for the whole load."""
    for j in range(n):
        with tl.scope():
            future = tl.load_async(a_ptr + j * TILE_BYTES, TILE, "f16")  # mark: load
            x = tl.wait(future)  # mark: wait
            tl.dot(x, x)


def wait_after_work(tl, a_ptr, b_ptr, out_ptr, n):
    """No KB102: 256 cycles of compute separate each load_async from its wait."""
    q = tl.zeros(SMALL, "f16")
    for j in range(n):
        with tl.scope():
            future = tl.load_async(a_ptr + j * TILE_BYTES, TILE, "f16")  # mark: load
            tl.dot(q, tl.trans(q))
            x = tl.wait(future)
            tl.exp(x)


def issued_out_of_need_order(tl, a_ptr, b_ptr, out_ptr, n):
    """KB103: B is issued first but needed second, so A queues behind it and A's wait stalls."""
    q = tl.zeros(SMALL, "f16")
    for j in range(n):
        with tl.scope():
            fb = tl.load_async(b_ptr + j * TILE_BYTES, TILE, "f16")  # mark: b
            fa = tl.load_async(a_ptr + j * TILE_BYTES, TILE, "f16")  # mark: a
            tl.dot(q, tl.trans(q))
            a = tl.wait(fa)  # mark: wait a
            tl.exp(a)
            b = tl.wait(fb)
            tl.exp(b)


def issued_in_need_order(tl, a_ptr, b_ptr, out_ptr, n):
    """No KB103 (nor KB104): A is issued and waited first; B queues behind A, as it should."""
    q = tl.zeros(SMALL, "f16")
    for j in range(n):
        with tl.scope():
            fa = tl.load_async(a_ptr + j * TILE_BYTES, TILE, "f16")  # mark: a
            fb = tl.load_async(b_ptr + j * TILE_BYTES, TILE, "f16")  # mark: b
            tl.dot(q, tl.trans(q))
            a = tl.wait(fa)
            tl.exp(a)
            b = tl.wait(fb)
            tl.exp(b)


def waits_out_of_order(tl, a_ptr, b_ptr, out_ptr, n):
    """KB104 (with two read channels): B's wait stalls while A, issued first, is not waited."""
    q = tl.zeros(SMALL, "f16")
    for j in range(n):
        with tl.scope():
            fa = tl.load_async(a_ptr + j * TILE_BYTES, TILE, "f16")  # mark: a
            fb = tl.load_async(b_ptr + j * TILE_BYTES, TILE, "f16")  # mark: b
            tl.dot(q, tl.trans(q))
            b = tl.wait(fb)  # mark: wait b
            a = tl.wait(fa)
            tl.exp(a)
            tl.exp(b)


def wait_before_independent_work(tl, a_ptr, b_ptr, out_ptr, n):
    """KB104: a prefetched tile is waited before a dot that does not need it; its first
    use comes after the dot."""
    q = tl.zeros(SMALL, "f16")
    future = tl.load_async(a_ptr, TILE, "f16")
    for j in range(n):
        with tl.scope():
            x = tl.wait(future)  # mark: wait
            if j + 1 < n:
                future = tl.load_async(a_ptr + (j + 1) * TILE_BYTES, TILE, "f16")
            tl.dot(q, tl.trans(q))
            tl.dot(q, tl.trans(q))
            tl.exp(x)


def wait_at_first_use(tl, a_ptr, b_ptr, out_ptr, n):
    """No KB104: the same kernel with each wait right before the tile's first use."""
    q = tl.zeros(SMALL, "f16")
    future = tl.load_async(a_ptr, TILE, "f16")
    for j in range(n):
        with tl.scope():
            current = future
            if j + 1 < n:
                future = tl.load_async(a_ptr + (j + 1) * TILE_BYTES, TILE, "f16")
            tl.dot(q, tl.trans(q))
            tl.dot(q, tl.trans(q))
            tl.exp(tl.wait(current))


def waits_in_order(tl, a_ptr, b_ptr, out_ptr, n):
    """No KB104 (two read channels): A is waited and used while B lands."""
    q = tl.zeros(SMALL, "f16")
    for j in range(n):
        with tl.scope():
            fa = tl.load_async(a_ptr + j * TILE_BYTES, TILE, "f16")
            fb = tl.load_async(b_ptr + j * TILE_BYTES, TILE, "f16")
            tl.dot(q, tl.trans(q))
            a = tl.wait(fa)
            tl.exp(a)
            b = tl.wait(fb)  # mark: wait b
            tl.exp(b)


def issued_after_compute(tl, a_ptr, b_ptr, out_ptr, n):
    """KB105: a 1024-cycle dot runs with the read channel idle, then the load it needed next."""
    q = tl.zeros(TILE, "f16")
    s = tl.zeros(SMALL, "f16")
    for j in range(n):
        with tl.scope():
            tl.dot(q, q)
            future = tl.load_async(a_ptr + j * TILE_BYTES, TILE, "f16")  # mark: load
            tl.dot(s, tl.trans(s))
            x = tl.wait(future)
            tl.exp(x)


def issued_before_compute(tl, a_ptr, b_ptr, out_ptr, n):
    """No KB105: the load is issued before the long dot, which hides its transfer."""
    q = tl.zeros(TILE, "f16")
    s = tl.zeros(SMALL, "f16")
    for j in range(n):
        with tl.scope():
            future = tl.load_async(a_ptr + j * TILE_BYTES, TILE, "f16")  # mark: load
            tl.dot(q, q)
            tl.dot(s, tl.trans(s))
            x = tl.wait(future)
            tl.exp(x)


def raises_midway(tl, a_ptr, b_ptr, out_ptr, n):
    """Not about findings: a kernel that fails after some work, for failed-run reports."""
    x = tl.load(a_ptr, TILE, "f16")
    tl.dot(x, x)
    raise RuntimeError("boom")  # mark: raise


def line_of(kernel, mark: str) -> int:
    """The line of ``kernel``'s source that ends with ``# mark: MARK``."""
    lines, first = inspect.getsourcelines(kernel)
    for offset, line in enumerate(lines):
        if line.rstrip().endswith(f"# mark: {mark}"):
            return first + offset
    raise LookupError(f"{kernel.__name__} has no line marked {mark!r}")


def line_containing(function, text: str) -> int:
    """The line number of the first line of ``function``'s source that contains ``text``."""
    lines, first = inspect.getsourcelines(function)
    for offset, line in enumerate(lines):
        if text in line:
            return first + offset
    raise LookupError(f"{function.__name__} has no line containing {text!r}")


def run(kernel, trace: Path, n: int = 8, config: HardwareConfig | None = None) -> Replay:
    """Run ``kernel`` over ``n`` tiles of A and B, write ``trace`` and open it."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n * 64, 64)).astype(np.float16)
    b = rng.standard_normal((n * 64, 64)).astype(np.float16)
    memory = Memory(size_bytes=a.nbytes + b.nbytes + TILE_BYTES + (1 << 12))
    a_ptr, b_ptr = memory.put(a), memory.put(b)
    out_ptr = memory.alloc(TILE_BYTES)
    run_kernel(kernel, (a_ptr, b_ptr, out_ptr, n), (1,), memory, config, trace=trace)
    return Replay.open(trace)
