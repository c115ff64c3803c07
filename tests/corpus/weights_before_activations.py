"""A two-stage block: self-attention scores on x, then a projection by a large weight.

x (16 KB) is needed at once, the weight (64 KB) only for the last GEMM; the
kernel requests the weight first, so x waits behind its 1366-cycle transfer.
The fixed twin requests x first and the weight streams in under x's work.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB103", params=dict(), pes=[0])

T, D, OUT = 64, 128, 256


def kernel_bug(tl, x_ptr, w_ptr, y_ptr):
    w_f = tl.load_async(w_ptr, (D, OUT), "f16")
    x_f = tl.load_async(x_ptr, (T, D), "f16")  # expect: KB103
    x = tl.wait(x_f)
    s = tl.dot(x, tl.trans(x)) * (1.0 / np.sqrt(D))
    p = tl.exp(s - tl.max(s, axis=1)[:, None])
    p = p / tl.sum(p, axis=1)[:, None]
    h = tl.dot(p[:8], x)
    w = tl.wait(w_f)
    tl.store(y_ptr, tl.dot(h, w))


def kernel_fixed(tl, x_ptr, w_ptr, y_ptr):
    x_f = tl.load_async(x_ptr, (T, D), "f16")
    w_f = tl.load_async(w_ptr, (D, OUT), "f16")
    x = tl.wait(x_f)
    s = tl.dot(x, tl.trans(x)) * (1.0 / np.sqrt(D))
    p = tl.exp(s - tl.max(s, axis=1)[:, None])
    p = p / tl.sum(p, axis=1)[:, None]
    h = tl.dot(p[:8], x)
    w = tl.wait(w_f)
    tl.store(y_ptr, tl.dot(h, w))


def _launch(kernel):
    rng = np.random.default_rng(14)
    x = (rng.standard_normal((T, D)) / 4).astype(np.float16)
    w = (rng.standard_normal((D, OUT)) / 8).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + 8 * OUT * 4 + 4096)
    x_ptr, w_ptr, y_ptr = mem.put(x), mem.put(w), mem.alloc(8 * OUT * 4)

    def check(memory):
        xd = x.astype(np.float64)
        s = xd @ xd.T / np.sqrt(D)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        want = (p[:8] @ xd) @ w
        assert np.allclose(memory.get(y_ptr, (8, OUT), "f32"), want, rtol=1e-2, atol=1e-2)

    return Scenario(kernel, (x_ptr, w_ptr, y_ptr), (1,), mem, HardwareConfig(), check)


def launch_bug():
    return _launch(kernel_bug)


def launch_fixed():
    return _launch(kernel_fixed)
