"""Router + expert stream: per block, the router tile is needed first, the expert weight last.

The loop prefetches block j+1 one iteration ahead, but requests the 32 KB
expert weight before the 8 KB router tile, so the router tile the next
iteration opens with queues behind a weight it will not touch until the end.
The fixed twin requests the router tile first.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB103", params=dict(n_blocks=24), pes=[0])

TOK, HID, EXP, OUT = 64, 64, 32, 128
X_BYTES, W_BYTES = TOK * HID * 2, HID * 2 * OUT * 2
X_SHAPE = (TOK, HID)


def kernel_bug(tl, x_ptr, w_ptr, r_ptr, q_ptr, y_ptr, n_blocks):
    router_f = tl.load_async(r_ptr, (HID, EXP), "f16")
    q_f = tl.load_async(q_ptr, (8, 2 * HID), "f16")
    w_next = tl.load_async(w_ptr, (2 * HID, OUT), "f16")
    x_next = tl.load_async(x_ptr, (TOK, HID), "f16")
    router, q = tl.wait(router_f), tl.wait(q_f)
    for j in range(n_blocks):
        with tl.scope():
            x = tl.wait(x_next)
            w_cur = w_next
            if j + 1 < n_blocks:
                w_next = tl.load_async(w_ptr + (j + 1) * W_BYTES, (2 * HID, OUT), "f16")
                x_next = tl.load_async(x_ptr + (j + 1) * X_BYTES, X_SHAPE, "f16")  # expect: KB103
            logits = tl.dot(x, router)
            gate = tl.max(logits)
            w = tl.wait(w_cur)
            tl.store(y_ptr + j * 8 * OUT * 4, tl.dot(q, w) * gate)


def kernel_fixed(tl, x_ptr, w_ptr, r_ptr, q_ptr, y_ptr, n_blocks):
    router_f = tl.load_async(r_ptr, (HID, EXP), "f16")
    q_f = tl.load_async(q_ptr, (8, 2 * HID), "f16")
    x_next = tl.load_async(x_ptr, (TOK, HID), "f16")
    w_next = tl.load_async(w_ptr, (2 * HID, OUT), "f16")
    router, q = tl.wait(router_f), tl.wait(q_f)
    for j in range(n_blocks):
        with tl.scope():
            x = tl.wait(x_next)
            w_cur = w_next
            if j + 1 < n_blocks:
                x_next = tl.load_async(x_ptr + (j + 1) * X_BYTES, X_SHAPE, "f16")
                w_next = tl.load_async(w_ptr + (j + 1) * W_BYTES, (2 * HID, OUT), "f16")
            logits = tl.dot(x, router)
            gate = tl.max(logits)
            w = tl.wait(w_cur)
            tl.store(y_ptr + j * 8 * OUT * 4, tl.dot(q, w) * gate)


def _launch(kernel, n_blocks):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((n_blocks, TOK, HID)).astype(np.float16)
    w = (rng.standard_normal((n_blocks, 2 * HID, OUT)) / 8).astype(np.float16)
    r = (rng.standard_normal((HID, EXP)) / 8).astype(np.float16)
    q = rng.standard_normal((8, 2 * HID)).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + n_blocks * 8 * OUT * 4 + 65536)
    x_ptr, w_ptr, r_ptr, q_ptr = mem.put(x), mem.put(w), mem.put(r), mem.put(q)
    y_ptr = mem.alloc(n_blocks * 8 * OUT * 4)

    def check(memory):
        gate = (x.astype(np.float64) @ r).max(axis=(1, 2))
        want = np.einsum("ik,jko->jio", q.astype(np.float64), w) * gate[:, None, None]
        got = memory.get(y_ptr, (n_blocks, 8, OUT), "f32")
        assert np.allclose(got, want, rtol=2e-3, atol=2e-2)

    args = (x_ptr, w_ptr, r_ptr, q_ptr, y_ptr, n_blocks)
    return Scenario(kernel, args, (1,), mem, HardwareConfig(), check)


def launch_bug(n_blocks=24):
    return _launch(kernel_bug, n_blocks)


def launch_fixed(n_blocks=24):
    return _launch(kernel_fixed, n_blocks)
