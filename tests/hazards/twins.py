"""Race-free twins of the one-PE hazards in raw.py, war.py and waw.py: fenced, or disjoint."""

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

ROWS, COLS = 8, 16  # one f32 tile: 512 bytes, 11 cycles on a DMA channel
ROW = COLS * 4
TILE = ROWS * ROW
BIG = (64, 128)  # 32 KiB of f32: holds the read channel for ~680 cycles
BIG_ROWS = 64  # a 4 KiB store: ~85 cycles on its write channel


def _one_pe(kernel, args, mem, check, **hw):
    """A single-PE scenario; `hw` overrides hardware fields."""
    return Scenario(
        kernel=kernel, args=args, grid=(1,), memory=mem, config=HardwareConfig(**hw), check=check
    )


def _busy(tl):
    """About 1,000 cycles of GEMM: longer than a store takes to land at the default latency."""
    a = tl.full((64, 64), 1.0, "f32")
    return tl.dot(a, a)


def _expect(memory, ptr, want):
    got = memory.get(ptr, want.shape, np.float32)
    np.testing.assert_allclose(got, want)


def _tile_and_out(mem, value):
    buf, out = mem.alloc(TILE), mem.alloc(TILE)
    return buf, out, (lambda m: _expect(m, out, np.full((ROWS, COLS), value)))


# ================================ read after write ==========================================


def k_store_wait_load(tl, buf, out):
    tl.wait(tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32")))
    y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))
    tl.wait(tl.store(out, y * 3.0))


def clean_raw_store_wait_load():
    mem = Memory(size_bytes=1 << 16)
    buf, out, check = _tile_and_out(mem, 6.0)
    return _one_pe(k_store_wait_load, (buf, out), mem, check)


def k_compute_then_wait(tl, buf, out):
    h = tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32"))
    _busy(tl)
    tl.wait(h)  # waited late, after the compute, but before the load
    y = tl.wait(tl.load_async(buf, (ROWS, COLS), "f32"))
    tl.wait(tl.store(out, y * 3.0))


def clean_raw_compute_then_wait():
    mem = Memory(size_bytes=1 << 16)
    buf, out, check = _tile_and_out(mem, 6.0)
    return _one_pe(k_compute_then_wait, (buf, out), mem, check)


def k_adjacent_read(tl, buf, out):
    h = tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32"))  # rows 0..8
    y = tl.wait(
        tl.load_async(buf + ROWS * ROW, (ROWS, COLS), "f32")
    )  # rows 8..16: starts where the store ends
    tl.wait(h)
    tl.wait(tl.store(out, y))


def clean_raw_adjacent():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.put(np.ones((2 * ROWS, COLS), np.float32))
    out = mem.alloc(TILE)
    return _one_pe(
        k_adjacent_read, (buf, out), mem, lambda m: _expect(m, out, np.ones((ROWS, COLS)))
    )


def k_accumulate(tl, x_ptr, acc_ptr, n):
    h = None
    for j in range(n):
        if h is not None:
            tl.wait(h)  # the last iteration's store, before the load that reads it
        f = tl.load_async(acc_ptr, (ROWS, COLS), "f32")
        x = tl.wait(tl.load_async(x_ptr + j * TILE, (ROWS, COLS), "f32"))
        h = tl.store(acc_ptr, tl.wait(f) + x)
    tl.wait(h)


def clean_raw_accumulate_loop(n=4):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n * ROWS, COLS)
    x_ptr, acc_ptr = mem.put(xs), mem.alloc(TILE)
    want = xs.reshape(n, ROWS, COLS).sum(axis=0)
    return _one_pe(k_accumulate, (x_ptr, acc_ptr, n), mem, lambda m: _expect(m, acc_ptr, want))


def _publish(tl, ptr, x):
    tl.wait(tl.store(ptr, x))


def _fetch(tl, ptr):
    return tl.load_async(ptr, (ROWS, COLS), "f32")


def k_helpers(tl, buf, out):
    _publish(tl, buf, tl.full((ROWS, COLS), 5.0, "f32"))
    y = tl.wait(_fetch(tl, buf))
    _publish(tl, out, y + 1.0)


def clean_raw_in_helpers():
    mem = Memory(size_bytes=1 << 16)
    buf, out, check = _tile_and_out(mem, 6.0)
    return _one_pe(k_helpers, (buf, out), mem, check)


