"""Kernels whose story runs across PEs: a relay of receives, and one PE with more work.

``relay``: PEs in a row; PE 0 computes ``n_dots`` GEMMs and sends the result
right; each other PE waits for its left neighbour's message, computes the same
GEMMs on it and passes it on (the last one stores it). Every receive stalls
because its sender was itself waiting: PE 3's wait goes back to PE 0's work.

``copy_rows``: each PE copies its block of 64x64 f16 tiles, loading each with
``tl.load`` and waiting for its store before the next; PE ``heavy`` copies
three times as many (``heavy=-1``: every PE the same). ``copy_rows_prefetched``
copies through a one-deep prefetch with a GEMM per tile, at its bound.

Written as a user would from the README: ``gemm_rows`` multiplies row tiles of A
by B, each PE its share of the tiles (``split_rows``: the last PE takes the
remainder, or it is spread one per PE), every next tile prefetched under the
current GEMM; ``stage_pipeline`` passes micro-batches right through a GEMM per PE
and stores a side output of each (every stage the same work); ``tree_reduce`` sums
each PE's Gram matrix up a binary tree to PE 0 (the root and the relays end last by
the tree's shape).
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


A_TILE = (32, 128)
B_SHAPE = (128, 64)
A_TILE_BYTES = 32 * 128 * 2
C_TILE_BYTES = 32 * 64 * 4


def split_rows(pid, pes, n_tiles, spread):
    """PE ``pid``'s tiles [lo, hi): the remainder on the last PE, or spread one per PE."""
    per, extra = divmod(n_tiles, pes)
    if spread:
        lo = pid * per + min(pid, extra)
        return lo, lo + per + (1 if pid < extra else 0)
    lo = pid * per
    return lo, n_tiles if pid == pes - 1 else lo + per  # mark: split


def gemm_rows(tl, a_ptr, b_ptr, c_ptr, n_tiles, spread):
    """C = A @ B by row tiles, each PE its ``split_rows`` share, prefetching a tile ahead."""
    pid, pes = tl.program_id(0), tl.num_programs(0)
    lo, hi = split_rows(pid, pes, n_tiles, spread)
    b_future = tl.load_async(b_ptr, B_SHAPE, "f16")
    future = tl.load_async(a_ptr + lo * A_TILE_BYTES, A_TILE, "f16")
    b = tl.wait(b_future)
    for t in range(lo, hi):
        a = tl.wait(future)
        if t + 1 < hi:
            future = tl.load_async(a_ptr + (t + 1) * A_TILE_BYTES, A_TILE, "f16")
        tl.store(c_ptr + t * C_TILE_BYTES, tl.dot(a, b))  # mark: dot


MB = (32, 128)
WEIGHTS = (128, 128)
SIDE_WEIGHTS = (128, 64)


def stage_pipeline(tl, x_ptr, w_ptr, ws_ptr, side_ptr, y_ptr, n_mb):
    """PE 0 loads micro-batches; each PE multiplies each by its weights and sends it right
    (the last PE stores it), then stores a side output of it. Every stage does the same
    work."""
    pid, pes = tl.program_id(0), tl.num_programs(0)
    w = tl.load(w_ptr + pid * 128 * 128 * 2, WEIGHTS, "f16")
    ws = tl.load(ws_ptr + pid * 128 * 64 * 2, SIDE_WEIGHTS, "f16")
    if pid == 0:
        future = tl.load_async(x_ptr, MB, "f16")
    else:
        future = tl.recv_async("left", MB, "f16")
    for m in range(n_mb):
        x = tl.wait(future)
        if m + 1 < n_mb:
            if pid == 0:
                future = tl.load_async(x_ptr + (m + 1) * 32 * 128 * 2, MB, "f16")
            else:
                future = tl.recv_async("left", MB, "f16")
        y = tl.dot(x, w).to("f16")
        if pid == pes - 1:
            tl.store(y_ptr + m * 32 * 128 * 2, y)
        else:
            tl.send("right", y)
        # Each stage's side output (a probe head), after the micro-batch has left.
        tl.store(side_ptr + (pid * n_mb + m) * 32 * 64 * 4, tl.dot(y, ws))


