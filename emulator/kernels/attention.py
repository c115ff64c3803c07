"""Fused attention kernels: GQA decode (blocking, depth-2 prefetch, flawed prefetch) and prefill."""

from __future__ import annotations

import math

from emulator.kernels.pipeline import TilePipeline


class OnlineSoftmax:
    """The running (m, l, O) state of flash attention over a stream of K/V tiles."""

    def __init__(self, tl, rows: int, head_dim: int):
        self.tl = tl
        self.m = tl.full((rows,), -math.inf, "f32")
        self.l = tl.zeros((rows,), "f32")
        self.acc = tl.zeros((rows, head_dim), "f32")

    def scores(self, q, k, scale: float):
        """Softmax numerators of this tile and the rescale of what came before."""
        tl = self.tl
        s = tl.dot(q, tl.trans(k)) * scale
        m_new = tl.maximum(self.m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(self.m - m_new)
        self.l = self.l * alpha + tl.sum(p, axis=1)
        self.m = m_new
        return p, alpha

    def accumulate(self, p, alpha, v) -> None:
        tl = self.tl
        self.acc = self.acc * alpha[:, None] + tl.dot(p, v)

    def result(self):
        return self.acc / self.l[:, None]


def decode_blocking(tl, q_ptr, k_ptr, v_ptr, o_ptr, n_tiles, tile, heads, head_dim):
    """GQA decode: blocking tl.load of every K and V tile (no overlap at all)."""
    tile_bytes = tile * head_dim * 2
    scale = 1.0 / math.sqrt(head_dim)
    q = tl.load(q_ptr, (heads, head_dim), "f16")
    state = OnlineSoftmax(tl, heads, head_dim)
    for j in range(n_tiles):
        with tl.scope():
            k = tl.load(k_ptr + j * tile_bytes, (tile, head_dim), "f16")
            p, alpha = state.scores(q, k, scale)
            v = tl.load(v_ptr + j * tile_bytes, (tile, head_dim), "f16")
            state.accumulate(p, alpha, v)
    tl.store(o_ptr, state.result().to("f16"))


def decode_prefetch(tl, q_ptr, k_ptr, v_ptr, o_ptr, n_tiles, tile, heads, head_dim, depth=2):
    """GQA decode with a depth-2 load_async pipeline: V's load overlaps Q.K^T and softmax."""
    tile_bytes = tile * head_dim * 2
    scale = 1.0 / math.sqrt(head_dim)
    q = tl.load(q_ptr, (heads, head_dim), "f16")
    state = OnlineSoftmax(tl, heads, head_dim)
    kv = TilePipeline(
        tl,
        [
            lambda j: (k_ptr + j * tile_bytes, (tile, head_dim), "f16"),
            lambda j: (v_ptr + j * tile_bytes, (tile, head_dim), "f16"),
        ],
        n_tiles,
        depth,
    )
    for _ in range(n_tiles):
        with tl.scope():
            k = kv.next(0)
            p, alpha = state.scores(q, k, scale)
            v = kv.next(1)
            state.accumulate(p, alpha, v)
    tl.store(o_ptr, state.result().to("f16"))


def decode_flawed_prefetch(tl, q_ptr, k_ptr, v_ptr, o_ptr, n_tiles, tile, heads, head_dim):
    """A "prefetch" in name only: each load_async is waited right after it is issued."""
    tile_bytes = tile * head_dim * 2
    scale = 1.0 / math.sqrt(head_dim)
    q = tl.load(q_ptr, (heads, head_dim), "f16")
    state = OnlineSoftmax(tl, heads, head_dim)
    for j in range(n_tiles):
        with tl.scope():
            fk = tl.load_async(k_ptr + j * tile_bytes, (tile, head_dim), "f16")
            k = tl.wait(fk)
            p, alpha = state.scores(q, k, scale)
            fv = tl.load_async(v_ptr + j * tile_bytes, (tile, head_dim), "f16")
            v = tl.wait(fv)
            state.accumulate(p, alpha, v)
    tl.store(o_ptr, state.result().to("f16"))


def prefill(tl, q_ptr, k_ptr, v_ptr, o_ptr, n_tiles, tile, block_rows, head_dim, depth=2):
    """Long-context prefill: each PE takes one block of query rows over the whole K/V."""
    pid = tl.program_id(0)
    tile_bytes = tile * head_dim * 2
    block_bytes = block_rows * head_dim * 2
    scale = 1.0 / math.sqrt(head_dim)
    q = tl.load(q_ptr + pid * block_bytes, (block_rows, head_dim), "f16")
    state = OnlineSoftmax(tl, block_rows, head_dim)
    kv = TilePipeline(
        tl,
        [
            lambda j: (k_ptr + j * tile_bytes, (tile, head_dim), "f16"),
            lambda j: (v_ptr + j * tile_bytes, (tile, head_dim), "f16"),
        ],
        n_tiles,
        depth,
    )
    for _ in range(n_tiles):
        with tl.scope():
            k = kv.next(0)
            p, alpha = state.scores(q, k, scale)
            v = kv.next(1)
            state.accumulate(p, alpha, v)
    tl.store(o_ptr + pid * block_bytes, state.result().to("f16"))


def ring_attention(tl, q_ptr, k_ptr, v_ptr, o_ptr, block_rows, kv_rows, head_dim):
    """Ring attention: each PE owns one K/V block; blocks travel right around the ring.

    While a PE computes on the block it holds, it has already sent that block
    on to its right neighbour and posted the receive of the next one from its
    left, so the IPCQ transfer overlaps the compute.
    """
    pid = tl.program_id(0)
    n = tl.num_programs(0)
    q_bytes = block_rows * head_dim * 2
    kv_bytes = kv_rows * head_dim * 2
    scale = 1.0 / math.sqrt(head_dim)
    q = tl.load(q_ptr + pid * q_bytes, (block_rows, head_dim), "f16")
    k = tl.load(k_ptr + pid * kv_bytes, (kv_rows, head_dim), "f16")
    v = tl.load(v_ptr + pid * kv_bytes, (kv_rows, head_dim), "f16")
    state = OnlineSoftmax(tl, block_rows, head_dim)
    for step in range(n):
        last = step == n - 1
        if not last:
            tl.send("right", k)
            tl.send("right", v)
            fk = tl.recv_async("left", (kv_rows, head_dim), "f16")
            fv = tl.recv_async("left", (kv_rows, head_dim), "f16")
        p, alpha = state.scores(q, k, scale)
        state.accumulate(p, alpha, v)
        if not last:
            tl.free(k)
            tl.free(v)
            k = tl.wait(fk)
            v = tl.wait(fv)
    tl.store(o_ptr + pid * q_bytes, state.result().to("f16"))