def k_right_future(tl, a_ptr, b_ptr, out):
    ha = tl.store(a_ptr, tl.full((ROWS, COLS), 2.0, "f32"))
    hb = tl.store(b_ptr, tl.full((ROWS, COLS), 4.0, "f32"))
    tl.wait(ha)
    y = tl.wait(tl.load_async(a_ptr, (ROWS, COLS), "f32"))
    tl.wait(hb)  # b is never read back: waiting it last is fine
    tl.wait(tl.store(out, y * 3.0))


def clean_raw_waits_right_future():
    mem = Memory(size_bytes=1 << 16)
    a_ptr, b_ptr = mem.alloc(TILE), mem.alloc(TILE)
    out = mem.alloc(TILE)
    return _one_pe(
        k_right_future,
        (a_ptr, b_ptr, out),
        mem,
        lambda m: _expect(m, out, np.full((ROWS, COLS), 6.0)),
    )


def k_blocking_load(tl, buf, out):
    tl.wait(tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32")))
    y = tl.load(buf, (ROWS, COLS), "f32")
    tl.wait(tl.store(out, y * 3.0))


def clean_raw_blocking_load():
    mem = Memory(size_bytes=1 << 16)
    buf, out, check = _tile_and_out(mem, 6.0)
    return _one_pe(k_blocking_load, (buf, out), mem, check)


def k_lookback(tl, x_ptr, out, n):
    handles = []
    for j in range(n):
        x = tl.wait(tl.load_async(x_ptr + j * TILE, (ROWS, COLS), "f32"))
        if j > 0:
            tl.wait(handles[j - 1])
            x = x + tl.wait(tl.load_async(out + (j - 1) * TILE, (ROWS, COLS), "f32"))
        handles.append(tl.store(out + j * TILE, x))
    tl.wait(handles[-1])


def clean_raw_lookback_loop(n=4):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n, ROWS, COLS)
    x_ptr, out = mem.put(xs.reshape(n * ROWS, COLS)), mem.alloc(n * TILE)
    want = np.cumsum(xs, axis=0).reshape(n * ROWS, COLS)
    return _one_pe(k_lookback, (x_ptr, out, n), mem, lambda m: _expect(m, out, want))


def k_late_waits(tl, buf, out, n):
    handles = [tl.store(buf + j * TILE, tl.full((ROWS, COLS), float(j), "f32")) for j in range(n)]
    _busy(tl)
    for h in handles:  # all waited late, after the compute, before any read-back
        tl.wait(h)
    total = tl.zeros((ROWS, COLS), "f32")
    for j in range(n):
        total = total + tl.wait(tl.load_async(buf + j * TILE, (ROWS, COLS), "f32"))
    tl.wait(tl.store(out, total))


def clean_stores_waited_late(n=4):
    mem = Memory(size_bytes=1 << 16)
    buf, out = mem.alloc(n * TILE), mem.alloc(TILE)
    want = np.full((ROWS, COLS), float(sum(range(n))))
    return _one_pe(k_late_waits, (buf, out, n), mem, lambda m: _expect(m, out, want))


# ================================ write after read ==========================================


def k_wait_then_store(tl, buf, out):
    f = tl.load_async(buf, (ROWS, COLS), "f32")
    y = tl.wait(f)
    h = tl.store(buf, tl.full((ROWS, COLS), 7.0, "f32"))
    tl.wait(tl.store(out, y * 2.0))
    tl.wait(h)


def clean_war_wait_then_store():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.put(np.ones((ROWS, COLS), np.float32))
    out = mem.alloc(TILE)

    def check(m):
        _expect(m, out, np.full((ROWS, COLS), 2.0))
        _expect(m, buf, np.full((ROWS, COLS), 7.0))

    return _one_pe(k_wait_then_store, (buf, out), mem, check)


def k_queued_load_waited(tl, big_ptr, buf, out):
    fb = tl.load_async(big_ptr, BIG, "f32")
    f = tl.load_async(buf, (ROWS, COLS), "f32")
    y = tl.wait(f)  # queued behind the large read, and waited before buf is overwritten
    h = tl.store(buf, tl.full((ROWS, COLS), 7.0, "f32"))
    tl.wait(fb)
    tl.wait(h)
    tl.wait(tl.store(out, y * 2.0))


def clean_war_queued_load_waited():
    mem = Memory(size_bytes=1 << 17)
    big_ptr = mem.put(np.zeros(BIG, np.float32))
    buf = mem.put(np.ones((ROWS, COLS), np.float32))
    out = mem.alloc(TILE)
    return _one_pe(
        k_queued_load_waited,
        (big_ptr, buf, out),
        mem,
        lambda m: _expect(m, out, np.full((ROWS, COLS), 2.0)),
    )


