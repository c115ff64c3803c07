"""A tiled GEMM: C = A @ B, one block of C's rows per PE, K streamed in blocking tiles."""

from __future__ import annotations

from emulator.kernels.pipeline import TilePipeline


def tiled_gemm(tl, a_ptr, b_ptr, c_ptr, m, n, k, block_m, block_k):
    """Each program computes rows [pid*block_m, +block_m) of C (f32).

    A is stored tile-major, so each (block_m, block_k) tile is contiguous: tile
    (i, kb) sits at ``((kb * m // block_m) + i) * block_m * block_k`` elements.
    B is row-major, so its (block_k, n) slabs are contiguous already.
    """
    pid = tl.program_id(0)
    row_blocks = m // block_m
    a_tile_bytes = block_m * block_k * 2
    acc = tl.zeros((block_m, n), "f32")
    for kb in range(k // block_k):
        with tl.scope():
            a = tl.load(a_ptr + (kb * row_blocks + pid) * a_tile_bytes, (block_m, block_k), "f16")
            b = tl.load(b_ptr + kb * block_k * n * 2, (block_k, n), "f16")
            acc = acc + tl.dot(a, b)
    tl.store(c_ptr + pid * block_m * n * 4, acc)


def gemm_epilogue_blocking(tl, a_ptr, b_ptr, bias_ptr, c_ptr, m, k, n, tile, scale):
    """C = relu(A @ B * scale + bias), row tile by row tile with blocking loads."""
    b = tl.load(b_ptr, (k, n), "f16")
    bias = tl.load(bias_ptr, (n,), "f32")
    for j in range(m // tile):
        with tl.scope():
            a = tl.load(a_ptr + j * tile * k * 2, (tile, k), "f16")
            c = tl.maximum(tl.dot(a, b) * scale + bias, 0.0)
            tl.store(c_ptr + j * tile * n * 4, c)


def gemm_epilogue_pipeline(tl, a_ptr, b_ptr, bias_ptr, c_ptr, m, k, n, tile, scale, depth=2):
    """The same GEMM with a kernel-written depth-2 load_async pipeline over A's row tiles."""
    b = tl.load(b_ptr, (k, n), "f16")
    bias = tl.load(bias_ptr, (n,), "f32")
    a_rows = [lambda j: (a_ptr + j * tile * k * 2, (tile, k), "f16")]
    rows = TilePipeline(tl, a_rows, m // tile, depth)
    for j in range(m // tile):
        with tl.scope():
            a = rows.next(0)
            c = tl.maximum(tl.dot(a, b) * scale + bias, 0.0)
            tl.store(c_ptr + j * tile * n * 4, c)


def gemm_epilogue_composite(tl, a_ptr, b_ptr, bias_ptr, c_ptr, m, k, n, tile, scale):
    """The same GEMM as one tl.composite: the PE's scheduler pipelines the tiles itself."""
    tl.composite(
        a_ptr,
        (m, k),
        b_ptr,
        (k, n),
        c_ptr,
        tile=tile,
        epilogues=[("scale", scale), ("bias", bias_ptr), "relu"],
    )
