"""Write-after-write hazards on one PE: two stores in flight to overlapping bytes."""

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

ROWS, COLS = 8, 16  # one f32 tile: 512 bytes, 11 cycles on a DMA channel
ROW = COLS * 4
TILE = ROWS * ROW
BIG_ROWS = 64  # a 4 KiB store: ~85 cycles on its write channel


def _one_pe(kernel, args, mem, check, **hw):
    """A single-PE scenario; `hw` overrides hardware fields."""
    return Scenario(
        kernel=kernel, args=args, grid=(1,), memory=mem, config=HardwareConfig(**hw), check=check
    )


def _expect(memory, ptr, want):
    got = memory.get(ptr, want.shape, np.float32)
    np.testing.assert_allclose(got, want)


# --- two stores to one tile, both in flight (one write channel: they land in order) ------


def k_same_tile(tl, buf):
    h1 = tl.store(buf, tl.full((ROWS, COLS), 1.0, "f32"))  # @waw1.S1
    h2 = tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32"))  # @waw1.S2
    tl.wait(h1)
    tl.wait(h2)


def hazard_waw_same_tile():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.alloc(TILE)
    return _one_pe(k_same_tile, (buf,), mem, lambda m: _expect(m, buf, np.full((ROWS, COLS), 2.0)))


# --- two write channels: a large store then a small one over its head; the large lands last --


def k_two_channels(tl, buf):
    h1 = tl.store(buf, tl.full((BIG_ROWS, COLS), 1.0, "f32"))  # @waw2.S1
    h2 = tl.store(buf, tl.full((ROWS, COLS), 2.0, "f32"))  # @waw2.S2
    tl.wait(h1)
    tl.wait(h2)


def hazard_waw_two_channels():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.alloc(BIG_ROWS * ROW)
    want = np.ones((BIG_ROWS, COLS), np.float32)
    want[:ROWS] = 2.0
    return _one_pe(
        k_two_channels, (buf,), mem, lambda m: _expect(m, buf, want), dma_write_channels=2
    )


# --- partial overlap: rows 0..8 and rows 4..12 --------------------------------------------


def k_partial(tl, buf):
    h1 = tl.store(buf, tl.full((ROWS, COLS), 1.0, "f32"))  # @waw3.S1
    h2 = tl.store(buf + 4 * ROW, tl.full((ROWS, COLS), 2.0, "f32"))  # @waw3.S2
    tl.wait(h2)
    tl.wait(h1)


def hazard_waw_partial_overlap():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.alloc(2 * ROWS * ROW)
    want = np.zeros((2 * ROWS, COLS), np.float32)
    want[:4] = 1.0
    want[4:12] = 2.0
    return _one_pe(k_partial, (buf,), mem, lambda m: _expect(m, buf, want))


# --- "the last one wins": each iteration stores to one tile, only the last store waited -----


def k_last_wins(tl, x_ptr, out, n):
    h = None
    for j in range(n):
        x = tl.wait(tl.load_async(x_ptr + j * TILE, (ROWS, COLS), "f32"))
        h = tl.store(out, x)  # @waw4.S  overwrites h: the previous store is never waited
    tl.wait(h)


def hazard_waw_last_wins_loop(n=4):
    mem = Memory(size_bytes=1 << 16)
    xs = np.arange(n * ROWS * COLS, dtype=np.float32).reshape(n, ROWS, COLS)
    x_ptr = mem.put(xs.reshape(n * ROWS, COLS))
    out = mem.alloc(TILE)
    return _one_pe(k_last_wins, (x_ptr, out, n), mem, lambda m: _expect(m, out, xs[-1]))


# --- both stores through one helper, two write channels: the second (smaller) lands first --


def _write(tl, ptr, x):
    return tl.store(ptr, x)  # @waw5.S


def k_helper(tl, buf):
    handles = [
        _write(tl, buf, tl.full((BIG_ROWS, COLS), 1.0, "f32")),
        _write(tl, buf + 2 * ROW, tl.full((ROWS, COLS), 2.0, "f32")),
    ]
    for h in handles:
        tl.wait(h)


def hazard_waw_in_helper():
    mem = Memory(size_bytes=1 << 16)
    buf = mem.alloc(BIG_ROWS * ROW)
    want = np.ones((BIG_ROWS, COLS), np.float32)
    want[2 : 2 + ROWS] = 2.0
    return _one_pe(k_helper, (buf,), mem, lambda m: _expect(m, buf, want), dma_write_channels=2)


# --- a copy by 8-row tiles at a 7-row stride: each tile rewrites the next one's first row ---


def k_overlapping_tiles(tl, x_ptr, out, n):
    handles = []
    for j in range(n):
        x = tl.wait(tl.load_async(x_ptr + j * (ROWS - 1) * ROW, (ROWS, COLS), "f32"))
        # the row shared with the next tile gets the same values from both stores
        handles.append(tl.store(out + j * (ROWS - 1) * ROW, x))  # @waw6.S
    for h in handles:
        tl.wait(h)


def hazard_waw_overlapping_tiles_loop(n=4):
    mem = Memory(size_bytes=1 << 16)
    rows = n * (ROWS - 1) + 1
    xs = np.arange(rows * COLS, dtype=np.float32).reshape(rows, COLS)
    x_ptr, out = mem.put(xs), mem.alloc(rows * ROW)
    return _one_pe(k_overlapping_tiles, (x_ptr, out, n), mem, lambda m: _expect(m, out, xs))
