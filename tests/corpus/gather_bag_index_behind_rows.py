"""Embedding bags gathered by row indices; the next bag's index tile queues behind rows.

Each bag sums 16 rows of a (512, 2048) f16 table picked by a 16-entry index
tile. The kernel reads an index tile on the host (``.data``) to issue its row
loads, so it runs one bag ahead: while bag b is summed, bag b + 1's rows are in
flight, and the index tile of bag b + 2 must be there when bag b + 1 starts.
The bug issues that index tile after bag b + 1's 16 row loads, so it waits
behind 64 KB of rows needed later and the read channel idles for a latency
at every bag. The fixed twin issues the index tile first.
"""

from __future__ import annotations

import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

PAIR = dict(
    rule="KB103",
    params=dict(n_bags=32),
    pes=[0],
    sizes=[dict(n_bags=4), dict(n_bags=32)],
)

VOCAB, D, BAG = 512, 2048, 16
ROW_BYTES = D * 2
IDX_BYTES = BAG * 4
OUT_BYTES = D * 4


def _rows(tl, table_ptr, idx):
    return [tl.load_async(table_ptr + int(r) * ROW_BYTES, (1, D), "f16") for r in idx.data]


def _bag(tl, rows):
    acc = tl.zeros((1, D), "f32")
    for f in rows:
        acc = acc + tl.wait(f)
    return acc


def kernel_bug(tl, idx_ptr, table_ptr, out_ptr, n_bags):
    fidx = [tl.load_async(idx_ptr + b * IDX_BYTES, (BAG,), "i32") for b in range(min(2, n_bags))]
    rows = _rows(tl, table_ptr, tl.wait(fidx.pop(0)))
    for b in range(n_bags):
        with tl.scope():
            coming = None
            if b + 1 < n_bags:
                idx = tl.wait(fidx.pop(0))
                coming = _rows(tl, table_ptr, idx)
                if b + 2 < n_bags:
                    at = idx_ptr + (b + 2) * IDX_BYTES
                    fidx.append(tl.load_async(at, (BAG,), "i32"))  # expect: KB103
            tl.store(out_ptr + b * OUT_BYTES, _bag(tl, rows))
            rows = coming


def kernel_fixed(tl, idx_ptr, table_ptr, out_ptr, n_bags):
    fidx = [tl.load_async(idx_ptr + b * IDX_BYTES, (BAG,), "i32") for b in range(min(2, n_bags))]
    rows = _rows(tl, table_ptr, tl.wait(fidx.pop(0)))
    for b in range(n_bags):
        with tl.scope():
            coming = None
            if b + 1 < n_bags:
                idx = tl.wait(fidx.pop(0))
                if b + 2 < n_bags:
                    at = idx_ptr + (b + 2) * IDX_BYTES
                    fidx.append(tl.load_async(at, (BAG,), "i32"))
                coming = _rows(tl, table_ptr, idx)
            tl.store(out_ptr + b * OUT_BYTES, _bag(tl, rows))
            rows = coming


def _launch(kernel, n_bags, seed=6):
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((VOCAB, D)).astype(np.float16)
    idx = rng.integers(0, VOCAB, (n_bags, BAG)).astype(np.int32)
    mem = Memory(size_bytes=table.nbytes + idx.nbytes + n_bags * OUT_BYTES + (1 << 16))
    idx_ptr, table_ptr = mem.put(idx), mem.put(table)
    out_ptr = mem.alloc(n_bags * OUT_BYTES)

    def check(memory):
        want = table.astype(np.float32)[idx].sum(axis=1)
        got = memory.get(out_ptr, (n_bags, D), "f32")
        assert np.allclose(got, want, rtol=1e-4, atol=1e-3), np.abs(got - want).max()

    return Scenario(
        kernel=kernel,
        args=(idx_ptr, table_ptr, out_ptr, n_bags),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(),
        check=check,
    )


def launch_bug(n_bags=32):
    return _launch(kernel_bug, n_bags)


def launch_fixed(n_bags=32):
    return _launch(kernel_fixed, n_bags)
