"""Kernels whose sends leave late, and their fixed twins, written as a user would.

``ring_late``: a ring of PEs passing their blocks round (each PE multiplies every
block by its weights); the block is sent on only after this step's work, which does
not need it sent. ``ring_early`` sends it as soon as it arrives. ``pipe_late`` /
``pipe_early``: stages of a pipeline; each stage computes a micro-batch's output,
then a side output it stores, and only then sends the output on (the fix: send
before the side work). Lines a test looks for carry a ``# mark: NAME`` comment.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from emulator import HardwareConfig, Memory, run_kernel

TILE = (64, 64)
TILE_BYTES = 64 * 64 * 2


def ring_late(tl, x_ptr, w_ptr, out_ptr):
    """Each step: work on the block held, then pass it right and take the left one."""
    pid, n = tl.program_id(0), tl.num_programs(0)
    w = tl.load(w_ptr + pid * TILE_BYTES, TILE, "f16")
    block = tl.wait(tl.load_async(x_ptr + pid * TILE_BYTES, TILE, "f16"))
    acc = tl.zeros(TILE, "f32")
    for step in range(n):
        acc = acc + tl.dot(block, w)
        acc = tl.exp(acc * 0.01)
        if step + 1 < n:
            tl.send("right", block)  # mark: late
            incoming = tl.recv_async("left", TILE, "f16")
            block = tl.wait(incoming)
    tl.store(out_ptr + pid * TILE_BYTES * 2, acc)


def ring_early(tl, x_ptr, w_ptr, out_ptr):
    """The same ring, each block passed on as soon as it is here."""
    pid, n = tl.program_id(0), tl.num_programs(0)
    w = tl.load(w_ptr + pid * TILE_BYTES, TILE, "f16")
    block = tl.wait(tl.load_async(x_ptr + pid * TILE_BYTES, TILE, "f16"))
    acc = tl.zeros(TILE, "f32")
    for step in range(n):
        if step + 1 < n:
            tl.send("right", block)  # mark: early
            incoming = tl.recv_async("left", TILE, "f16")
        acc = acc + tl.dot(block, w)
        acc = tl.exp(acc * 0.01)
        if step + 1 < n:
            block = tl.wait(incoming)
    tl.store(out_ptr + pid * TILE_BYTES * 2, acc)


def pipe_late(tl, x_ptr, w_ptr, side_ptr, y_ptr, n_mb):
    """A pipeline stage: output, side output stored, then the output sent on."""
    pid, n = tl.program_id(0), tl.num_programs(0)
    w = tl.load(w_ptr + pid * TILE_BYTES, TILE, "f16")
    for m in range(n_mb):
        if pid == 0:
            x = tl.load(x_ptr + m * TILE_BYTES, TILE, "f16")
        else:
            x = tl.wait(tl.recv_async("left", TILE, "f16"))
        y = tl.dot(x, w).to("f16")
        side = tl.exp(tl.dot(y, w))
        tl.store(side_ptr + (pid * n_mb + m) * TILE_BYTES * 2, side)
        if pid + 1 < n:
            tl.send("right", y)  # mark: late
        else:
            tl.store(y_ptr + m * TILE_BYTES, y)


def pipe_early(tl, x_ptr, w_ptr, side_ptr, y_ptr, n_mb):
    """The same stage sending its output on before the side work."""
    pid, n = tl.program_id(0), tl.num_programs(0)
    w = tl.load(w_ptr + pid * TILE_BYTES, TILE, "f16")
    for m in range(n_mb):
        if pid == 0:
            x = tl.load(x_ptr + m * TILE_BYTES, TILE, "f16")
        else:
            x = tl.wait(tl.recv_async("left", TILE, "f16"))
        y = tl.dot(x, w).to("f16")
        if pid + 1 < n:
            tl.send("right", y)  # mark: early
        else:
            tl.store(y_ptr + m * TILE_BYTES, y)
        side = tl.exp(tl.dot(y, w))
        tl.store(side_ptr + (pid * n_mb + m) * TILE_BYTES * 2, side)


def ring_config(pes: int, **figures) -> HardwareConfig:
    """A 1 x ``pes`` mesh whose links wrap round (a ring)."""
    return HardwareConfig(mesh_rows=1, mesh_cols=pes, mesh_wrap=True, **figures)


def run_ring(kernel, path: Path, pes: int = 4, **figures) -> Path:
    """Record ``kernel`` (``ring_late`` or ``ring_early``) on a ring of ``pes`` PEs."""
    memory = Memory(size_bytes=4 * pes * TILE_BYTES + (1 << 16))
    rng = np.random.default_rng(0)
    x_ptr = memory.put((rng.standard_normal((pes * 64, 64)) * 0.1).astype(np.float16))
    w_ptr = memory.put((rng.standard_normal((pes * 64, 64)) * 0.1).astype(np.float16))
    out_ptr = memory.alloc(pes * TILE_BYTES * 2)
    args = (x_ptr, w_ptr, out_ptr)
    run_kernel(kernel, args, (pes,), memory, ring_config(pes, **figures), trace=path)
    return path


def run_pipe(kernel, path: Path, pes: int = 4, n_mb: int = 6, **figures) -> Path:
    """Record ``kernel`` (``pipe_late`` or ``pipe_early``) as ``pes`` stages, ``n_mb``
    micro-batches."""
    memory = Memory(size_bytes=(2 * pes + 2 * pes * n_mb + 2 * n_mb) * TILE_BYTES + (1 << 16))
    rng = np.random.default_rng(1)
    x_ptr = memory.put((rng.standard_normal((n_mb * 64, 64)) * 0.1).astype(np.float16))
    w_ptr = memory.put((rng.standard_normal((pes * 64, 64)) * 0.1).astype(np.float16))
    side_ptr = memory.alloc(pes * n_mb * TILE_BYTES * 2)
    y_ptr = memory.alloc(n_mb * TILE_BYTES)
    config = HardwareConfig(mesh_rows=1, mesh_cols=pes, mesh_wrap=False, **figures)
    args = (x_ptr, w_ptr, side_ptr, y_ptr, n_mb)
    run_kernel(kernel, args, (pes,), memory, config, trace=path)
    return path


def line_of(kernel, mark: str) -> int:
    """The line of ``kernel``'s source carrying ``# mark: NAME``."""
    import inspect

    lines, first = inspect.getsourcelines(kernel)
    for i, text in enumerate(lines):
        if f"# mark: {mark}" in text:
            return first + i
    raise LookupError(mark)
