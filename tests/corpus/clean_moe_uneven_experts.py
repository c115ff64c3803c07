"""Clean: MoE experts spread unevenly over a 2x2 mesh, each PE pipelined across expert changes.

PE p serves ``4 - p`` experts (PE 3 just one), each with its own count of
token tiles, so the PEs end far apart. Each PE streams its token tiles through
a two-deep prefetch that runs across expert boundaries, and issues the next
expert's weight as soon as the current one has been waited, a whole expert
ahead of its first use. Every PE's GEMM engine is busy from its first tile's
arrival to its end.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

CLEAN = dict(
    params=dict(n_tiles=16),
    sizes=[dict(n_tiles=2), dict(n_tiles=16)],
    note="weights a whole expert ahead, tokens two tiles ahead across experts, uneven PEs",
)

ROWS, D = 64, 128
X_BYTES = ROWS * D * 2
Y_BYTES = ROWS * D * 4
W_BYTES = D * D * 2
DEPTH = 2


def kernel(tl, x_ptr, w_ptr, y_ptr, plan):
    experts = plan[tl.program_id(0)]  # [(expert, [token tiles])]
    items = [(k, t) for k, (_, tiles) in enumerate(experts) for t in tiles]
    fws = [tl.load_async(w_ptr + experts[0][0] * W_BYTES, (D, D), "f16")]
    xs = [tl.load_async(x_ptr + t * X_BYTES, (ROWS, D), "f16") for _, t in items[:DEPTH]]
    w, current = None, -1
    for i, (k, t) in enumerate(items):
        if k != current:
            if w is not None:
                tl.free(w)
            w, current = tl.wait(fws.pop(0)), k
            if k + 1 < len(experts):
                fws.append(tl.load_async(w_ptr + experts[k + 1][0] * W_BYTES, (D, D), "f16"))
        x = tl.wait(xs.pop(0))
        if i + DEPTH < len(items):
            xs.append(tl.load_async(x_ptr + items[i + DEPTH][1] * X_BYTES, (ROWS, D), "f16"))
        tl.store(y_ptr + t * Y_BYTES, tl.dot(x, w))
        tl.free(x)


def _plan(n_tiles, rng):
    """PE p: 4 - p experts; tiles per expert from n_tiles down, at least one."""
    plan, expert, token = [], 0, 0
    for pe in range(4):
        mine = []
        for k in range(4 - pe):
            count = max(1, n_tiles // (2 ** (pe + k)))
            mine.append((expert, tuple(range(token, token + count))))
            expert, token = expert + 1, token + count
        plan.append(tuple(mine))
    order = rng.permutation(token)  # token tiles scattered through HBM
    plan = tuple(tuple((e, tuple(int(order[t]) for t in ts)) for e, ts in pe) for pe in plan)
    return plan, expert, token


def launch(n_tiles=16, seed=19):
    rng = np.random.default_rng(seed)
    plan, n_experts, n_tokens = _plan(n_tiles, rng)
    x = rng.standard_normal((n_tokens, ROWS, D)).astype(np.float16)
    w = (rng.standard_normal((n_experts, D, D)) / np.sqrt(D)).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + n_tokens * Y_BYTES + (1 << 16))
    x_ptr, w_ptr = mem.put(x), mem.put(w)
    y_ptr = mem.alloc(n_tokens * Y_BYTES)

    def check(memory):
        got = memory.get(y_ptr, (n_tokens, ROWS, D), "f32")
        for experts in plan:
            for e, tiles in experts:
                for t in tiles:
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
