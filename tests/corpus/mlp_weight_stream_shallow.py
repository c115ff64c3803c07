"""An MLP layer streaming 128x128 weight tiles past a small resident activation block.

Each tile's GEMM (768 cycles) outlasts its transfer (683), so the stream is
compute-bound, but the weights are prefetched only one tile ahead: 683 + 500
cycles of DMA cannot hide under 800 cycles of work. No tl.scope: tiles are
released with tl.free. The fixed twin keeps two tiles ahead.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB107", params=dict(n_out=32), pes=[0], depth=2)

M, K, N = 12, 128, 128
W_BYTES = K * N * 2


def kernel_bug(tl, x_ptr, w_ptr, y_ptr, n_out):
    x_f = tl.load_async(x_ptr, (M, K), "f16")
    w_next = tl.load_async(w_ptr, (K, N), "f16")
    x = tl.wait(x_f)
    for o in range(n_out):
        w = tl.wait(w_next)
        if o + 1 < n_out:
            w_next = tl.load_async(w_ptr + (o + 1) * W_BYTES, (K, N), "f16")  # expect: KB107
        h = tl.dot(x, w)
        h = tl.maximum(h, 0.0) * 0.5
        tl.store(y_ptr + o * M * N * 4, h)
        tl.free(w)


def kernel_fixed(tl, x_ptr, w_ptr, y_ptr, n_out):
    x_f = tl.load_async(x_ptr, (M, K), "f16")
    w_q = [tl.load_async(w_ptr + o * W_BYTES, (K, N), "f16") for o in range(2)]
    x = tl.wait(x_f)
    for o in range(n_out):
        w = tl.wait(w_q.pop(0))
        if o + 2 < n_out:
            w_q.append(tl.load_async(w_ptr + (o + 2) * W_BYTES, (K, N), "f16"))
        h = tl.dot(x, w)
        h = tl.maximum(h, 0.0) * 0.5
        tl.store(y_ptr + o * M * N * 4, h)
        tl.free(w)


def _launch(kernel, n_out):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((M, K)).astype(np.float16)
    w = (rng.standard_normal((n_out, K, N)) / 8).astype(np.float16)
    mem = Memory(size_bytes=w.nbytes + n_out * M * N * 4 + 8192)
    x_ptr, w_ptr, y_ptr = mem.put(x), mem.put(w), mem.alloc(n_out * M * N * 4)

    def check(memory):
        want = np.maximum(np.einsum("mk,okn->omn", x.astype(np.float64), w), 0) * 0.5
        got = memory.get(y_ptr, (n_out, M, N), "f32")
        assert np.allclose(got, want, atol=1e-2, rtol=1e-3)

    return Scenario(kernel, (x_ptr, w_ptr, y_ptr, n_out), (1,), mem, HardwareConfig(), check)


def launch_bug(n_out=32):
    return _launch(kernel_bug, n_out)


def launch_fixed(n_out=32):
    return _launch(kernel_fixed, n_out)
