"""A reduction chain over IPCQ; the root waits for the chain before its own partial.

Four PEs in a row each compute a partial X_p @ W over their share of the row
tiles (a two-deep prefetch, one GEMM per tile). PE 0 sends its partial right;
each middle PE posts its receive, computes its own partial, then adds the
incoming sum and passes it on. The root (the last PE) adds the chain's sum to
its own partial and stores the result. The bug's root waits its receive right
after posting it, before its own partial, which does not need the message:
it idles while the chain runs and then does its whole share. The fixed root
computes its partial first and waits the message only for the add.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PES = 4
PAIR = dict(
    rule="KB109",
    params=dict(n_tiles=64),
    pes=[PES - 1],
    sizes=[dict(n_tiles=8), dict(n_tiles=64)],
)

ROWS, K, N = 64, 128, 64
X_BYTES = ROWS * K * 2
DEPTH = 2


def partial(tl, x_ptr, w_ptr, first, count):
    """sum over tiles first..first+count-1 of X_tile @ W, as a (ROWS, N) f32 tile."""
    fw = tl.load_async(w_ptr, (K, N), "f16")
    xs = [tl.load_async(x_ptr + (first + j) * X_BYTES, (ROWS, K), "f16") for j in range(DEPTH)]
    w = tl.wait(fw)
    acc = tl.zeros((ROWS, N), "f32")
    for j in range(count):
        with tl.scope():
            x = tl.wait(xs.pop(0))
            if j + DEPTH < count:
                xs.append(tl.load_async(x_ptr + (first + j + DEPTH) * X_BYTES, (ROWS, K), "f16"))
            acc = acc + tl.dot(x, w)
    return acc


def kernel_bug(tl, x_ptr, w_ptr, out_ptr, n_tiles):
    pid, pes = tl.program_id(0), tl.num_programs(0)
    share = n_tiles // pes
    if pid == 0:
        tl.send("right", partial(tl, x_ptr, w_ptr, 0, share))
    elif pid < pes - 1:
        incoming = tl.recv_async("left", (ROWS, N), "f32")
        own = partial(tl, x_ptr, w_ptr, pid * share, share)
        tl.send("right", tl.wait(incoming) + own)
    else:
        incoming = tl.recv_async("left", (ROWS, N), "f32")
        chain = tl.wait(incoming)  # expect: KB109
        own = partial(tl, x_ptr, w_ptr, pid * share, share)
        tl.store(out_ptr, chain + own)


def kernel_fixed(tl, x_ptr, w_ptr, out_ptr, n_tiles):
    pid, pes = tl.program_id(0), tl.num_programs(0)
    share = n_tiles // pes
    if pid == 0:
        tl.send("right", partial(tl, x_ptr, w_ptr, 0, share))
    elif pid < pes - 1:
        incoming = tl.recv_async("left", (ROWS, N), "f32")
        own = partial(tl, x_ptr, w_ptr, pid * share, share)
        tl.send("right", tl.wait(incoming) + own)
    else:
        incoming = tl.recv_async("left", (ROWS, N), "f32")
        own = partial(tl, x_ptr, w_ptr, pid * share, share)
        chain = tl.wait(incoming)
        tl.store(out_ptr, chain + own)


def _launch(kernel, n_tiles, seed=12):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tiles, ROWS, K)).astype(np.float16)
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + (1 << 16))
    x_ptr, w_ptr = mem.put(x), mem.put(w)
    out_ptr = mem.alloc(ROWS * N * 4)

    def check(memory):
        want = np.einsum("trk,kn->rn", x.astype(np.float32), w.astype(np.float32))
        got = memory.get(out_ptr, (ROWS, N), "f32")
        assert np.allclose(got, want, rtol=1e-3, atol=1e-2), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, w_ptr, out_ptr, n_tiles),
        grid=(PES,),
        memory=mem,
        config=HardwareConfig(mesh_rows=1, mesh_cols=PES, mesh_wrap=False),
        check=check,
    )


def launch_bug(n_tiles=64):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=64):
    return _launch(kernel_fixed, n_tiles)
