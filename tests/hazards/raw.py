"""Read-after-write hazards on one PE: a load of bytes an earlier, unwaited store writes."""

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

ROWS, COLS = 8, 16  # one f32 tile: 512 bytes, 11 cycles on a DMA channel
ROW = COLS * 4
TILE = ROWS * ROW


def _one_pe(kernel, args, mem, check):
    """A single-PE scenario at the default hardware."""
    return Scenario(
        kernel=kernel, args=args, grid=(1,), memory=mem, config=HardwareConfig(), check=check
    )


def _busy(tl):
    """About 1,000 cycles of GEMM: longer than a store takes to land at the default latency."""
    a = tl.full((64, 64), 1.0, "f32")
    return tl.dot(a, a)


def _expect(memory, ptr, want):
    got = memory.get(ptr, want.shape, np.float32)
    np.testing.assert_allclose(got, want)


# --- a store, then a load of the same tile without waiting the store --------------------


def k_store_then_load(tl, buf, out):
    h = tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32"))  # @raw1.S
    y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))  # @raw1.L
    tl.wait(h)
    tl.wait(tl.store(out, y * 3.0))


def hazard_raw_store_then_load():
    mem = Memory(size_bytes=1 << 16)
    buf, out = mem.alloc(TILE), mem.alloc(TILE)
    return _one_pe(
        k_store_then_load, (buf, out), mem, lambda m: _expect(m, out, np.full((ROWS, COLS), 6.0))
    )


# --- the same, with enough compute in between that the store has landed by the load ----


def k_store_compute_load(tl, buf, out):
    h = tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32"))  # @raw2.S
    _busy(tl)
    y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))  # @raw2.L
    tl.wait(h)
    tl.wait(tl.store(out, y * 3.0))


def hazard_raw_hidden_by_compute():
    mem = Memory(size_bytes=1 << 16)
    buf, out = mem.alloc(TILE), mem.alloc(TILE)
    return _one_pe(
        k_store_compute_load, (buf, out), mem, lambda m: _expect(m, out, np.full((ROWS, COLS), 6.0))
    )


# --- partial overlap: the store writes rows 0..8, the load reads rows 4..12 --------------


def k_partial(tl, buf, out):
    h = tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32"))  # @raw3.S
    y = tl.wait(tl.load_async(buf + 4 * ROW, (ROWS, COLS), "f32"))  # @raw3.L
    tl.wait(h)
    tl.wait(tl.store(out, y))


def hazard_raw_partial_overlap():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.put(np.ones((2 * ROWS, COLS), np.float32))
    out = mem.alloc(TILE)
    want = np.ones((ROWS, COLS), np.float32)
    want[:4] = 2.0
    return _one_pe(k_partial, (buf, out), mem, lambda m: _expect(m, out, want))


# --- a running sum kept in HBM; the store's handle is waited one load too late ------------


def k_accumulate(tl, x_ptr, acc_ptr, n):
    h = None
    for j in range(n):
        f = tl.load_async(acc_ptr, (ROWS, COLS), "f32")  # @raw4.L
        if h is not None:
            tl.wait(h)  # the last iteration's store, waited after the load above was issued
        x = tl.wait(tl.load_async(x_ptr + j * TILE, (ROWS, COLS), "f32"))
        h = tl.store(acc_ptr, tl.wait(f) + x)  # @raw4.S
    tl.wait(h)


def hazard_raw_accumulate_loop(n=4):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n * ROWS, COLS)
    x_ptr = mem.put(xs)
    acc_ptr = mem.alloc(TILE)
    want = xs.reshape(n, ROWS, COLS).sum(axis=0)
    return _one_pe(k_accumulate, (x_ptr, acc_ptr, n), mem, lambda m: _expect(m, acc_ptr, want))


# --- the store and the load inside helper functions --------------------------------------


def _publish(tl, ptr, x):
    return tl.store(ptr, x)  # @raw5.S


def _fetch(tl, ptr):
    return tl.load_async(ptr, (ROWS, COLS), "f32")  # @raw5.L


def k_helpers(tl, buf, out):
    h = _publish(tl, buf, tl.full((ROWS, COLS), 5.0, "f32"))
    y = tl.wait(_fetch(tl, buf))
    tl.wait(h)
    tl.wait(tl.store(out, y + 1.0))


def hazard_raw_in_helpers():
    mem = Memory(size_bytes=1 << 16)
    buf, out = mem.alloc(TILE), mem.alloc(TILE)
    return _one_pe(
        k_helpers, (buf, out), mem, lambda m: _expect(m, out, np.full((ROWS, COLS), 6.0))
    )


# --- two stores, the wrong one waited before reading the first back ----------------------


def k_wrong_future(tl, a_ptr, b_ptr, out):
    ha = tl.store(a_ptr, tl.full((ROWS, COLS), 2.0, "f32"))  # @raw6.S
    hb = tl.store(b_ptr, tl.full((ROWS, COLS), 4.0, "f32"))
    tl.wait(
        hb
    )  # meant ha: a's store is not waited (it lands first here: one write channel, in order)
    y = tl.wait(tl.load_async(a_ptr, (ROWS, COLS), "f32"))  # @raw6.L
    tl.wait(ha)
    tl.wait(tl.store(out, y * 3.0))


def hazard_raw_waits_wrong_future():
    mem = Memory(size_bytes=1 << 16)
    a_ptr, b_ptr, out = mem.alloc(TILE), mem.alloc(TILE), mem.alloc(TILE)
    return _one_pe(
        k_wrong_future,
        (a_ptr, b_ptr, out),
        mem,
        lambda m: _expect(m, out, np.full((ROWS, COLS), 6.0)),
    )


# --- a blocking tl.load of a tile still being stored ---------------------------------------


def k_blocking_load(tl, buf, out):
    h = tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32"))  # @raw7.S
    y = tl.load(buf, (ROWS, COLS), "f32")  # @raw7.L  blocking, but issued before the store landed
    tl.wait(h)
    tl.wait(tl.store(out, y * 3.0))


def hazard_raw_blocking_load():
    mem = Memory(size_bytes=1 << 16)
    buf, out = mem.alloc(TILE), mem.alloc(TILE)
    return _one_pe(
        k_blocking_load, (buf, out), mem, lambda m: _expect(m, out, np.full((ROWS, COLS), 6.0))
    )


# --- a prefix sum over tiles that reads the previous output tile back from HBM ------------


def k_lookback(tl, x_ptr, out, n):
    handles = []
    for j in range(n):
        x = tl.wait(tl.load_async(x_ptr + j * TILE, (ROWS, COLS), "f32"))
        if j > 0:
            prev = tl.wait(tl.load_async(out + (j - 1) * TILE, (ROWS, COLS), "f32"))  # @raw8.L
            x = x + prev
        handles.append(tl.store(out + j * TILE, x))  # @raw8.S
    for h in handles:
        tl.wait(h)


def hazard_raw_lookback_loop(n=4):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n, ROWS, COLS)
    x_ptr = mem.put(xs.reshape(n * ROWS, COLS))
    out = mem.alloc(n * TILE)
    want = np.cumsum(xs, axis=0).reshape(n * ROWS, COLS)
    return _one_pe(k_lookback, (x_ptr, out, n), mem, lambda m: _expect(m, out, want))
