"""Write-after-read hazards on one PE: a store to bytes an earlier load, not yet waited, reads."""

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

ROWS, COLS = 8, 16  # one f32 tile: 512 bytes, 11 cycles on a DMA channel
ROW = COLS * 4
TILE = ROWS * ROW
BIG = (
    64,
    128,
)  # 32 KiB of f32: holds the read channel for ~680 cycles, longer than a store takes to land


def _one_pe(kernel, args, mem, check):
    """A single-PE scenario at the default hardware."""
    return Scenario(
        kernel=kernel, args=args, grid=(1,), memory=mem, config=HardwareConfig(), check=check
    )


def _expect(memory, ptr, want):
    got = memory.get(ptr, want.shape, np.float32)
    np.testing.assert_allclose(got, want)


# --- load a tile, overwrite it before waiting the load ------------------------------------


def k_load_then_store(tl, buf, out):
    f = tl.load_async(buf, (ROWS, COLS), "f32")  # @war1.L
    h = tl.store(buf, tl.full((ROWS, COLS), 7.0, "f32"))  # @war1.S
    y = tl.wait(f)
    tl.wait(h)
    tl.wait(tl.store(out, y * 2.0))


def hazard_war_load_then_store():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.put(np.ones((ROWS, COLS), np.float32))
    out = mem.alloc(TILE)

    def check(m):
        _expect(m, out, np.full((ROWS, COLS), 2.0))  # the value before the overwrite
        _expect(m, buf, np.full((ROWS, COLS), 7.0))

    return _one_pe(k_load_then_store, (buf, out), mem, check)


# --- the same, the load queued behind a large read so the store lands before it reads -----


def k_queued_load(tl, big_ptr, buf, out):
    fb = tl.load_async(big_ptr, BIG, "f32")
    f = tl.load_async(buf, (ROWS, COLS), "f32")  # @war2.L
    h = tl.store(buf, tl.full((ROWS, COLS), 7.0, "f32"))  # @war2.S
    y = tl.wait(f)
    tl.wait(fb)
    tl.wait(h)
    tl.wait(tl.store(out, y * 2.0))


def hazard_war_queued_load():
    mem = Memory(size_bytes=1 << 17)
    big_ptr = mem.put(np.zeros(BIG, np.float32))
    buf = mem.put(np.ones((ROWS, COLS), np.float32))
    out = mem.alloc(TILE)
    return _one_pe(
        k_queued_load,
        (big_ptr, buf, out),
        mem,
        lambda m: _expect(m, out, np.full((ROWS, COLS), 2.0)),
    )


# --- partial overlap: the load reads rows 0..8, the store writes rows 6..14 ---------------


def k_partial(tl, buf, out):
    f = tl.load_async(buf, (ROWS, COLS), "f32")  # @war3.L
    h = tl.store(buf + 6 * ROW, tl.full((ROWS, COLS), 7.0, "f32"))  # @war3.S
    y = tl.wait(f)
    tl.wait(h)
    tl.wait(tl.store(out, y))


def hazard_war_partial_overlap():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.put(np.ones((2 * ROWS, COLS), np.float32))
    out = mem.alloc(TILE)
    return _one_pe(k_partial, (buf, out), mem, lambda m: _expect(m, out, np.ones((ROWS, COLS))))


# --- a spill tile in HBM, read back one iteration late: the next spill overwrites it first --


def k_spill(tl, x_ptr, tmp, out, n):
    f = None
    for j in range(n):
        p = tl.wait(tl.load_async(x_ptr + j * TILE, (ROWS, COLS), "f32")) * 2.0
        h = tl.store(tmp, p)  # @war4.S
        if f is not None:
            tl.wait(
                tl.store(out + (j - 1) * TILE, tl.wait(f))
            )  # last iteration's read-back, waited late
        tl.wait(h)
        f = tl.load_async(tmp, (ROWS, COLS), "f32")  # @war4.L
    tl.wait(tl.store(out + (n - 1) * TILE, tl.wait(f)))


def hazard_war_spill_loop(n=4):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n * ROWS, COLS)
    x_ptr = mem.put(xs)
    tmp, out = mem.alloc(TILE), mem.alloc(n * TILE)
    return _one_pe(k_spill, (x_ptr, tmp, out, n), mem, lambda m: _expect(m, out, xs * 2.0))


# --- the load and the store inside helper functions, behind a prefetch of the weights -----


def _prefetch(tl, ptr, shape):
    return tl.load_async(ptr, shape, "f32")  # @war5.L


def _flush(tl, ptr, x):
    return tl.store(ptr, x)  # @war5.S


def k_helpers(tl, w_ptr, buf, out):
    fw = _prefetch(tl, w_ptr, BIG)
    f = _prefetch(tl, buf, (ROWS, COLS))
    h = _flush(tl, buf, tl.full((ROWS, COLS), 7.0, "f32"))
    y = tl.wait(f)
    tl.wait(fw)
    tl.wait(h)
    tl.wait(_flush(tl, out, y))


def hazard_war_in_helpers():
    mem = Memory(size_bytes=1 << 17)
    w_ptr = mem.put(np.zeros(BIG, np.float32))
    buf = mem.put(np.ones((ROWS, COLS), np.float32))
    out = mem.alloc(TILE)
    return _one_pe(
        k_helpers, (w_ptr, buf, out), mem, lambda m: _expect(m, out, np.ones((ROWS, COLS)))
    )


# --- an in-place stencil y[r] = x[r] + x[r-1] whose prefetch reads a row the store rewrites --


def k_stencil(tl, s_ptr, a_ptr, n):
    # a holds a zero pad row and then n tiles; tile j reads rows 8j..8j+9 and rewrites 8j+1..8j+9
    s = tl.wait(tl.load_async(s_ptr, (ROWS, ROWS + 1), "f32"))  # S[i, i] = S[i, i+1] = 1
    f = tl.load_async(a_ptr, (ROWS + 1, COLS), "f32")
    handles = []
    for j in range(n):
        x = tl.wait(f)
        if j + 1 < n:
            f = tl.load_async(a_ptr + (j + 1) * TILE, (ROWS + 1, COLS), "f32")  # @war6.L
        handles.append(tl.store(a_ptr + j * TILE + ROW, tl.dot(s, x)))  # @war6.S
    for h in handles:
        tl.wait(h)


def hazard_war_stencil_loop(n=4):
    mem = Memory(size_bytes=1 << 16)
    s = np.zeros((ROWS, ROWS + 1), np.float32)
    s[np.arange(ROWS), np.arange(ROWS)] = 1.0
    s[np.arange(ROWS), np.arange(1, ROWS + 1)] = 1.0
    a = np.zeros((n * ROWS + 1, COLS), np.float32)
    a[1:] = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n * ROWS, COLS) % 7
    s_ptr, a_ptr = mem.put(s), mem.put(a)
    want = a.copy()
    want[1:] = a[1:] + a[:-1]
    return _one_pe(k_stencil, (s_ptr, a_ptr, n), mem, lambda m: _expect(m, a_ptr, want))
