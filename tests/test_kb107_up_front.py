"""KB107 on a six-tile loop: a depth past the loop's tiles is "all 6 up front", and a load
waited where it is issued is said to be so (not "prefetched"); each saving is checked by
running the edit it names."""

from __future__ import annotations

import numpy as np
import pytest

from emulator import Memory, run_kernel
from kbdebug.analysis import pe_bounds
from kbdebug.analysis.findings import find_all
from kbdebug.replay import Replay

R, C, TILES = 32, 64, 6
TILE_BYTES = R * C * 4


def one_ahead(tl, x, o, n):
    """Each tile's load issued after the previous tile's wait: too shallow."""
    f = tl.load_async(x, (R, C), "f32")
    for t in range(n):
        with tl.scope():
            v = tl.wait(f)
            if t + 1 < n:
                f = tl.load_async(x + (t + 1) * TILE_BYTES, (R, C), "f32")
            tl.store(o + t * TILE_BYTES, tl.exp(v * 0.5))


def all_up_front(tl, x, o, n):
    """one_ahead with every load issued before the loop."""
    fs = [tl.load_async(x + t * TILE_BYTES, (R, C), "f32") for t in range(n)]
    for t in range(n):
        with tl.scope():
            tl.store(o + t * TILE_BYTES, tl.exp(tl.wait(fs[t]) * 0.5))


def at_once(tl, x, o, n):
    """Each load waited where it is issued (no prefetch at all): all up front is its fix too."""
    for t in range(n):
        with tl.scope():
            v = tl.wait(tl.load_async(x + t * TILE_BYTES, (R, C), "f32"))
            tl.store(o + t * TILE_BYTES, tl.exp(v * 0.5))


def run(path, kernel) -> Replay:
    memory = Memory(size_bytes=1 << 22)
    x = memory.put(np.ones((TILES * R, C), "float32"), name="X")
    o = memory.alloc(TILES * TILE_BYTES)
    run_kernel(kernel, (x, o, TILES), (1,), memory, trace=path)
    return Replay.open(str(path))


def end(replay: Replay) -> int:
    (bound,) = pe_bounds(replay)
    return bound.achieved


def kb107(replay: Replay):
    found = [f for f in find_all(replay) if f.rule == "KB107"]
    assert len(found) == 1, [(f.rule, f.message) for f in find_all(replay)]
    return found[0]


@pytest.mark.parametrize(
    ("flawed", "fixed", "says", "message"),
    [
        (
            one_ahead,
            all_up_front,
            "issue all 6 loads up front",
            "is prefetched, but",
        ),
        (
            at_once,
            all_up_front,
            "issue all 6 loads up front",
            "is waited where it is issued",
        ),
    ],
)
def test_kb107_says_the_edit_it_measured_and_the_edit_gains_it(
    tmp_path, flawed, fixed, says, message
):
    finding = kb107(run(tmp_path / "flawed.kbt", flawed))
    assert says in finding.suggestion, finding.suggestion
    assert "tiles ahead" not in finding.suggestion  # never deeper than the loop's tiles
    assert message in finding.message, finding.message
    gain = end(run(tmp_path / "flawed2.kbt", flawed)) - end(run(tmp_path / "fixed.kbt", fixed))
    assert gain > 0 and abs(finding.saving - gain) <= 0.05 * gain, (finding.saving, gain)
