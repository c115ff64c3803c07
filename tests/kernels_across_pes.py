"""Kernels whose story runs across PEs: a relay of receives, and one PE with more work.

``relay``: PEs in a row; PE 0 computes ``n_dots`` GEMMs and sends the result
right; each other PE waits for its left neighbour's message, computes the same
GEMMs on it and passes it on (the last one stores it). Every receive stalls
because its sender was itself waiting: PE 3's wait goes back to PE 0's work.

``copy_rows``: each PE copies its block of 64x64 f16 tiles, loading each with
``tl.load`` and waiting for its store before the next; PE ``heavy`` copies
three times as many (``heavy=-1``: every PE the same). ``copy_rows_prefetched``
copies through a one-deep prefetch with a GEMM per tile, at its bound.
Lines a test looks for carry a ``# mark: NAME`` comment (``kernels_for_findings.line_of``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from emulator import HardwareConfig, Memory, run_kernel

SQUARE = (32, 32)
TILE = (64, 64)
TILE_BYTES = 64 * 64 * 2


def relay(tl, out_ptr, n_dots):
    """PE 0 computes and sends right; each other PE waits for it, computes and passes on."""
    pid, pes = tl.program_id(0), tl.num_programs(0)
    if pid == 0:
        acc = tl.zeros(SQUARE, "f32")
    else:
        incoming = tl.recv_async("left", SQUARE, "f32")
        acc = tl.wait(incoming)  # mark: wait
    for _ in range(n_dots):
        acc = tl.dot(acc, acc)
    if pid + 1 < pes:
        tl.send("right", acc)  # mark: send
    else:
        tl.store(out_ptr, acc)


def ring_relay(tl, out_ptr, n_dots, rounds=2):
    """A ring, ``rounds`` times: PE 0 sends and waits for the message to come round (its
    own line); every other PE waits for its left neighbour, computes and passes on."""
    pid = tl.program_id(0)
    acc = tl.zeros(SQUARE, "f32")
    for _ in range(rounds):
        if pid == 0:
            tl.send("right", acc)
            acc = tl.wait(tl.recv_async("left", SQUARE, "f32"))  # mark: back
        else:
            acc = tl.wait(tl.recv_async("left", SQUARE, "f32"))  # mark: wait
            for _ in range(n_dots):
                acc = tl.dot(acc, acc)
            tl.send("right", acc)
    tl.store(out_ptr, acc)


def ring_waits_first(tl, out_ptr, n_dots):
    """A ring where every PE waits for its left neighbour before sending: a deadlock."""
    got = tl.wait(tl.recv_async("left", SQUARE, "f32"))  # mark: wait
    tl.send("right", got)


def copy_rows(tl, a_ptr, out_ptr, n, heavy):
    """Copy n tiles per PE (3n on PE ``heavy``), each store waited before the next load."""
    pid = tl.program_id(0)
    count = 3 * n if pid == heavy else n
    first = pid * 3 * n
    for j in range(count):
        x = tl.load(a_ptr + (first + j) * TILE_BYTES, TILE, "f16")  # mark: load
        tl.wait(tl.store(out_ptr + (first + j) * TILE_BYTES, x))


def copy_rows_prefetched(tl, a_ptr, out_ptr, n, heavy):
    """The same split, each tile prefetched a tile ahead of a GEMM that hides its load."""
    pid = tl.program_id(0)
    count = 3 * n if pid == heavy else n
    first = pid * 3 * n
    future = tl.load_async(a_ptr + first * TILE_BYTES, TILE, "f16")
    for j in range(count):
        x = tl.wait(future)
        if j + 1 < count:
            future = tl.load_async(a_ptr + (first + j + 1) * TILE_BYTES, TILE, "f16")
        tl.store(out_ptr + (first + j) * TILE_BYTES, tl.dot(x, x))


def run_relay(
    trace: Path, pes: int = 4, n_dots: int = 16, kernel=relay, config=None
) -> HardwareConfig:
    """Record ``kernel`` (``relay``) on ``pes`` PEs in a row; returns the config it ran with."""
    config = config or HardwareConfig(mesh_rows=1, mesh_cols=pes, mesh_wrap=kernel is not relay)
    memory = Memory(size_bytes=1 << 16)
    out_ptr = memory.alloc(32 * 32 * 4)
    run_kernel(kernel, (out_ptr, n_dots), (pes,), memory, config, trace=trace)
    return config


def run_copy(kernel, trace: Path, heavy: int, pes: int = 8, n: int = 8) -> HardwareConfig:
    """Record a copy kernel on ``pes`` PEs, PE ``heavy`` with 3n tiles; returns the config."""
    config = HardwareConfig(mesh_rows=1, mesh_cols=pes)
    total = pes * 3 * n
    memory = Memory(size_bytes=3 * total * TILE_BYTES + (1 << 16))
    a_ptr = memory.put(np.zeros((total, *TILE), np.float16))
    out_ptr = memory.alloc(2 * total * TILE_BYTES)
    run_kernel(kernel, (a_ptr, out_ptr, n, heavy), (pes,), memory, config, trace=trace)
    return config
