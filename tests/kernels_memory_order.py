"""Kernels whose accesses depend on each other through HBM bytes, for the findings' edits.

Each pairs a flaw in placement with an access of the same bytes that any fix must keep
in order: a read-back of an unwaited store (a hazard), a buffer refilled after it was
read (write-after-read), a buffer written twice (write-after-write), a load that runs
past the end of its tensor, and a step with two loads issued at two lines.
"""

from __future__ import annotations

import numpy as np

from emulator import Memory
from emulator.scenarios import Scenario

N = 64  # 64x64 f16 tiles: 8 KiB, a 64x64x64 dot holds the GEMM engine 1,024 cycles
TILE = N * N * 2


def _ones(tl):
    return tl.full((N, N), 0.5, "f16")


def kernel_scratch_race(tl, src, scratch, dst, n_tiles):
    """Each tile goes out to a scratch area and is read back before the store is waited."""
    w = _ones(tl)
    for i in range(n_tiles):
        a = tl.load(src + i * TILE, (N, N), "f16")
        tl.store(scratch + i * TILE, a)
        busy = tl.dot(w, w).to("f16")  # work that needs neither
        back = tl.wait(tl.load_async(scratch + i * TILE, (N, N), "f16"))
        tl.wait(tl.store(dst + i * TILE, back + busy))


def kernel_scratch_fenced(tl, src, scratch, dst, n_tiles):
    """The twin that waits each scratch store before reading it back."""
    w = _ones(tl)
    for i in range(n_tiles):
        a = tl.load(src + i * TILE, (N, N), "f16")
        out = tl.store(scratch + i * TILE, a)
        busy = tl.dot(w, w).to("f16")
        tl.wait(out)
        back = tl.wait(tl.load_async(scratch + i * TILE, (N, N), "f16"))
        tl.wait(tl.store(dst + i * TILE, back + busy))


def kernel_refill(tl, buf, dst, wait_at):
    """Reads a buffer, then overwrites it with new work, then uses what it read: the
    read's wait must stay above the overwrite (``wait_at``: 0 right after the issue,
    1 just before the overwrite)."""
    w = _ones(tl)
    pending = tl.load_async(buf, (N, N), "f16")
    old = tl.wait(pending) if wait_at == 0 else None
    first = tl.dot(w, w).to("f16")
    if wait_at == 1:
        old = tl.wait(pending)
    tl.store(buf, first)
    second = tl.dot(w, first).to("f16")
    tl.wait(tl.store(dst, old + second))


def kernel_rewrite(tl, buf, dst, wait_at):
    """Writes a buffer twice: the first store's wait must stay above the second
    (``wait_at``: 0 right after the first store, 1 just before the second)."""
    w = _ones(tl)
    first = tl.store(buf, w)
    if wait_at == 0:
        tl.wait(first)  # right after the store
    work = tl.dot(w, w).to("f16")
    more = tl.dot(work, w).to("f16")
    if wait_at == 1:
        tl.wait(first)
    tl.wait(tl.store(buf, more))
    tl.wait(tl.store(dst, work))


def kernel_overrun(tl, table, following, out, rows):
    """Fills the tensor after a table (waited early), then reads ``rows`` rows of the
    table starting 8 rows before its end: the last ones lie in that next tensor."""
    w = _ones(tl)
    tl.wait(tl.store(following, tl.full((8, N), 2.0, "f16")))
    work = tl.dot(w, w)
    start = (TABLE_ROWS - 8) * N * 2
    x = tl.wait(tl.load_async(table + start, (rows, N), "f16"))
    tl.wait(tl.store(out, x + work.to("f16")[:rows]))


TABLE_ROWS = 40


def kernel_two_lines(tl, a_ptr, b_ptr, dst, n_tiles):
    """Two loads a step, issued at two lines and waited at once: one fix for both."""
    acc = tl.zeros((N, N), "f32")
    for i in range(n_tiles):
        fa = tl.load_async(a_ptr + i * TILE, (N, N), "f16")
        fb = tl.load_async(b_ptr + i * TILE, (N, N), "f16")
        acc = acc + tl.dot(tl.wait(fa), tl.wait(fb))
    tl.wait(tl.store(dst, acc))


def _memory(size: int) -> Memory:
    return Memory(size_bytes=size)


def launch_scratch(fenced: int = 0, n_tiles: int = 4) -> Scenario:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n_tiles * N, N)).astype(np.float16)
    mem = _memory(4 * x.nbytes + 4096)
    src = mem.put(x, name="SRC")
    scratch = mem.alloc(x.nbytes)
    mem.name("SCRATCH", scratch, x.shape, "f16")
    dst = mem.alloc(x.nbytes)
    mem.name("DST", dst, x.shape, "f16")
    kernel = kernel_scratch_fenced if fenced else kernel_scratch_race
    return Scenario(kernel, (src, scratch, dst, n_tiles), (1,), mem)


