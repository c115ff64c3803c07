"""`kbdebug run --open` after a failed check: the app opens at the first wrong block's store
whether the trace is read before the screen or in the background, and its status says
where it stopped and why (it said "paused at the start")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from app_settle import settled

from kbdebug.launch.check_report import wrong_block_report
from kbdebug.replay import Replay
from kbdebug.replay.opening import Opening
from kbdebug.ui import KbdebugApp

KERNELS = Path(__file__).parent / "kernels_off_by_one.py"
STOPPED = "stopped at the first wrong block O[16:32, :] (store at kernels_off_by_one.py:22 on PE 0)"


@pytest.fixture(scope="module")
def wrong(tmp_path_factory) -> tuple[Path, tuple[int, str]]:
    sys.path.insert(0, str(KERNELS.parent))
    try:
        import kernels_off_by_one as kernels
    finally:
        sys.path.remove(str(KERNELS.parent))
    path = tmp_path_factory.mktemp("wrong_open") / "x.kbt"
    scenario = kernels.launch()
    scenario.run(trace=path)
    found = wrong_block_report(path, scenario)
    assert found.open_at is not None
    return path, found.open_at


@pytest.mark.parametrize("background", [False, True], ids=["before_screen", "background"])
async def test_the_app_opens_at_the_wrong_store_and_says_why(wrong, background):
    path, (position, why) = wrong
    assert why == STOPPED.removeprefix("stopped at ")
    if background:
        app = KbdebugApp(path=str(path), opening=Opening(path), open_at=(position, why))
    else:
        app = KbdebugApp(replay=Replay.open(path, cache=False), open_at=(position, why))
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert app.replay.position == position
        assert app.status == STOPPED
        assert app.focused_pe == 0
