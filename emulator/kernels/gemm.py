"""A tiled GEMM: C = A @ B, one block of C's rows per PE, K streamed in blocking tiles."""

from __future__ import annotations


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
