"""A fix text says one placement, the one its saving was re-timed for: a tile stream
waited right after each issue, whose work per tile hides a third of a load, gets KB102
at a depth above one; its text places each issue after the wait of the tile that many
before it (not the previous tile's, which is depth one), names a pipeline the user has
installed, and running the kernel that way saves what the finding says."""

from __future__ import annotations

import re

import numpy as np
import pytest

from emulator import Memory, run_kernel
from kbdebug.analysis import pe_bounds
from kbdebug.analysis.findings import find_all
from kbdebug.replay import Replay

TILE = (64, 64)
TILE_BYTES = 64 * 64 * 2
N_TILES = 24


def tile_stream(tl, a_ptr, n, depth):
    """Each tile waited right after its issue (``depth`` 0), or issued ``depth`` ahead."""
    q = tl.zeros((32, 64), "f16")
    futures = [tl.load_async(a_ptr + j * TILE_BYTES, TILE, "f16") for j in range(min(depth, n))]
    for j in range(n):
        with tl.scope():
            if depth == 0:
                futures.append(tl.load_async(a_ptr + j * TILE_BYTES, TILE, "f16"))
            x = tl.wait(futures[j])
            if depth and j + depth < n:
                futures.append(tl.load_async(a_ptr + (j + depth) * TILE_BYTES, TILE, "f16"))
            tl.dot(q, tl.trans(q))
            tl.max(x, axis=1)


def recorded(path, depth: int) -> Replay:
    a = np.random.default_rng(0).standard_normal((N_TILES * 64, 64)).astype(np.float16)
    memory = Memory(size_bytes=a.nbytes + (1 << 12))
    run_kernel(tile_stream, (memory.put(a), N_TILES, depth), (1,), memory, trace=path)
    return Replay.open(path)


@pytest.fixture(scope="module")
def flawed(tmp_path_factory) -> Replay:
    return recorded(tmp_path_factory.mktemp("stream") / "flawed.kbt", 0)


def test_kb102_text_places_the_issue_at_the_depth_it_names(flawed):
    (f,) = [f for f in find_all(flawed) if f.rule == "KB102"]
    ahead = int(re.search(r"issue it (\d+) tiles ahead", f.suggestion).group(1))
    assert ahead > 1
    assert "previous tile" not in f.suggestion
    assert f"right after the tl.wait of the tile {ahead} before it" in f.suggestion
    assert f"depth={ahead}) from emulator.kernels.pipeline" in f.suggestion
    assert "emulator/kernels/pipeline.py" not in f.suggestion


def test_kb102_saving_is_what_its_placement_saves(flawed, tmp_path):
    (f,) = [f for f in find_all(flawed) if f.rule == "KB102"]
    ahead = int(re.search(r"issue it (\d+) tiles ahead", f.suggestion).group(1))
    (before,) = pe_bounds(flawed)
    (after,) = pe_bounds(recorded(tmp_path / "fixed.kbt", ahead))
    measured = before.achieved - after.achieved
    assert abs(f.saving - measured) <= 0.05 * measured, (f.saving, measured)
