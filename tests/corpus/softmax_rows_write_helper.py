"""Row softmax over 64 blocks of (32, 256) f32; results go out through a write helper that waits.

``write_back`` stores a block and waits for the store "to be safe". Nothing
reads the output again, so each wait only makes the kernel sit out the
write's transfer and latency. The fixed twin's helper returns the handle and
nobody waits on it.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB108", params=dict(n_blocks=64), pes=[0])

R, C = 32, 256
BLOCK = R * C * 4


def write_back(tl, ptr, x):
    handle = tl.store(ptr, x)
    tl.wait(handle)  # expect: KB108


def write_back_async(tl, ptr, x):
    return tl.store(ptr, x)


def _softmax(tl, x):
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    return e / tl.sum(e, axis=1)[:, None]


def kernel_bug(tl, x_ptr, y_ptr, n_blocks, depth=3):
    ahead = [tl.load_async(x_ptr + b * BLOCK, (R, C), "f32") for b in range(depth)]
    for b in range(n_blocks):
        with tl.scope():
            x = tl.wait(ahead.pop(0))
            if b + depth < n_blocks:
                ahead.append(tl.load_async(x_ptr + (b + depth) * BLOCK, (R, C), "f32"))
            write_back(tl, y_ptr + b * BLOCK, _softmax(tl, x))  # expect-call


def kernel_fixed(tl, x_ptr, y_ptr, n_blocks, depth=3):
    ahead = [tl.load_async(x_ptr + b * BLOCK, (R, C), "f32") for b in range(depth)]
    for b in range(n_blocks):
        with tl.scope():
            x = tl.wait(ahead.pop(0))
            if b + depth < n_blocks:
                ahead.append(tl.load_async(x_ptr + (b + depth) * BLOCK, (R, C), "f32"))
            write_back_async(tl, y_ptr + b * BLOCK, _softmax(tl, x))


def _launch(kernel, n_blocks):
    rng = np.random.default_rng(18)
    x = rng.standard_normal((n_blocks * R, C)).astype(np.float32)
    mem = Memory(size_bytes=2 * x.nbytes + 4096)
    x_ptr, y_ptr = mem.put(x), mem.alloc(x.nbytes)

    def check(memory):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        want = e / e.sum(axis=1, keepdims=True)
        assert np.allclose(memory.get(y_ptr, x.shape, "f32"), want, rtol=1e-4, atol=1e-6)

    return Scenario(kernel, (x_ptr, y_ptr, n_blocks), (1,), mem, HardwareConfig(), check)


def launch_bug(n_blocks=64):
    return _launch(kernel_bug, n_blocks)


def launch_fixed(n_blocks=64):
    return _launch(kernel_fixed, n_blocks)
