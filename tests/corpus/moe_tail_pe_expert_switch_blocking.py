"""MoE experts over a 2x2 mesh, unevenly: the PE serving the tail experts loads each one blocking.

Token tiles are routed on the host: PE 1 gets the hottest expert's n/2 tiles,
PE 2 and PE 3 one expert each with n/4 and n/8 tiles, and PE 0 the long tail,
n tiles of n different experts. Every PE streams its token tiles through a
two-deep prefetch and computes y = x @ W_e. The first expert's weight is
prefetched in every version; the bug loads each further expert's weight with
``tl.load`` when the expert changes, which only PE 0 ever does, so PE 0 (the
launch's critical PE) stalls for a 32 KB weight and the latency at every
tile. The fixed twin prefetches the next item's weight one item ahead.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB101",
    params=dict(n_tiles=32),
    pes=[0],
    sizes=[dict(n_tiles=4), dict(n_tiles=32)],
)

ROWS, D = 64, 128
X_BYTES = ROWS * D * 2
Y_BYTES = ROWS * D * 4
W_BYTES = D * D * 2
DEPTH = 2


def kernel_bug(tl, x_ptr, w_ptr, y_ptr, plan):
    items = plan[tl.program_id(0)]
    expert = items[0][0]
    fw = tl.load_async(w_ptr + expert * W_BYTES, (D, D), "f16")
    xs = [tl.load_async(x_ptr + t * X_BYTES, (ROWS, D), "f16") for _, t in items[:DEPTH]]
    w = tl.wait(fw)
    for i, (e, t) in enumerate(items):
        x = tl.wait(xs.pop(0))
        if i + DEPTH < len(items):
            xs.append(tl.load_async(x_ptr + items[i + DEPTH][1] * X_BYTES, (ROWS, D), "f16"))
        if e != expert:
            tl.free(w)
            w = tl.load(w_ptr + e * W_BYTES, (D, D), "f16")  # expect: KB101
            expert = e
        tl.store(y_ptr + t * Y_BYTES, tl.dot(x, w))
        tl.free(x)


def kernel_fixed(tl, x_ptr, w_ptr, y_ptr, plan):
    items = plan[tl.program_id(0)]
    expert = items[0][0]
    fw = tl.load_async(w_ptr + expert * W_BYTES, (D, D), "f16")
    xs = [tl.load_async(x_ptr + t * X_BYTES, (ROWS, D), "f16") for _, t in items[:DEPTH]]
    w = tl.wait(fw)
    for i, (e, t) in enumerate(items):
        x = tl.wait(xs.pop(0))
        if i + DEPTH < len(items):
            xs.append(tl.load_async(x_ptr + items[i + DEPTH][1] * X_BYTES, (ROWS, D), "f16"))
        if e != expert:
            tl.free(w)
            w = tl.wait(fw)
            expert = e
        if i + 1 < len(items) and items[i + 1][0] != expert:
            fw = tl.load_async(w_ptr + items[i + 1][0] * W_BYTES, (D, D), "f16")
        tl.store(y_ptr + t * Y_BYTES, tl.dot(x, w))
        tl.free(x)


def _plan(n_tiles, rng):
    """Token tiles per PE as (expert, token tile) items: PE 0 gets the tail."""
    counts = [n_tiles, n_tiles // 2, max(1, n_tiles // 4), max(1, n_tiles // 8)]
    tiles = rng.permutation(sum(counts))
    plan, at = [], 0
    for pe, count in enumerate(counts):
        mine = tiles[at : at + count]
        at += count
        if pe == 0:
            plan.append(tuple((3 + i, int(t)) for i, t in enumerate(mine)))
        else:
            plan.append(tuple((pe - 1, int(t)) for t in mine))
    return tuple(plan), 3 + n_tiles, sum(counts)


def _launch(kernel, n_tiles, seed=11):
    rng = np.random.default_rng(seed)
    plan, n_experts, n_tokens = _plan(n_tiles, rng)
    x = rng.standard_normal((n_tokens, ROWS, D)).astype(np.float16)
    w = (rng.standard_normal((n_experts, D, D)) / np.sqrt(D)).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + n_tokens * Y_BYTES + (1 << 16))
    x_ptr, w_ptr = mem.put(x), mem.put(w)
    y_ptr = mem.alloc(n_tokens * Y_BYTES)

    def check(memory):
        got = memory.get(y_ptr, (n_tokens, ROWS, D), "f32")
        for items in plan:
            for e, t in items:
                want = x[t].astype(np.float32) @ w[e].astype(np.float32)
                assert np.allclose(got[t], want, rtol=1e-3, atol=1e-2), (e, t)

    return Scenario(
        kernel=kernel,
        args=(x_ptr, w_ptr, y_ptr, plan),
        grid=(4,),
        memory=mem,
        config=HardwareConfig(mesh_rows=2, mesh_cols=2),
        check=check,
    )


def launch_bug(n_tiles=32):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=32):
    return _launch(kernel_fixed, n_tiles)
