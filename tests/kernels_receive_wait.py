"""Two-PE kernels whose consumer waits for a value before work that does not need it.

PE 0 makes a tile (``rounds`` dots: the more, the slower the producer) and sends it
right; PE 1 prefetches its own tiles, and each iteration waits for PE 0's tile at
once, then waits its own, multiplies it and only then adds the received tile.
``recv_waited_early`` receives the tile; ``load_waited_early`` is a consumer alone
that loads the tile a step ahead and waits it before the dots that do not need it (a
load's early wait, KB104's). Lines a test looks for carry a ``# mark: NAME`` comment.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np

from emulator import HardwareConfig, Memory, run_kernel

ROWS, COLS = 32, 64
TILE_BYTES = ROWS * COLS * 2


def recv_waited_early(tl, a_ptr, b_ptr, w_ptr, out_ptr, n, rounds):
    """PE 0 sends a tile right per step; PE 1 waits each one as soon as it posts the receive."""
    w = tl.load(w_ptr, (COLS, COLS), "f16")
    if tl.program_id(0) == 0:
        a = tl.load(a_ptr, (ROWS, COLS), "f16")
        for _ in range(n):
            for _ in range(rounds):
                a = tl.dot(a, w).to("f16")
            tl.send("right", a)
        return
    own = tl.load_async(b_ptr, (ROWS, COLS), "f16")
    for t in range(n):
        incoming = tl.recv_async("left", (ROWS, COLS), "f16")
        got = tl.wait(incoming)  # mark: early-wait
        b = tl.wait(own)
        if t + 1 < n:
            own = tl.load_async(b_ptr + (t + 1) * TILE_BYTES, (ROWS, COLS), "f16")
        part = tl.dot(b, w)
        tl.store(out_ptr + t * TILE_BYTES * 2, part + got)  # mark: use


def load_waited_early(tl, a_ptr, b_ptr, w_ptr, out_ptr, n, rounds):
    """PE 1 alone, the received tile replaced by one it loads a step ahead and waits at
    the top of the step, above ``rounds`` dots that do not need it."""
    w = tl.load(w_ptr, (COLS, COLS), "f16")
    if tl.program_id(0) == 0:
        return
    b = tl.load(b_ptr, (ROWS, COLS), "f16")
    ahead = tl.load_async(a_ptr, (ROWS, COLS), "f16")
    for t in range(n):
        got = tl.wait(ahead)  # mark: early-wait
        if t + 1 < n:
            ahead = tl.load_async(a_ptr + (t + 1) * TILE_BYTES, (ROWS, COLS), "f16")
        for _ in range(rounds):
            b = tl.dot(b, w).to("f16")
        tl.store(out_ptr + t * TILE_BYTES * 2, b + got)  # mark: use


def run(kernel, path: Path, rounds: int, n: int = 6) -> Path:
    """Record ``kernel`` on a 1 x 2 mesh, ``n`` tiles, a producer of ``rounds`` dots a tile."""
    memory = Memory(size_bytes=1 << 20)
    rng = np.random.default_rng(5)
    a_ptr = memory.put((rng.standard_normal((n * ROWS, COLS)) * 0.1).astype(np.float16))
    b_ptr = memory.put((rng.standard_normal((n * ROWS, COLS)) * 0.1).astype(np.float16))
    w_ptr = memory.put((rng.standard_normal((COLS, COLS)) * 0.1).astype(np.float16))
    out_ptr = memory.alloc(n * TILE_BYTES * 2)
    args = (a_ptr, b_ptr, w_ptr, out_ptr, n, rounds)
    run_kernel(kernel, args, (2,), memory, HardwareConfig(mesh_rows=1, mesh_cols=2), trace=path)
    return path


def line_of(kernel, mark: str) -> int:
    """The line of ``kernel``'s source carrying ``# mark: NAME``."""
    lines, first = inspect.getsourcelines(kernel)
    for i, text in enumerate(lines):
        if f"# mark: {mark}" in text:
            return first + i
    raise LookupError(mark)
