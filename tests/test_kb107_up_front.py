"""KB101, KB102 and KB107 on a six-tile loop: a depth past the loop's tiles is "all 6 up
front"; KB107 says a load waited where it is issued is so (not "prefetched"). Each saving is
checked by running the edit it names."""

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


def blocking(tl, x, o, n):
    """Each tile's load blocking (KB101)."""
    for t in range(n):
        with tl.scope():
            v = tl.load(x + t * TILE_BYTES, (R, C), "f32")
            tl.store(o + t * TILE_BYTES, tl.exp(v * 0.5))


def late(tl, x, o, n):
    """Each tile's load issued below work it could go above, and waited at once (KB102)."""
    for t in range(n):
        with tl.scope():
            w = tl.exp(tl.full((R, C), 1.0) * 0.5)
            v = tl.wait(tl.load_async(x + t * TILE_BYTES, (R, C), "f32"))
            tl.store(o + t * TILE_BYTES, v * w)


def late_up_front(tl, x, o, n):
    """late with every load issued before the loop."""
    fs = [tl.load_async(x + t * TILE_BYTES, (R, C), "f32") for t in range(n)]
    for t in range(n):
        with tl.scope():
            w = tl.exp(tl.full((R, C), 1.0) * 0.5)
            tl.store(o + t * TILE_BYTES, tl.wait(fs[t]) * w)


def run(path, kernel) -> Replay:
    memory = Memory(size_bytes=1 << 22)
    x = memory.put(np.ones((TILES * R, C), "float32"), name="X")
    o = memory.alloc(TILES * TILE_BYTES)
    run_kernel(kernel, (x, o, TILES), (1,), memory, trace=path)
    return Replay.open(str(path))


def end(replay: Replay) -> int:
    (bound,) = pe_bounds(replay)
    return bound.achieved


def stream_finding(replay: Replay, rule: str):
    found = [f for f in find_all(replay) if f.rule == rule]
    assert len(found) == 1, [(f.rule, f.message) for f in find_all(replay)]
    return found[0]


@pytest.mark.parametrize(
    ("rule", "flawed", "fixed", "says", "message"),
    [
        (
            "KB107",
            one_ahead,
            all_up_front,
            "issue all 6 loads up front",
            "is prefetched, but",
        ),
        (
            "KB107",
            at_once,
            all_up_front,
            "issue all 6 loads up front",
            "is waited where it is issued",
        ),
        ("KB101", blocking, all_up_front, "issue all 6 with tl.load_async up front", "blocked"),
        ("KB102", late, late_up_front, "issue all 6 up front, before the loop", "was waited"),
    ],
)
def test_a_stream_finding_says_the_edit_it_measured_and_the_edit_gains_it(
    tmp_path, rule, flawed, fixed, says, message
):
    finding = stream_finding(run(tmp_path / "flawed.kbt", flawed), rule)
    assert says in finding.suggestion, finding.suggestion
    assert "tiles ahead" not in finding.suggestion  # never deeper than the loop's tiles
    assert message in finding.message, finding.message
    gain = end(run(tmp_path / "flawed2.kbt", flawed)) - end(run(tmp_path / "fixed.kbt", fixed))
    assert gain > 0 and abs(finding.saving - gain) <= 0.05 * gain, (finding.saving, gain)
