"""Clean: a four-stage pipeline over IPCQ, where every PE's work needs the message.

Each PE of a 1x4 row holds one layer, relu(h @ W_p). PE 0 reads the
micro-batches from HBM (two-deep prefetch) and sends its output right; PE 1
and PE 2 take theirs from the left, apply their layer and send it on; PE 3
stores. A middle PE has nothing to do before a micro-batch arrives: its only
work is that micro-batch's GEMM. Each PE prefetches its weight before its
first wait, posts the next receive before working on the current one, and
never waits a send.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PES = 4
CLEAN = dict(
    params=dict(n_tiles=32),
    sizes=[dict(n_tiles=4), dict(n_tiles=32)],
    note="each stage's GEMM consumes the received activation",
)

ROWS, D = 64, 128
H_BYTES = ROWS * D * 2
W_BYTES = D * D * 2
Y_BYTES = ROWS * D * 4
DEPTH = 2


def kernel(tl, x_ptr, w_ptr, y_ptr, n_tiles):
    pid, pes = tl.program_id(0), tl.num_programs(0)
    fw = tl.load_async(w_ptr + pid * W_BYTES, (D, D), "f16")
    if pid == 0:
        coming = [tl.load_async(x_ptr + m * H_BYTES, (ROWS, D), "f16") for m in range(DEPTH)]
    else:
        coming = [tl.recv_async("left", (ROWS, D), "f16") for _ in range(min(DEPTH, n_tiles))]
    w = tl.wait(fw)
    for m in range(n_tiles):
        with tl.scope():
            h = tl.wait(coming.pop(0))
            if m + DEPTH < n_tiles:
                if pid == 0:
                    coming.append(tl.load_async(x_ptr + (m + DEPTH) * H_BYTES, (ROWS, D), "f16"))
                else:
                    coming.append(tl.recv_async("left", (ROWS, D), "f16"))
            out = tl.maximum(tl.dot(h, w), 0.0)
            if pid < pes - 1:
                tl.send("right", out.to("f16"))
            else:
                tl.store(y_ptr + m * Y_BYTES, out)


def launch(n_tiles=32, seed=16):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tiles, ROWS, D)).astype(np.float16)
    w = (rng.standard_normal((PES, D, D)) * (2 / np.sqrt(D))).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + n_tiles * Y_BYTES + (1 << 16))
    x_ptr, w_ptr = mem.put(x), mem.put(w)
    y_ptr = mem.alloc(n_tiles * Y_BYTES)

    def check(memory):
        h = x
        for p in range(PES):
            out = np.maximum(h.astype(np.float32) @ w[p].astype(np.float32), 0.0)
            h = out.astype(np.float16)
        got = memory.get(y_ptr, (n_tiles, ROWS, D), "f32")
        assert np.allclose(got, out, rtol=1e-2, atol=1e-2), np.abs(got - out).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, w_ptr, y_ptr, n_tiles),
        grid=(PES,),
        memory=mem,
        config=HardwareConfig(mesh_rows=1, mesh_cols=PES, mesh_wrap=False),
        check=check,
    )
