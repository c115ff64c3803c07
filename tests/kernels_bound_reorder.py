"""Two-PE hand-off kernels whose consumer waits for the go-ahead before work that does
not need it: the bound of the early order must not exceed what the reordered one ends at.

PE 0 loads a tile, does a dot, stores it doubled to a scratch area, waits the store and sends a
token right. PE 1 loads a tile of its own, waits the token (``token_waited_early``),
issues the scratch load the token gates and then does dots that need neither;
``token_waited_late`` is the same program reordered: the token's wait and the scratch
load moved below the dots (the load blocking there, as a KB101 fix leaves it).
``token_then_own_load`` issues PE 1's own load after the gated one: that load, which
no message gates, may still move above the token's wait. Lines a test looks for carry
a ``# mark: NAME`` comment.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np

from emulator import HardwareConfig, Memory, run_kernel

ROWS, COLS = 64, 64
TILE_BYTES = ROWS * COLS * 4


def _produce(tl, x_ptr, scratch_ptr):
    """PE 0: a dot, the scratch tile stored and landed, then the token that says so."""
    x = tl.load(x_ptr, (ROWS, COLS), "f32")
    x = x + tl.dot(x, tl.zeros((COLS, COLS), "f32"))
    tl.wait(tl.store(scratch_ptr, x * 2.0))
    tl.wait(tl.send("right", tl.zeros((1, 16), "f32")))


def token_waited_early(tl, x_ptr, own_ptr, scratch_ptr, y_ptr, rounds):
    """PE 1 waits the token, then issues the scratch load above dots that need neither."""
    if tl.program_id(0) == 0:
        _produce(tl, x_ptr, scratch_ptr)
        return
    own = tl.load(own_ptr, (ROWS, ROWS), "f32")
    tl.wait(tl.recv_async("left", (1, 16), "f32"))  # mark: early-wait
    ahead = tl.load_async(scratch_ptr, (ROWS, COLS), "f32")
    for _ in range(rounds):
        own = own + tl.dot(own, own)
    part = tl.wait(ahead)
    tl.wait(tl.store(y_ptr, part + own))


def token_then_own_load(tl, x_ptr, own_ptr, scratch_ptr, y_ptr, rounds):
    """PE 1 waits the token and issues the scratch load above its own blocking load."""
    if tl.program_id(0) == 0:
        _produce(tl, x_ptr, scratch_ptr)
        return
    tl.wait(tl.recv_async("left", (1, 16), "f32"))  # mark: early-wait
    ahead = tl.load_async(scratch_ptr, (ROWS, COLS), "f32")
    own = tl.load(own_ptr, (ROWS, ROWS), "f32")
    for _ in range(rounds):
        own = own + tl.dot(own, own)
    part = tl.wait(ahead)
    tl.wait(tl.store(y_ptr, part + own))


def token_waited_late(tl, x_ptr, own_ptr, scratch_ptr, y_ptr, rounds):
    """The same program with the token's wait and the scratch load below the dots."""
    if tl.program_id(0) == 0:
        _produce(tl, x_ptr, scratch_ptr)
        return
    own = tl.load(own_ptr, (ROWS, ROWS), "f32")
    token = tl.recv_async("left", (1, 16), "f32")
    for _ in range(rounds):
        own = own + tl.dot(own, own)
    tl.wait(token)
    part = tl.load(scratch_ptr, (ROWS, COLS), "f32")
    tl.wait(tl.store(y_ptr, part + own))


def run(kernel, path: Path, rounds: int = 2) -> Path:
    """Record ``kernel`` on a 1 x 2 mesh with ``rounds`` dots on PE 1; checks its output."""
    memory = Memory(size_bytes=1 << 22)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    own = (rng.standard_normal((ROWS, ROWS)) * 0.01).astype(np.float32)
    x_ptr, own_ptr = memory.put(x), memory.put(own)
    scratch_ptr, y_ptr = memory.alloc(TILE_BYTES), memory.alloc(TILE_BYTES)
    args = (x_ptr, own_ptr, scratch_ptr, y_ptr, rounds)
    config = HardwareConfig(mesh_rows=1, mesh_cols=2)
    run_kernel(kernel, args, (2,), memory, config, trace=path)
    expected = own
    for _ in range(rounds):
        expected = expected + expected @ expected
    got = memory.get(y_ptr, (ROWS, COLS), "f32")
    np.testing.assert_allclose(got, x * 2.0 + expected, rtol=1e-4, atol=1e-4)
    return path


def line_of(kernel, mark: str) -> int:
    """The line of ``kernel``'s source carrying ``# mark: NAME``."""
    lines, first = inspect.getsourcelines(kernel)
    for i, text in enumerate(lines):
        if f"# mark: {mark}" in text:
            return first + i
    raise LookupError(mark)
