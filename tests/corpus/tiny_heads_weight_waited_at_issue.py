"""A tiny multi-head projection (three heads at the small size): each head's weight waited at issue.

y_h = x @ W_h for one 64x128 activation tile and a 128x128 f16 weight per
head. With three heads the run is mostly prologue and epilogue, and the bug
adds to both: each head issues its weight load only when its turn comes and
waits it on the next line, so no weight transfer overlaps a GEMM. The fixed
twin issues W_0 with x and each next weight before the current head's GEMM.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB102",
    params=dict(n_heads=32),
    pes=[0],
    sizes=[dict(n_heads=3), dict(n_heads=32)],
)

ROWS, D = 64, 128
W_BYTES = D * D * 2
Y_BYTES = ROWS * D * 4


def kernel_bug(tl, x_ptr, w_ptr, y_ptr, n_heads):
    x = tl.wait(tl.load_async(x_ptr, (ROWS, D), "f16"))
    for h in range(n_heads):
        with tl.scope():
            fw = tl.load_async(w_ptr + h * W_BYTES, (D, D), "f16")  # expect: KB102
            w = tl.wait(fw)
            tl.store(y_ptr + h * Y_BYTES, tl.dot(x, w))


def kernel_fixed(tl, x_ptr, w_ptr, y_ptr, n_heads):
    fx = tl.load_async(x_ptr, (ROWS, D), "f16")
    fw = tl.load_async(w_ptr, (D, D), "f16")
    x = tl.wait(fx)
    for h in range(n_heads):
        with tl.scope():
            w = tl.wait(fw)
            if h + 1 < n_heads:
                fw = tl.load_async(w_ptr + (h + 1) * W_BYTES, (D, D), "f16")
            tl.store(y_ptr + h * Y_BYTES, tl.dot(x, w))


def _launch(kernel, n_heads, seed=13):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((ROWS, D)).astype(np.float16)
    w = (rng.standard_normal((n_heads, D, D)) / np.sqrt(D)).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + n_heads * Y_BYTES + (1 << 16))
    x_ptr, w_ptr = mem.put(x), mem.put(w)
    y_ptr = mem.alloc(n_heads * Y_BYTES)

    def check(memory):
        want = np.einsum("rk,hkn->hrn", x.astype(np.float32), w.astype(np.float32))
        got = memory.get(y_ptr, (n_heads, ROWS, D), "f32")
        assert np.allclose(got, want, rtol=1e-3, atol=1e-2), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, w_ptr, y_ptr, n_heads),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_heads=32):
    return _launch(kernel_bug, n_heads)


def launch_fixed(n_heads=32):
    return _launch(kernel_fixed, n_heads)
