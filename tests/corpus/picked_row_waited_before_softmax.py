"""A row picked by a computed index is waited at once, though the softmax between does not need it.

For each (64, 256) tile x: s = x @ q scores the rows, the best row's index is
read on the host (``.data``) and picks a correction row from a table, and the
output is softmax(x) scaled by that row. The table load cannot be issued any
earlier (its address is the argmax of this tile's scores), but it is only
needed after the softmax. The bug waits it right after issuing it, exposing
the HBM latency each tile; the fixed twin waits it after the softmax, which
covers the latency.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB104",
    params=dict(n_tiles=40),
    pes=[0],
    sizes=[dict(n_tiles=5), dict(n_tiles=40)],
)

ROWS, D = 64, 256
X_BYTES = ROWS * D * 2
ROW_BYTES = D * 2
DEPTH = 2


def _softmax_rows(tl, x):
    m = tl.max(x, axis=1)
    e = tl.exp(x - m[:, None])
    return e / tl.sum(e, axis=1)[:, None]


def kernel_bug(tl, x_ptr, q_ptr, table_ptr, y_ptr, n_tiles):
    fq = tl.load_async(q_ptr, (D, 1), "f16")
    xs = [tl.load_async(x_ptr + j * X_BYTES, (ROWS, D), "f16") for j in range(DEPTH)]
    q = tl.wait(fq)
    for j in range(n_tiles):
        with tl.scope():
            x = tl.wait(xs.pop(0))
            best = int(np.argmax(tl.dot(x, q).data))
            fr = tl.load_async(table_ptr + best * ROW_BYTES, (1, D), "f16")
            if j + DEPTH < n_tiles:  # behind the row, which is needed sooner
                xs.append(tl.load_async(x_ptr + (j + DEPTH) * X_BYTES, (ROWS, D), "f16"))
            r = tl.wait(fr)  # expect: KB104
            p = _softmax_rows(tl, x)
            tl.store(y_ptr + j * X_BYTES, (p * r).to("f16"))


def kernel_fixed(tl, x_ptr, q_ptr, table_ptr, y_ptr, n_tiles):
    fq = tl.load_async(q_ptr, (D, 1), "f16")
    xs = [tl.load_async(x_ptr + j * X_BYTES, (ROWS, D), "f16") for j in range(DEPTH)]
    q = tl.wait(fq)
    for j in range(n_tiles):
        with tl.scope():
            x = tl.wait(xs.pop(0))
            best = int(np.argmax(tl.dot(x, q).data))
            fr = tl.load_async(table_ptr + best * ROW_BYTES, (1, D), "f16")
            if j + DEPTH < n_tiles:  # behind the row, which is needed sooner
                xs.append(tl.load_async(x_ptr + (j + DEPTH) * X_BYTES, (ROWS, D), "f16"))
            p = _softmax_rows(tl, x)
            r = tl.wait(fr)
            tl.store(y_ptr + j * X_BYTES, (p * r).to("f16"))


def _launch(kernel, n_tiles, seed=15):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tiles, ROWS, D)).astype(np.float16)
    q = rng.standard_normal((D, 1)).astype(np.float16)
    table = rng.uniform(0.5, 2.0, (ROWS, D)).astype(np.float16)
    mem = Memory(size_bytes=2 * x.nbytes + table.nbytes + (1 << 16))
    x_ptr, q_ptr, table_ptr = mem.put(x), mem.put(q), mem.put(table)
    y_ptr = mem.alloc(x.nbytes)

    def check(memory):
        xf = x.astype(np.float32)
        best = np.argmax(xf @ q.astype(np.float32), axis=1)[:, 0]
        e = np.exp(xf - xf.max(axis=2, keepdims=True))
        p = e / e.sum(axis=2, keepdims=True)
        want = p * table.astype(np.float32)[best][:, None, :]
        got = memory.get(y_ptr, x.shape, "f16").astype(np.float32)
        assert np.allclose(got, want, rtol=1e-2, atol=1e-3), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, q_ptr, table_ptr, y_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_tiles=40):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=40):
    return _launch(kernel_fixed, n_tiles)
