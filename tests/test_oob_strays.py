"""KB204 for a line that strays from the tensor it reads on most issues (an index one
tile too far starts at the tensor's end, so it never starts in it), and not for a line
that walks several tensors on purpose."""

from __future__ import annotations

import kernels_oob_strays as kernels
import pytest

from kbdebug.analysis.results import Analysis
from kbdebug.replay import Replay


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each launch recorded once: name -> Analysis."""
    folder = tmp_path_factory.mktemp("oob_strays")
    cache: dict[str, Analysis] = {}

    def get(name: str, **args) -> Analysis:
        key = name + "".join(f"-{k}{v}" for k, v in sorted(args.items()))
        if key not in cache:
            path = folder / f"{key}.kbt"
            getattr(kernels, f"launch_{name}")(**args).run(trace=path)
            cache[key] = Analysis(Replay.open(path))
        return cache[key]

    return get


def _prefetch_line() -> int:
    import inspect

    lines, first = inspect.getsourcelines(kernels.kernel_prefetch_too_far)
    (hit,) = [first + i for i, text in enumerate(lines) if "(t + 1) * TILE" in text]
    return hit


def test_a_prefetch_one_tile_past_the_end_into_the_next_tensor_is_kb204_not_a_race(runs):
    analysis = runs("prefetch_too_far")
    # The stray load reads DST[0:8] while the first store writes it: it is out of
    # bounds of SRC, not a read-after-write on DST.
    assert [h.rule for h in analysis.hazards] == ["KB204"]
    (hazard,) = analysis.hazards
    assert hazard.first.loc.line == _prefetch_line()
    assert "reads SRC[8:32, :] on iterations 0\u20132; on iteration 3 it reads" in hazard.message
    assert f"{kernels.TILE:,} bytes past the end of SRC, in DST[0:8, :]" in hazard.message
    assert hazard.count == 1
    # No performance finding on the stray line.
    assert all(f.loc.line != _prefetch_line() for f in analysis.findings)


def test_a_prefetch_one_tile_past_the_end_into_unnamed_bytes_is_kb204(runs):
    analysis = runs("prefetch_too_far", gap=True)
    assert [h.rule for h in analysis.hazards] == ["KB204"]
    assert "past the end of SRC, into bytes no tensor names" in analysis.hazards[0].message


def test_a_line_walking_several_tensors_none_dominant_is_no_kb204(runs):
    analysis = runs("walks_tensors")
    assert analysis.hazards == []


def test_a_line_that_leaves_its_tensor_and_comes_back_is_no_kb204(runs):
    # A holds 4 of the line's 5 issues, but B's comes between them: read on purpose.
    analysis = runs("leaves_and_returns")
    assert analysis.hazards == []