def launch_refill(wait_at: int = 0) -> Scenario:
    mem = _memory(4 * TILE + 4096)
    buf = mem.put(np.ones((N, N), np.float16), name="BUF")
    dst = mem.alloc(TILE)
    mem.name("DST", dst, (N, N), "f16")
    return Scenario(kernel_refill, (buf, dst, wait_at), (1,), mem)


def launch_rewrite(wait_at: int = 0) -> Scenario:
    mem = _memory(4 * TILE + 4096)
    buf = mem.alloc(TILE)
    mem.name("BUF", buf, (N, N), "f16")
    dst = mem.alloc(TILE)
    mem.name("DST", dst, (N, N), "f16")
    return Scenario(kernel_rewrite, (buf, dst, wait_at), (1,), mem)


def launch_overrun(rows: int = 16) -> Scenario:
    table = np.ones((TABLE_ROWS, N), np.float16)
    after = np.zeros((32, N), np.float16)
    mem = _memory(4 * table.nbytes + 4096)
    table_ptr = mem.put(table, name="TABLE")
    following = mem.put(after, name="NEXT")
    out = mem.alloc(rows * N * 2)
    mem.name("OUT", out, (rows, N), "f16")
    return Scenario(kernel_overrun, (table_ptr, following, out, rows), (1,), mem)


def launch_two_lines(n_tiles: int = 6) -> Scenario:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((n_tiles * N, N)).astype(np.float16)
    b = rng.standard_normal((n_tiles * N, N)).astype(np.float16)
    mem = _memory(3 * a.nbytes + 4 * TILE + 4096)
    a_ptr, b_ptr = mem.put(a, name="A"), mem.put(b, name="B")
    dst = mem.alloc(N * N * 4)
    mem.name("DST", dst, (N, N), "f32")
    return Scenario(kernel_two_lines, (a_ptr, b_ptr, dst, n_tiles), (1,), mem)


def kernel_publish(tl, shared, dst, send_at):
    """PE 0 writes a tile to HBM, waits it, does unrelated work and then signals PE 1,
    which reads the tile after the signal (``send_at``: 0 after the work, 1 right after
    the store's wait, the earliest that still orders PE 1's read)."""
    w = _ones(tl)
    if tl.program_id(0) == 0:
        flag = tl.full((8, 8), 1.0, "f16")
        tl.wait(tl.store(shared, tl.dot(w, w).to("f16")))
        if send_at == 1:
            tl.send("right", flag)
        busy = tl.dot(w, w)
        busy = tl.dot(busy.to("f16"), w)
        tl.store(dst + TILE, busy.to("f16"))
        if send_at == 0:
            tl.send("right", flag)  # the signal, late
    else:
        tl.wait(tl.recv_async("left", (8, 8), "f16"))
        tile = tl.wait(tl.load_async(shared, (N, N), "f16"))
        tl.wait(tl.store(dst, tile))


def launch_publish(send_at: int = 0) -> Scenario:
    from emulator import HardwareConfig

    mem = _memory(8 * TILE + 4096)
    shared = mem.alloc(TILE)
    mem.name("SHARED", shared, (N, N), "f16")
    dst = mem.alloc(2 * TILE)
    mem.name("DST", dst, (2 * N, N), "f16")
    config = HardwareConfig(mesh_rows=1, mesh_cols=2, mesh_wrap=False)
    return Scenario(kernel_publish, (shared, dst, send_at), (2,), mem, config=config)


def kernel_some_read_back(tl, buf, dst, n_tiles, fixed):
    """Stores a tile each step, waited at once; every other step reads it back after
    some work. The fix (``fixed``): wait just before the read-back, nowhere else."""
    w = _ones(tl)
    for i in range(n_tiles):
        stored = tl.store(buf + i * TILE, w)
        if not fixed:
            tl.wait(stored)  # the early wait
        work = tl.dot(w, w).to("f16")
        if i % 2 == 0:
            if fixed:
                tl.wait(stored)
            back = tl.wait(tl.load_async(buf + i * TILE, (N, N), "f16"))
            tl.store(dst + i * TILE, back + work)


def launch_some_read_back(fixed: int = 0, n_tiles: int = 6) -> Scenario:
    mem = _memory(2 * n_tiles * TILE + 4096)
    buf = mem.alloc(n_tiles * TILE)
    mem.name("BUF", buf, (n_tiles * N, N), "f16")
    dst = mem.alloc(n_tiles * TILE)
    mem.name("DST", dst, (n_tiles * N, N), "f16")
    return Scenario(kernel_some_read_back, (buf, dst, n_tiles, fixed), (1,), mem)