GRAM = (64, 64)


def tree_reduce(tl, x_ptr, out_ptr, n_tiles):
    """Each PE sums the Gram matrices of its tiles (each loaded with ``tl.load``), then a
    binary tree adds them up to PE 0 (a PE between a receiver and its sender relays the
    partial sum)."""
    pid, pes = tl.program_id(0), tl.num_programs(0)
    base = x_ptr + pid * n_tiles * 64 * 64 * 2
    part = tl.zeros(GRAM, "f32")
    for j in range(n_tiles):
        x = tl.load(base + j * 64 * 64 * 2, GRAM, "f16")
        part = part + tl.dot(tl.trans(x), x)
    d = 1
    while d < pes:
        r = pid % (2 * d)
        if r == 0:
            part = part + tl.wait(tl.recv_async("right", GRAM, "f32"))
        elif r == d:
            tl.send("left", part)
        elif r < d:
            tl.send("left", tl.wait(tl.recv_async("right", GRAM, "f32")))
        d *= 2
    if pid == 0:
        tl.store(out_ptr, part)


def run_gemm_rows(
    trace: Path, n_tiles: int, spread: bool, pes: int = 8, config=None
) -> HardwareConfig:
    """Record ``gemm_rows`` on ``pes`` PEs in a row (``config``: its figures, the mesh
    made 1 x ``pes``); returns the config it ran with."""
    config = (config or HardwareConfig()).replace(mesh_rows=1, mesh_cols=pes)
    memory = Memory(size_bytes=1 << 24)
    rng = np.random.default_rng(1)
    a_ptr = memory.put((rng.standard_normal((n_tiles * 32, 128)) * 0.1).astype(np.float16))
    b_ptr = memory.put((rng.standard_normal(B_SHAPE) * 0.1).astype(np.float16))
    c_ptr = memory.alloc(n_tiles * C_TILE_BYTES)
    args = (a_ptr, b_ptr, c_ptr, n_tiles, spread)
    run_kernel(gemm_rows, args, (pes,), memory, config, trace=trace)
    return config


def run_pipeline(trace: Path, pes: int = 8, n_mb: int = 6) -> HardwareConfig:
    """Record ``stage_pipeline`` on ``pes`` PEs in a row; returns the config it ran with."""
    config = HardwareConfig(mesh_rows=1, mesh_cols=pes)
    memory = Memory(size_bytes=1 << 24)
    x_ptr = memory.put(np.full((n_mb * 32, 128), 0.01, np.float16))
    w_ptr = memory.put(np.full((pes * 128, 128), 0.01, np.float16))
    ws_ptr = memory.put(np.full((pes * 128, 64), 0.01, np.float16))
    side_ptr = memory.alloc(pes * n_mb * 32 * 64 * 4)
    y_ptr = memory.alloc(n_mb * 32 * 128 * 2)
    args = (x_ptr, w_ptr, ws_ptr, side_ptr, y_ptr, n_mb)
    run_kernel(stage_pipeline, args, (pes,), memory, config, trace=trace)
    return config


def run_tree(trace: Path, pes: int = 8, n_tiles: int = 8) -> HardwareConfig:
    """Record ``tree_reduce`` on ``pes`` PEs in a ring; returns the config it ran with."""
    config = HardwareConfig(mesh_rows=1, mesh_cols=pes)
    memory = Memory(size_bytes=1 << 24)
    x_ptr = memory.put(np.full((pes * n_tiles * 64, 64), 0.01, np.float16))
    out_ptr = memory.alloc(64 * 64 * 4)
    run_kernel(tree_reduce, (x_ptr, out_ptr, n_tiles), (pes,), memory, config, trace=trace)
    return config


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
