"""An out-of-bounds access (KB204) is labelled for what it is, never 'timing-dependent':
it is wrong in any order. The app's findings pane, the review formats' saving text and
report's hazards title say 'out of bounds'; an unordered pair keeps 'timing-dependent'."""

from __future__ import annotations

import kernels_hazards as kh
import kernels_oob_strays as oob
import pytest
from test_ui_app import SIZE, lines, opened

from kbdebug.analysis import Analysis
from kbdebug.analysis.hazards import hazard_kind, hazards_are
from kbdebug.cli import main
from kbdebug.export import review
from kbdebug.replay import Replay
from kbdebug.ui import KbdebugApp
from kbdebug.ui.panes.findings_view import FindingsView


@pytest.fixture(scope="module")
def stray(tmp_path_factory) -> str:
    """A prefetch one tile past its tensor's end: one KB204 and no race."""
    path = tmp_path_factory.mktemp("oob_label") / "stray.kbt"
    oob.launch_prefetch_too_far().run(trace=path)
    return str(path)


def test_the_labels_of_each_kind():
    assert hazard_kind("KB204") == "out of bounds"
    assert hazard_kind("KB201") == "timing-dependent"
    assert hazards_are(["KB204"]) == "bytes outside their tensor"
    assert hazards_are(["KB202"]) == "results that depend on timing"
    assert hazards_are(["KB201", "KB204"]) == (
        "results that depend on timing or bytes outside their tensor"
    )


async def test_the_findings_pane_labels_kb204_out_of_bounds(stray):
    app = KbdebugApp(replay=Replay.open(stray, cache=False))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("5")
        await pilot.pause()
        row = lines(app.query_one(FindingsView))[0]
    assert "KB204" in row and "hazard: out of bounds" in row and "timing" not in row


def test_report_and_review_say_out_of_bounds(stray, capsys):
    analysis = Analysis(Replay.open(stray, cache=False))
    (hazard,) = analysis.hazards
    assert review.saving_text(hazard, analysis) == "out of bounds: fix it whatever its size"
    main(["report", stray])
    title = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("hazards ("))
    assert title.startswith("hazards (1: bytes outside their tensor;") and "timing" not in title


def test_a_race_is_still_timing_dependent(tmp_path, capsys):
    racy = str(kh.record(kh.raw_bug, tmp_path / "bug.kbt"))
    analysis = Analysis(Replay.open(racy, cache=False))
    (hazard,) = analysis.hazards
    assert review.saving_text(hazard, analysis) == "timing-dependent: fix it whatever its size"
