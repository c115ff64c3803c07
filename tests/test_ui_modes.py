"""One app, two modes: the single-run and the compare screen share the palette, the key bar,
the help's layout, the status messages and the findings breakpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_settle import settled
from rich.text import Text
from textual.command import CommandList, CommandPalette

from kbdebug.replay import FindingHit, Replay
from kbdebug.ui import KbdebugApp
from kbdebug.ui.app.keybar import KeyBar
from kbdebug.ui.compare.app import CompareApp
from kbdebug.ui.screens.help_screen import HelpScreen

TRACES = Path(__file__).resolve().parents[1] / "traces"


def single() -> KbdebugApp:
    return KbdebugApp(replay=Replay.open(TRACES / "flawed_prefetch.kbt"))


def compare() -> CompareApp:
    return CompareApp(
        Replay.open(TRACES / "flawed_prefetch.kbt"), Replay.open(TRACES / "decode_prefetch.kbt")
    )


MODES = {"single": (single, ""), "compare": (compare, "A: ")}


async def ready(pilot) -> None:
    await settled(pilot)


async def palette_options(pilot, query: str, first: str) -> list[str]:
    """Open ctrl+p, type ``query`` and return the prompts it lists once ``first`` leads."""
    await pilot.press("ctrl+p")
    assert CommandPalette.is_open(pilot.app)
    await pilot.press(*query)
    listed = pilot.app.screen.query(CommandList).only_one()
    options: list[str] = []
    for _ in range(100):  # the palette searches in a worker, the best match rises to the top
        await pilot.pause(0.02)
        options = [str(listed.get_option_at_index(k).prompt) for k in range(listed.option_count)]
        if options and first in options[0]:
            break
    return options


async def test_ctrl_p_in_compare_mode_lists_the_debuggers_actions_and_runs_them():
    app = compare()
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        options = await palette_options(pilot, "focus the other", "Focus the other run")
        assert "Focus the other run" in options[0], options
        await pilot.press("enter")
        await pilot.pause()
        assert app.side == "b", options
        await pilot.press("escape")  # back on the main screen if the palette stayed
        forward = "Step the focused run one event forward"
        step = await palette_options(pilot, "event forward", forward)
        assert forward in step[0], step
        await pilot.press("enter")
        await pilot.pause()
        assert app.replays["b"].position == 1


@pytest.mark.parametrize("mode", MODES)
async def test_the_key_bar_shows_the_palette_help_and_quit_at_80x24(mode):
    app = MODES[mode][0]()
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        bar = app.query_one(KeyBar).text
        assert len(bar) <= 80
        assert bar.rstrip().endswith("^p palette  ? help  q quit"), bar
        assert "s step" in bar


@pytest.mark.parametrize("mode", MODES)
async def test_question_mark_shows_the_same_help_layout_and_each_key_it_lists_acts(mode):
    # One app per mode for both: every key the help lists has an action in that mode, and
    # ? shows them in the same layout.
    app = MODES[mode][0]()
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        actions = [key.action for key in app.KEYS]
        for _, widget in app.help_panes():
            actions += [a for _, _, a in app.pane_keys(widget) if a.startswith("app.")]
        for action in actions:
            name = action.removeprefix("app.").split("(")[0]
            assert callable(getattr(app, f"action_{name}", None)), action

        await pilot.press("question_mark")
        await pilot.pause()
        assert type(app.screen) is HelpScreen
        text = str(app.screen.query_one("Static").render())
        # The mode's introduction, every key (the palette's too), each pane's own keys.
        assert text.startswith(Text.from_markup(app.HELP_INTRO).plain[:60])
        keys = dict(app.screen.keys)
        assert {"n", "s", "S", "e", "E", "c", "C", "w", "b", "B", "?", "q", "^p"} <= set(keys)
        assert "tab" in keys
        assert "\nPane " in text and "Move the highlighted row" in text
        assert text.rstrip().endswith("Esc, q or ? closes this.")


@pytest.mark.parametrize("mode", MODES)
async def test_the_same_action_says_the_same_in_both_modes(mode):
    make, run = MODES[mode]
    app = make()
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("E")
        assert app.status == f"{run}cannot step: at the start of the trace"
        await pilot.press("c")
        assert app.status == f"{run}no breakpoints: w breaks on stalled waits, b on the source line"
        await pilot.press("minus")
        assert app.status == "the timeline already shows the whole trace: + zooms in"
        await pilot.press("w")
        hits = len(app.stalled_wait.hits(app.replay))
        assert hits > 0
        assert app.status == f"{run}breaking on stalled tl.wait ({hits} in this trace): c continues"
        await pilot.press("w")
        assert app.status == f"{run}no longer breaking on stalled waits"
        await pilot.press("G")
        assert app.status.startswith(f"{run}at the end of the trace")


async def test_findings_breakpoints_in_compare_mode_get_each_runs_findings():
    app = compare()
    a, b = app.replays["a"], app.replays["b"]
    a.breakpoints.append(FindingHit())
    b.breakpoints.append(FindingHit())
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        found = app.run_findings
        assert found["a"], "the flawed run has findings"
        assert a.breakpoints[0].findings == tuple(found["a"])
        assert b.breakpoints[0].findings == tuple(found["b"])
        await pilot.press("c")
        first = min(e for f in found["a"] for e in f.events)
        assert a.position - 1 == first
        # B has no such call (the fix moved it): the status says so first, then A's stop.
        assert "A: stopped at finding" in app.status, app.status
