"""gdb's keys in the app: n, s, o, t and their reverses land on the kernel's lines and its
helper's as gdb would; e steps raw events; ; and , repeat a / search."""

from __future__ import annotations

import pytest
from kernels_stepping import line, record
from test_ui_app import SIZE, header, opened

from kbdebug.replay import Replay
from kbdebug.ui import KbdebugApp
from kbdebug.ui.panes.source_view import SourceView


@pytest.fixture(scope="module")
def path(tmp_path_factory) -> str:
    return str(record(tmp_path_factory.mktemp("ui-stepping") / "looped.kbt"))


def where(app: KbdebugApp) -> tuple[int, str]:
    """The source pane's current line, and the function it is in (the kernel's where the
    pane shows the kernel's line that called a helper)."""
    _, number = app.query_one(SourceView).current_line
    loc = app.replay.index.loc(int(app.replay.state.pes[0].loc))
    if loc.caller is not None and number == loc.caller.line:
        return number, "looped"
    return number, loc.function


async def press(pilot, *keys: str) -> None:
    await pilot.press(*keys)
    await pilot.pause()


async def test_n_steps_over_the_helper_onto_its_calling_line_and_N_comes_back(path):
    app = KbdebugApp(replay=Replay.open(path))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await press(pilot, *"nnnn")  # start, the load (issue and wait: one line), issue, wait
        assert where(app) == (line("wait"), "looped")
        await press(pilot, "n")  # over scaled(): the calling line, never inside it
        assert where(app) == (line("call"), "looped")
        assert "next: PE 0 at" in header(app) and "scaled(tl, x) ran 2 tl calls" in header(app)
        await press(pilot, "n")
        assert where(app) == (line("issue"), "looped")
        await press(pilot, "N")
        assert where(app) == (line("call"), "looped")
        await press(pilot, "N")
        assert where(app) == (line("wait"), "looped")


async def test_s_steps_into_the_helper_and_S_back_out(path):
    app = KbdebugApp(replay=Replay.open(path))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await press(pilot, *"nnnn")
        before = app.position
        await press(pilot, "s")
        assert where(app) == (line("helper-exp"), "scaled")
        await press(pilot, "s")
        assert where(app) == (line("helper-dot"), "scaled")
        await press(pilot, "S", "S")
        assert app.position == before and where(app) == (line("wait"), "looped")


async def test_o_finishes_the_helper_and_O_returns_to_before_the_call(path):
    app = KbdebugApp(replay=Replay.open(path))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await press(pilot, *"nnnn")
        first_wait = app.position
        await press(pilot, "s")
        assert where(app) == (line("helper-exp"), "scaled")
        await press(pilot, "o")
        assert where(app) == (line("call"), "looped")
        await press(pilot, "n", "n", "s")  # the next step's issue and wait, into the helper
        assert where(app) == (line("helper-exp"), "scaled")
        await press(pilot, "O")
        assert where(app) == (line("wait"), "looped")
        assert app.position > first_wait  # the second step's wait, not the first's


async def test_o_in_the_kernel_refuses_and_stays(path):
    app = KbdebugApp(replay=Replay.open(path))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await press(pilot, "n", "n")
        position = app.position
        await press(pilot, "o")
        assert app.position == position
        assert "not in a helper" in header(app)


async def test_t_leaves_the_loop_and_T_goes_back_above_it(path):
    app = KbdebugApp(replay=Replay.open(path))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await press(pilot, *"nnnnn")
        assert where(app) == (line("call"), "looped")  # the loop's last line
        await press(pilot, "t")
        assert where(app) == (line("after"), "looped")
        await press(pilot, "N", "N", "N")  # the last step's call, wait and issue
        assert where(app) == (line("issue"), "looped")  # the loop's first line
        await press(pilot, "T")
        assert where(app) == (line("first"), "looped")


async def test_e_steps_single_events_where_s_skips_to_the_next_call(path):
    app = KbdebugApp(replay=Replay.open(path))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await press(pilot, "e", "e")
        assert app.position == 2
        await press(pilot, "E")
        assert app.position == 1


async def test_semicolon_and_comma_go_to_the_next_and_previous_search_match(path):
    app = KbdebugApp(replay=Replay.open(path))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await press(pilot, "semicolon")
        assert "no search yet" in header(app)
        await press(pilot, "slash", *"wait_begin", "enter")
        first = app.position
        assert "; and , go to the next and previous" in header(app)
        await press(pilot, "semicolon")
        second = app.position
        assert second > first and "next match" in header(app)
        await press(pilot, "comma")
        assert app.position == first
