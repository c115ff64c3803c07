"""A halo exchange around a ring of four PEs, each halo waited before the tile's own GEMM.

Each PE holds a slab of row tiles. For tile j it sends the tile's last 32
rows to its right neighbour and receives the left neighbour's, then computes
out_j = x_j @ W + (column sum of the halo) @ W. The bug waits the halo right
after posting the receive, before x_j @ W, which does not need it: every tile
idles for the neighbour's send and the link latency. The fixed twin runs the
tile's GEMM first and waits the halo only for the halo term.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PES = 4
PAIR = dict(
    rule="KB109",
    params=dict(n_tiles=32),
    pes=list(range(PES)),
    sizes=[dict(n_tiles=4), dict(n_tiles=32)],
)

ROWS, K, N, HALO = 64, 128, 64, 32
X_BYTES = ROWS * K * 2
Y_BYTES = ROWS * N * 4
DEPTH = 2


def _start(tl, x_ptr, w_ptr, n_tiles):
    base = x_ptr + tl.program_id(0) * n_tiles * X_BYTES
    fw = tl.load_async(w_ptr, (K, N), "f16")
    xs = [tl.load_async(base + j * X_BYTES, (ROWS, K), "f16") for j in range(DEPTH)]
    return base, tl.wait(fw), xs


def kernel_bug(tl, x_ptr, w_ptr, y_ptr, n_tiles):
    base, w, xs = _start(tl, x_ptr, w_ptr, n_tiles)
    out_base = y_ptr + tl.program_id(0) * n_tiles * Y_BYTES
    for j in range(n_tiles):
        with tl.scope():
            x = tl.wait(xs.pop(0))
            if j + DEPTH < n_tiles:
                xs.append(tl.load_async(base + (j + DEPTH) * X_BYTES, (ROWS, K), "f16"))
            fh = tl.recv_async("left", (HALO, K), "f16")
            tl.send("right", x[ROWS - HALO :])
            halo = tl.wait(fh)  # expect: KB109
            y = tl.dot(x, w)
            edge = tl.dot(tl.sum(halo, axis=0)[None, :], w)
            tl.store(out_base + j * Y_BYTES, y + edge)


def kernel_fixed(tl, x_ptr, w_ptr, y_ptr, n_tiles):
    base, w, xs = _start(tl, x_ptr, w_ptr, n_tiles)
    out_base = y_ptr + tl.program_id(0) * n_tiles * Y_BYTES
    for j in range(n_tiles):
        with tl.scope():
            x = tl.wait(xs.pop(0))
            if j + DEPTH < n_tiles:
                xs.append(tl.load_async(base + (j + DEPTH) * X_BYTES, (ROWS, K), "f16"))
            fh = tl.recv_async("left", (HALO, K), "f16")
            tl.send("right", x[ROWS - HALO :])
            y = tl.dot(x, w)
            halo = tl.wait(fh)
            edge = tl.dot(tl.sum(halo, axis=0)[None, :], w)
            tl.store(out_base + j * Y_BYTES, y + edge)


def _launch(kernel, n_tiles, seed=22):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((PES, n_tiles, ROWS, K)) * 0.5).astype(np.float16)
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float16)
    mem = Memory(size_bytes=x.nbytes + w.nbytes + PES * n_tiles * Y_BYTES + (1 << 16))
    x_ptr, w_ptr = mem.put(x), mem.put(w)
    y_ptr = mem.alloc(PES * n_tiles * Y_BYTES)

    def check(memory):
        wf = w.astype(np.float32)
        halo = np.roll(x[:, :, ROWS - HALO :], 1, axis=0)  # PE p gets PE p-1's rows
        halo_sum = halo.sum(axis=2, dtype=np.float16).astype(np.float32)  # summed in f16
        want = x.astype(np.float32) @ wf + (halo_sum @ wf)[:, :, None, :]
        got = memory.get(y_ptr, (PES, n_tiles, ROWS, N), "f32")
        assert np.allclose(got, want, rtol=1e-2, atol=5e-2), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(x_ptr, w_ptr, y_ptr, n_tiles),
        grid=(PES,),
        memory=mem,
        config=HardwareConfig(mesh_rows=1, mesh_cols=PES),
        check=check,
    )


def launch_bug(n_tiles=32):
    return _launch(kernel_bug, n_tiles)


def launch_fixed(n_tiles=32):
    return _launch(kernel_fixed, n_tiles)
