"""A prefetch pipeline whose next-tile index is off by one (tile j + 2 issued where j + 1
was meant), with a reference per output block: from the second tile on, each output tile
is computed from the tile after its own."""

import numpy as np

from emulator import Memory
from emulator.reference import BlockReference
from emulator.scenarios import Scenario

ROWS, COLS = 16, 32
TILE_BYTES = ROWS * COLS * 4


def kernel(tl, k_ptr, o_ptr, n_tiles, ahead):
    f = tl.load_async(k_ptr, (ROWS, COLS), "f32")
    for j in range(n_tiles):
        with tl.scope():
            k = tl.wait(f)
            if j + 1 < n_tiles:
                f = tl.load_async(k_ptr + (j + ahead) * TILE_BYTES, (ROWS, COLS), "f32")
            tl.store(o_ptr + j * TILE_BYTES, k * 2.0)


def launch(n_tiles=4, ahead=2, per_block=True):
    """``ahead=1`` is the right pipeline; ``per_block=False`` gives only the check."""
    k = np.arange((n_tiles + 1) * ROWS * COLS, dtype=np.float32).reshape(-1, COLS)
    mem = Memory(size_bytes=1 << 20)
    k_ptr = mem.put(k, name="K")  # one tile more than the loop uses: the bad index reads it
    o_ptr = mem.alloc(n_tiles * TILE_BYTES)
    mem.name("O", o_ptr, (n_tiles * ROWS, COLS), "f32")
    want = k[: n_tiles * ROWS] * 2.0

    def check(memory: Memory) -> None:
        got = memory.get(o_ptr, want.shape, "f32")
        if not np.array_equal(got, want):
            raise AssertionError(f"O differs (max error {np.abs(got - want).max():g})")

    def reference(name, bounds):
        if name != "O":
            return None
        (r0, r1), _ = bounds
        return BlockReference(want[r0:r1], reads=(f"K[{r0}:{r1}, :]",))

    return Scenario(
        kernel=kernel,
        args=(k_ptr, o_ptr, n_tiles, ahead),
        grid=(1,),
        memory=mem,
        check=check,
        reference=reference if per_block else None,
    )
