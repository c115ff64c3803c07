"""Tiles loaded in groups of four; each group's pending loads waited newest first.

The kernel sums a per-tile score (x @ w over 10 classes, then the row-wise
sum of its exp) over n tiles, loading them four at a time: group g + 1 is
issued when group g starts; each tile's work is a little shorter than its
transfer. The bug takes a group's futures off the end of its list
(``pending.pop()``), so the first wait is on the newest load, the last to
arrive, and no tile's work starts until the whole group has landed. The
fixed twin waits them oldest first (``pending.pop(0)``), so each tile's work
runs under the next tile's transfer.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB104",
    params=dict(n_tiles=48),
    pes=[0],
    sizes=[dict(n_tiles=8), dict(n_tiles=48)],
)

ROWS, D, OUT = 64, 128, 10
TILE_BYTES = ROWS * D * 2
GROUP = 4


def _issue(tl, x_ptr, g, n_tiles):
    first = g * GROUP
    return [
        tl.load_async(x_ptr + j * TILE_BYTES, (ROWS, D), "f16")
        for j in range(first, min(first + GROUP, n_tiles))
    ]


def kernel_bug(tl, x_ptr, w_ptr, out_ptr, n_tiles):
    fw = tl.load_async(w_ptr, (D, OUT), "f16")
    coming = _issue(tl, x_ptr, 0, n_tiles)
    w = tl.wait(fw)
    acc = tl.zeros((ROWS,), "f32")
    for g in range((n_tiles + GROUP - 1) // GROUP):
        with tl.scope():
            pending, coming = coming, _issue(tl, x_ptr, g + 1, n_tiles)
            while pending:
                x = tl.wait(pending.pop())  # expect: KB104
                acc = acc + tl.sum(tl.exp(tl.dot(x, w)), axis=1)
    tl.store(out_ptr, acc)


def kernel_fixed(tl, x_ptr, w_ptr, out_ptr, n_tiles):
    fw = tl.load_async(w_ptr, (D, OUT), "f16")
    coming = _issue(tl, x_ptr, 0, n_tiles)
    w = tl.wait(fw)
    acc = tl.zeros((ROWS,), "f32")
    for g in range((n_tiles + GROUP - 1) // GROUP):
        with tl.scope():
            pending, coming = coming, _issue(tl, x_ptr, g + 1, n_tiles)
            while pending:
                x = tl.wait(pending.pop(0))
                acc = acc + tl.sum(tl.exp(tl.dot(x, w)), axis=1)
    tl.store(out_ptr, acc)


def _launch(kernel, n_tiles, seed=14):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n_tiles, ROWS, D)) * 0.1).astype(np.float16)
    w = (rng.standard_normal((D, OUT)) * 0.1).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + (1 << 16))
    x_ptr, w_ptr = mem.put(x), mem.put(w)
    out_ptr = mem.alloc(ROWS * 4)

    def check(memory):
        s = np.einsum("trk,kn->trn", x.astype(np.float32), w.astype(np.float32))
        want = np.exp(s).sum(axis=2).sum(axis=0)
        got = memory.get(out_ptr, (ROWS,), "f32")
        assert np.allclose(got, want, rtol=1e-3), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, w_ptr, out_ptr, n_tiles),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_tiles=48):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=48):
    return _launch(kernel_fixed, n_tiles)
