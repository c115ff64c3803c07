"""A two-PE kernel whose consumer waits the newer of two receives first, before work.

PE 0 makes a tile (``rounds`` dots) and sends it right twice per step; PE 1 posts
both receives from one line, waits the second at once, multiplies its own tile
``work`` times (work that needs neither message), then waits the first and adds
them. In a trace without reads the second wait is both an out-of-order wait (an
older receive of its line still pending) and a receive waited right after its post.
Lines a test looks for carry a ``# mark: NAME`` comment.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np

from emulator import HardwareConfig, Memory, run_kernel

ROWS, COLS = 32, 64
TILE_BYTES = ROWS * COLS * 2


def newer_receive_waited_first(tl, a_ptr, w_ptr, out_ptr, n, rounds, work, finish):
    """PE 0 sends two tiles a step; PE 1 waits the newer at once, then works, then the older."""
    w = tl.load(w_ptr, (COLS, COLS), "f16")
    a = tl.load(a_ptr, (ROWS, COLS), "f16")
    if tl.program_id(0) == 0:
        for _ in range(n):
            for _ in range(rounds):
                a = tl.dot(a, w).to("f16")
            tl.send("right", a)
            tl.send("right", a)
        return
    for t in range(n):
        pair = [tl.recv_async("left", (ROWS, COLS), "f16") for _ in range(2)]
        # The last step takes the pair newest first, the others oldest first.
        head, tail = (pair[1], pair[0]) if t == n - 1 else (pair[0], pair[1])
        got = tl.wait(head)  # mark: early-wait
        for _ in range(work):
            a = tl.dot(a, w).to("f16")
        other = tl.wait(tail)
        tl.store(out_ptr + t * TILE_BYTES * 2, got + other + a)  # mark: use
    for _ in range(finish):
        a = tl.dot(a, w).to("f16")
    tl.store(out_ptr, a)


def run(path: Path, rounds: int, work: int, finish: int, n: int = 5) -> Path:
    """Record the kernel on a 1 x 2 mesh, ``n`` steps."""
    memory = Memory(size_bytes=1 << 20)
    rng = np.random.default_rng(7)
    a_ptr = memory.put((rng.standard_normal((ROWS, COLS)) * 0.1).astype(np.float16))
    w_ptr = memory.put((rng.standard_normal((COLS, COLS)) * 0.1).astype(np.float16))
    out_ptr = memory.alloc(n * TILE_BYTES * 2)
    args = (a_ptr, w_ptr, out_ptr, n, rounds, work, finish)
    config = HardwareConfig(mesh_rows=1, mesh_cols=2)
    run_kernel(newer_receive_waited_first, args, (2,), memory, config, trace=path)
    return path


def line_of(mark: str) -> int:
    """The line of the kernel's source carrying ``# mark: NAME``."""
    lines, first = inspect.getsourcelines(newer_receive_waited_first)
    for i, text in enumerate(lines):
        if f"# mark: {mark}" in text:
            return first + i
    raise LookupError(mark)
