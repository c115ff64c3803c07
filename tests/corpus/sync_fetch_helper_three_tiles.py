"""Three key tiles scored against a query block, each read through a "fetch" convenience helper.

``fetch`` issues a load_async and waits on it in one expression: tile 1 and 2
could have been requested while tile 0 was being scored. Only three tiles, so
the prologue matters. The fixed twin requests all three up front.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(rule="KB102", params=dict(), pes=[0])

N_TILES, ROWS, D, TOK = 3, 64, 128, 64
TILE_BYTES = TOK * D * 2


def fetch(tl, ptr, shape, dtype="f16"):
    return tl.wait(tl.load_async(ptr, shape, dtype))  # expect: KB102


def kernel_bug(tl, q_ptr, k_ptr, s_ptr):
    q = fetch(tl, q_ptr, (ROWS, D))
    for t in range(N_TILES):
        k = fetch(tl, k_ptr + t * TILE_BYTES, (TOK, D))  # expect-call
        s = tl.exp(tl.dot(q, tl.trans(k)) * 0.05)
        tl.store(s_ptr + t * ROWS * TOK * 4, s)


def kernel_fixed(tl, q_ptr, k_ptr, s_ptr):
    q_f = tl.load_async(q_ptr, (ROWS, D), "f16")
    ks = [tl.load_async(k_ptr + t * TILE_BYTES, (TOK, D), "f16") for t in range(N_TILES)]
    q = tl.wait(q_f)
    for t in range(N_TILES):
        k = tl.wait(ks[t])
        s = tl.exp(tl.dot(q, tl.trans(k)) * 0.05)
        tl.store(s_ptr + t * ROWS * TOK * 4, s)


def _launch(kernel):
    rng = np.random.default_rng(9)
    q = rng.standard_normal((ROWS, D)).astype(np.float16)
    k = rng.standard_normal((N_TILES * TOK, D)).astype(np.float16)
    mem = Memory(size_bytes=q.nbytes + k.nbytes + N_TILES * ROWS * TOK * 4 + 4096)
    q_ptr, k_ptr, s_ptr = mem.put(q), mem.put(k), mem.alloc(N_TILES * ROWS * TOK * 4)

    def check(memory):
        want = np.exp((q.astype(np.float64) @ k.T.astype(np.float64)) * 0.05)
        got = memory.get(s_ptr, (N_TILES, ROWS, TOK), "f32").transpose(1, 0, 2).reshape(ROWS, -1)
        assert np.allclose(got, want, rtol=1e-3, atol=1e-3)

    return Scenario(kernel, (q_ptr, k_ptr, s_ptr), (1,), mem, HardwareConfig(), check)


def launch_bug():
    return _launch(kernel_bug)


def launch_fixed():
    return _launch(kernel_fixed)
