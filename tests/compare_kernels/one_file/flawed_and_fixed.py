"""Two versions of one kernel kept side by side in one file, as a user compares them:
launch_flawed waits each tile right after issuing it, launch_fixed prefetches one ahead."""

import numpy as np
from emulator import Memory
from emulator.scenarios import Scenario


def kernel_flawed(tl, k_ptr, n_tiles):
    for j in range(n_tiles):
        with tl.scope():
            f = tl.load_async(k_ptr + j * 64 * 128 * 2, (64, 128), "f16")
            k = tl.wait(f)
            s = tl.exp(tl.dot(k, tl.trans(k)) * 0.01)


def kernel_fixed(tl, k_ptr, n_tiles):
    f = tl.load_async(k_ptr, (64, 128), "f16")
    for j in range(n_tiles):
        with tl.scope():
            k = tl.wait(f)
            if j + 1 < n_tiles:
                f = tl.load_async(k_ptr + (j + 1) * 64 * 128 * 2, (64, 128), "f16")
            s = tl.exp(tl.dot(k, tl.trans(k)) * 0.01)


def _launch(kernel, n_tiles):
    mem = Memory(size_bytes=1 << 24)
    k_ptr = mem.put(np.ones((n_tiles * 64, 128), np.float16))
    return Scenario(kernel=kernel, args=(k_ptr, n_tiles), grid=(1,), memory=mem)


def launch_flawed(n_tiles=16):
    return _launch(kernel_flawed, n_tiles)


def launch_fixed(n_tiles=16):
    return _launch(kernel_fixed, n_tiles)


def kernel_flawed_renamed(tl, k_ptr, n_tiles):
    for j in range(n_tiles):
        with tl.scope():
            f = tl.load_async(k_ptr + j * 64 * 128 * 2, (64, 128), "f16")
            k = tl.wait(f)
            s = tl.exp(tl.dot(k, tl.trans(k)) * 0.01)


def launch_flawed_renamed(n_tiles=16):
    return _launch(kernel_flawed_renamed, n_tiles)
