"""A store read back before it is waited (a race that passes at the default latencies), its twin.

Each tile is doubled and stored to a staging buffer, two unrelated loads are put
in flight, and the staged tile is loaded back and incremented into the output.
The racy kernel never waits its store: at the nominal timing the two loads ahead
of the read-back keep the read channel busy until just after the store lands, so
its check passes; a longer store latency, or the read-back granted before a
load issued ahead of it, reads the staging buffer's old zeros. The fenced twin
waits the store before the read-back.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

ROWS, COLS = 8, 16  # a 512-byte f32 tile
PAD_ROWS = 200  # each unrelated load holds the read channel 267 cycles
TILE_BYTES = ROWS * COLS * 4
PAD_BYTES = PAD_ROWS * COLS * 4


def kernel_race(tl, x_ptr, pad_ptr, stage_ptr, out_ptr, n_tiles):
    for i in range(n_tiles):
        x = tl.load(x_ptr + i * TILE_BYTES, (ROWS, COLS), "f32")
        tl.store(stage_ptr + i * TILE_BYTES, x * 2)
        pads = [tl.load_async(pad_ptr + j * PAD_BYTES, (PAD_ROWS, COLS), "f32") for j in (0, 1)]
        staged = tl.wait(tl.load_async(stage_ptr + i * TILE_BYTES, (ROWS, COLS), "f32"))
        tl.wait(tl.store(out_ptr + i * TILE_BYTES, staged + 1))
        for pad in pads:
            tl.free(tl.wait(pad))
        tl.free(x)
        tl.free(staged)


def kernel_fenced(tl, x_ptr, pad_ptr, stage_ptr, out_ptr, n_tiles):
    for i in range(n_tiles):
        x = tl.load(x_ptr + i * TILE_BYTES, (ROWS, COLS), "f32")
        stored = tl.store(stage_ptr + i * TILE_BYTES, x * 2)
        pads = [tl.load_async(pad_ptr + j * PAD_BYTES, (PAD_ROWS, COLS), "f32") for j in (0, 1)]
        tl.wait(stored)
        staged = tl.wait(tl.load_async(stage_ptr + i * TILE_BYTES, (ROWS, COLS), "f32"))
        tl.wait(tl.store(out_ptr + i * TILE_BYTES, staged + 1))
        for pad in pads:
            tl.free(tl.wait(pad))
        tl.free(x)
        tl.free(staged)


def _launch(kernel, n_tiles: int) -> Scenario:
    x = np.arange(n_tiles * ROWS * COLS, dtype=np.float32).reshape(n_tiles, ROWS, COLS)
    pad = np.ones((2, PAD_ROWS, COLS), dtype=np.float32)
    mem = Memory(size_bytes=2 * x.nbytes + pad.nbytes + x.nbytes + 4096)
    x_ptr, pad_ptr = mem.put(x), mem.put(pad)
    stage_ptr, out_ptr = mem.alloc(x.nbytes), mem.alloc(x.nbytes)

    def check(memory: Memory) -> None:
        got = memory.get(out_ptr, x.shape, "f32")
        wrong = [i for i in range(n_tiles) if not np.array_equal(got[i], x[i] * 2 + 1)]
        assert not wrong, f"tiles {wrong} of the output differ from x * 2 + 1"

    args = (x_ptr, pad_ptr, stage_ptr, out_ptr, n_tiles)
    return Scenario(kernel, args, (1,), mem, check=check)


def launch_race(n_tiles: int = 2) -> Scenario:
    """The racy kernel on ``n_tiles`` tiles."""
    return _launch(kernel_race, n_tiles)


def launch_fenced(n_tiles: int = 2) -> Scenario:
    """The fenced twin on ``n_tiles`` tiles."""
    return _launch(kernel_fenced, n_tiles)


def launch_fenced_on_two_write_channels(n_tiles: int = 2) -> Scenario:
    """The fenced twin on hardware of its own choosing (two DMA write channels)."""
    scenario = _launch(kernel_fenced, n_tiles)
    scenario.config = HardwareConfig(dma_write_channels=2)
    return scenario


def kernel_flag_race(tl, ones_ptr, pad_ptr, flag_ptr):
    """PE 0 raises a flag in HBM and reads it back unwaited; reading the old zeros, it waits
    for a message PE 1 never sends."""
    if tl.program_id(0) == 1:
        return
    tl.store(flag_ptr, tl.load(ones_ptr, (ROWS, COLS), "f32"))
    pads = [tl.load_async(pad_ptr + j * PAD_BYTES, (PAD_ROWS, COLS), "f32") for j in (0, 1)]
    flag = tl.wait(tl.load_async(flag_ptr, (ROWS, COLS), "f32"))
    if np.asarray(flag)[0, 0] != 1:
        tl.wait(tl.recv_async("right", (ROWS, COLS), "f32"))
    for pad in pads:
        tl.free(tl.wait(pad))


def launch_flag_race() -> Scenario:
    """The flag race on a row of two PEs: a deadlock when the flag reads old."""
    ones = np.ones((ROWS, COLS), dtype=np.float32)
    pad = np.ones((2, PAD_ROWS, COLS), dtype=np.float32)
    mem = Memory(size_bytes=2 * ones.nbytes + pad.nbytes + 4096)
    ones_ptr, pad_ptr, flag_ptr = mem.put(ones), mem.put(pad), mem.alloc(ones.nbytes)
    config = HardwareConfig(mesh_rows=1, mesh_cols=2)
    return Scenario(kernel_flag_race, (ones_ptr, pad_ptr, flag_ptr), (2,), mem, config)


def kernel_war(tl, x_ptr, buf_ptr, out_ptr):
    """Loads a tile, then overwrites it before the load is waited (write-after-read)."""
    new = tl.load(x_ptr, (ROWS, COLS), "f32")
    old = tl.load_async(buf_ptr, (ROWS, COLS), "f32")
    tl.store(buf_ptr, new)
    tl.wait(tl.store(out_ptr, tl.wait(old)))


def launch_war() -> Scenario:
    """The write-after-read on one PE: the output is the old tile unless the store lands
    before the load reads."""
    new, old = np.full((ROWS, COLS), 2, np.float32), np.ones((ROWS, COLS), np.float32)
    mem = Memory(size_bytes=3 * new.nbytes + 4096)
    x_ptr, buf_ptr, out_ptr = mem.put(new), mem.put(old), mem.alloc(new.nbytes)
    return Scenario(kernel_war, (x_ptr, buf_ptr, out_ptr), (1,), mem)