def k_adjacent_write(tl, buf, out):
    f = tl.load_async(buf, (ROWS, COLS), "f32")  # rows 0..8
    h = tl.store(buf + ROWS * ROW, tl.full((ROWS, COLS), 7.0, "f32"))  # rows 8..16
    y = tl.wait(f)
    tl.wait(h)
    tl.wait(tl.store(out, y))


def clean_war_adjacent():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.put(np.ones((2 * ROWS, COLS), np.float32))
    out = mem.alloc(TILE)
    return _one_pe(
        k_adjacent_write, (buf, out), mem, lambda m: _expect(m, out, np.ones((ROWS, COLS)))
    )


def k_spill(tl, x_ptr, tmp, out, n):
    f = None
    for j in range(n):
        p = tl.wait(tl.load_async(x_ptr + j * TILE, (ROWS, COLS), "f32")) * 2.0
        if f is not None:
            tl.wait(
                tl.store(out + (j - 1) * TILE, tl.wait(f))
            )  # the read-back waited before the next spill
        tl.wait(tl.store(tmp, p))
        f = tl.load_async(tmp, (ROWS, COLS), "f32")
    tl.wait(tl.store(out + (n - 1) * TILE, tl.wait(f)))


def clean_war_spill_loop(n=4):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n * ROWS, COLS)
    x_ptr = mem.put(xs)
    tmp, out = mem.alloc(TILE), mem.alloc(n * TILE)
    return _one_pe(k_spill, (x_ptr, tmp, out, n), mem, lambda m: _expect(m, out, xs * 2.0))


def _prefetch(tl, ptr, shape):
    return tl.load_async(ptr, shape, "f32")


def _flush(tl, ptr, x):
    return tl.store(ptr, x)


def k_war_helpers(tl, w_ptr, buf, out):
    fw = _prefetch(tl, w_ptr, BIG)
    f = _prefetch(tl, buf, (ROWS, COLS))
    y = tl.wait(f)
    h = _flush(tl, buf, tl.full((ROWS, COLS), 7.0, "f32"))
    tl.wait(fw)
    tl.wait(h)
    tl.wait(_flush(tl, out, y))


def clean_war_in_helpers():
    mem = Memory(size_bytes=1 << 17)
    w_ptr = mem.put(np.zeros(BIG, np.float32))
    buf = mem.put(np.ones((ROWS, COLS), np.float32))
    out = mem.alloc(TILE)
    return _one_pe(
        k_war_helpers, (w_ptr, buf, out), mem, lambda m: _expect(m, out, np.ones((ROWS, COLS)))
    )


def k_stencil(tl, s_ptr, a_ptr, n):
    s = tl.wait(tl.load_async(s_ptr, (ROWS, ROWS + 1), "f32"))
    x = tl.wait(tl.load_async(a_ptr, (ROWS + 1, COLS), "f32"))
    handles = []
    for j in range(n):
        if j + 1 < n:
            f = tl.load_async(a_ptr + (j + 1) * TILE, (ROWS + 1, COLS), "f32")
            nxt = tl.wait(
                f
            )  # the prefetch reads row 8j+8 and is waited before the store rewrites it
        handles.append(tl.store(a_ptr + j * TILE + ROW, tl.dot(s, x)))
        if j + 1 < n:
            x = nxt
    for h in handles:
        tl.wait(h)


def clean_war_stencil_loop(n=4):
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


def k_in_place_prefetch(tl, a_ptr, n):
    f = tl.load_async(a_ptr, (ROWS, COLS), "f32")
    handles = []
    for j in range(n):
        x = tl.wait(f)
        if j + 1 < n:
            f = tl.load_async(
                a_ptr + (j + 1) * TILE, (ROWS, COLS), "f32"
            )  # the next tile: adjacent, disjoint
        handles.append(tl.store(a_ptr + j * TILE, x * 2.0))
    for h in handles:
        tl.wait(h)


def clean_in_place_prefetch_loop(n=4):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n * ROWS, COLS)
    a_ptr = mem.put(xs)
    return _one_pe(k_in_place_prefetch, (a_ptr, n), mem, lambda m: _expect(m, a_ptr, xs * 2.0))


