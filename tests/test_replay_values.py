"""kbdebug.replay.values: per store and per waited future, its slice, line, PE and digest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from emulator.scenarios import tiled_gemm
from emulator.trace.digests import digest_of
from kbdebug.replay import Replay
from kbdebug.replay.values import Values

TRACES = Path(__file__).resolve().parents[1] / "traces"


@pytest.fixture(scope="module")
def gemm(tmp_path_factory):
    """A tiled GEMM on 2 PEs (A in a tile-major layout), its scenario and its replay."""
    scenario = tiled_gemm()
    path = tmp_path_factory.mktemp("values") / "gemm.kbt"
    scenario.run(trace=path)
    return scenario, Replay.open(path)


def test_each_store_names_its_slice_pe_line_and_digest(gemm):
    scenario, replay = gemm
    stores = Values.of(replay).stores()
    assert [(s.where, s.pe, s.loc.line, s.op) for s in stores] == [
        ("C[0:64, :]", 0, 24, "store"),
        ("C[64:128, :]", 1, 24, "store"),
    ]
    c_ptr = scenario.args[2]
    for store in stores:
        rows = slice(*store.slice.bounds[0])
        written = scenario.memory.view(c_ptr, (128, 128), "f32")[rows]
        assert store.digest == digest_of(store.future, written)


def test_each_waited_future_names_its_slice_in_wait_order(gemm):
    _, replay = gemm
    waited = Values.of(replay).waited()
    on_pe0 = [w.where for w in waited if w.pe == 0]
    assert on_pe0[:4] == [
        "A_tiles[0, 0, :, :]",
        "B[0:64, :]",
        "A_tiles[1, 0, :, :]",
        "B[64:128, :]",
    ]
    assert all(w.digest is not None and w.digest.future == w.future for w in waited)
    values = Values.of(replay)
    first = waited[0]
    assert values.where_future(first.future) == first.where
    assert values.slice_of_future(first.future) == first.slice


def test_a_trace_before_1_5_opens_with_addresses_and_no_digests():
    replay = Replay.open(TRACES.parent / "tests" / "data" / "old_traces" / "decode_prefetch.kbt")
    values = Values.of(replay)
    assert replay.index.header["version"] < [1, 5]
    assert not values.has_digests and values.digests == {}
    waited = values.waited()
    assert waited[1].slice is None and waited[1].digest is None
    assert waited[1].where == "0x800 + 16,384 bytes"
    assert values.array(waited[1].future) is None


def test_kernel_parameter_names_name_unnamed_tensors(tmp_path):
    from emulator import Memory, run_kernel

    def copy(tl, src_ptr, dst_ptr):
        tl.wait(tl.store(dst_ptr, tl.load(src_ptr, (4, 8), "f32")))

    memory = Memory(1 << 12)
    src = memory.put(np.arange(32, dtype=np.float32).reshape(4, 8))
    dst = memory.put(np.zeros((4, 8), np.float32))
    other = memory.put(np.zeros(3, np.float32))
    path = tmp_path / "copy.kbt"
    run_kernel(copy, (src, dst), (1,), memory, trace=path)
    values = Values.of(Replay.open(path))
    assert [t.name for t in values.tensors.tensors] == ["src", "dst", "in0"]
    assert values.where(other, 12) == "in0[:]"
    assert [s.where for s in values.stores()] == ["dst[:, :]"]


def test_digests_of_a_file_rewritten_since_it_was_opened_are_not_taken(tmp_path):
    from emulator.scenarios import decode_prefetch

    path = tmp_path / "d.kbt"
    decode_prefetch(n_tiles=2).run(trace=path)
    replay = Replay.open(path, cache=False)
    decode_prefetch(n_tiles=3).run(trace=path)  # a re-run over it
    values = Values.of(replay)
    assert values.has_digests and values.digests == {}
    assert values.waited()[1].where == "K[0:64, :]"  # the places are the open run's own
