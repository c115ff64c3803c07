"""Hazards in the app: listed first in the findings pane, and a breakpoint kind (``hazard
[RULE]`` in the breakpoint list) that stops at the second access of each."""

from __future__ import annotations

import kernels_hazards as kh
import pytest
from test_ui_app import SIZE, current_event, lines, opened

from kbdebug.analysis.hazards import Hazard
from kbdebug.replay import HazardHit, Replay
from kbdebug.ui import KbdebugApp
from kbdebug.ui.panes.findings_view import FindingsView
from kbdebug.ui.screens.bpspec import parse_breakpoint


@pytest.fixture(scope="module")
def racy(tmp_path_factory) -> str:
    return str(kh.record(kh.raw_bug, tmp_path_factory.mktemp("hazard_app") / "bug.kbt"))


def test_hazard_is_a_breakpoint_kind():
    bp = parse_breakpoint("hazard kb201")
    assert isinstance(bp, HazardHit) and bp.rule == "KB201"
    assert parse_breakpoint("hazard").rule == ""


async def test_the_pane_lists_the_hazard_first_and_its_breakpoint_stops_at_the_second_access(
    racy,
):
    replay = Replay.open(racy, cache=False)
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("5")
        await pilot.pause()
        view = app.query_one(FindingsView)
        hazard = view.findings[0]
        assert isinstance(hazard, Hazard) and hazard.rule == "KB201"
        assert "KB201" in lines(view)[0] and "hazard" in lines(view)[0]
        await pilot.press("enter")
        await pilot.pause()
        # On the second access's line: the load that reads the store back.
        assert current_event(app) == hazard.second.issue
        # Typed in the breakpoint list, continued to from there.
        await pilot.press("B", *"hazard", "enter", "escape")
        (bp,) = replay.breakpoints
        assert isinstance(bp, HazardHit) and bp.hazards == (hazard,)
        await pilot.press("c")
        await pilot.pause()
        assert current_event(app) == max(hazard.first.happen, hazard.second.happen)