def k_overlapping_loads(tl, x_ptr, out):
    f1 = tl.load_async(x_ptr, (ROWS, COLS), "f32")
    f2 = tl.load_async(x_ptr + 4 * ROW, (ROWS, COLS), "f32")  # overlaps f1: two reads are no hazard
    tl.wait(tl.store(out, tl.wait(f1) + tl.wait(f2)))


def clean_overlapping_loads():
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(2 * ROWS * COLS, dtype=np.float32).reshape(2 * ROWS, COLS)
    x_ptr, out = mem.put(xs), mem.alloc(TILE)
    return _one_pe(
        k_overlapping_loads,
        (x_ptr, out),
        mem,
        lambda m: _expect(m, out, xs[:ROWS] + xs[4 : 4 + ROWS]),
    )


# ================================ write after write =========================================


def k_same_tile_waited(tl, buf):
    tl.wait(tl.store(buf, tl.full((ROWS, COLS), 1.0, "f32")))
    tl.wait(tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32")))


def clean_waw_same_tile_waited():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.alloc(TILE)
    return _one_pe(
        k_same_tile_waited, (buf,), mem, lambda m: _expect(m, buf, np.full((ROWS, COLS), 2.0))
    )


def k_two_channels_adjacent(tl, buf):
    h1 = tl.store(buf, tl.full((BIG_ROWS, COLS), 1.0, "f32"))  # rows 0..64
    h2 = tl.store(buf + BIG_ROWS * ROW, tl.full((ROWS, COLS), 2.0, "f32"))  # rows 64..72
    tl.wait(h1)
    tl.wait(h2)


def clean_waw_two_channels_adjacent():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.alloc((BIG_ROWS + ROWS) * ROW)
    want = np.ones((BIG_ROWS + ROWS, COLS), np.float32)
    want[BIG_ROWS:] = 2.0
    return _one_pe(
        k_two_channels_adjacent, (buf,), mem, lambda m: _expect(m, buf, want), dma_write_channels=2
    )


def k_adjacent_stores(tl, buf):
    h1 = tl.store(buf, tl.full((ROWS, COLS), 1.0, "f32"))
    h2 = tl.store(buf + ROWS * ROW, tl.full((ROWS, COLS), 2.0, "f32"))
    tl.wait(h2)
    tl.wait(h1)


def clean_waw_adjacent():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.alloc(2 * TILE)
    want = np.concatenate([np.ones((ROWS, COLS)), np.full((ROWS, COLS), 2.0)])
    return _one_pe(k_adjacent_stores, (buf,), mem, lambda m: _expect(m, buf, want))


def k_last_wins_waited(tl, x_ptr, out, n):
    h = None
    for j in range(n):
        x = tl.wait(tl.load_async(x_ptr + j * TILE, (ROWS, COLS), "f32"))
        if h is not None:
            tl.wait(h)  # the previous store landed before this one is issued
        h = tl.store(out, x)
    tl.wait(h)


def clean_waw_last_wins_loop(n=4):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n, ROWS, COLS)
    x_ptr, out = mem.put(xs.reshape(n * ROWS, COLS)), mem.alloc(TILE)
    return _one_pe(k_last_wins_waited, (x_ptr, out, n), mem, lambda m: _expect(m, out, xs[-1]))


def _write_and_wait(tl, ptr, x):
    tl.wait(tl.store(ptr, x))


def k_waw_helper(tl, buf):
    _write_and_wait(tl, buf, tl.full((BIG_ROWS, COLS), 1.0, "f32"))
    _write_and_wait(tl, buf + 2 * ROW, tl.full((ROWS, COLS), 2.0, "f32"))


def clean_waw_in_helper():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.alloc(BIG_ROWS * ROW)
    want = np.ones((BIG_ROWS, COLS), np.float32)
    want[2 : 2 + ROWS] = 2.0
    return _one_pe(k_waw_helper, (buf,), mem, lambda m: _expect(m, buf, want), dma_write_channels=2)


def k_exact_tiles(tl, x_ptr, out, n):
    handles = []
    for j in range(n):
        x = tl.wait(tl.load_async(x_ptr + j * TILE, (ROWS, COLS), "f32"))
        handles.append(
            tl.store(out + j * TILE, x)
        )  # stride = tile: adjacent, all in flight at once
    for h in handles:
        tl.wait(h)


def clean_waw_exact_tiles_loop(n=4):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n * ROWS, COLS)
    x_ptr, out = mem.put(xs), mem.alloc(n * TILE)
    return _one_pe(k_exact_tiles, (x_ptr, out, n), mem, lambda m: _expect(m, out, xs))
