"""What a kernel author ran into: keys that did nothing, dimmed text that was bright,
figures that all read 6.5M, deadlocked waits that stalled "0 cycles", a breakpoint list
that hid its own syntax."""

from __future__ import annotations

import pytest
from test_ui_app import SIZE, current_event, header, lines, opened
from test_ui_traces import fresh
from textual.widgets import Label, OptionList

from kbdebug.analysis import Analysis
from kbdebug.replay import SourceLine, StalledWait
from kbdebug.ui import KbdebugApp
from kbdebug.ui.panes.findings_view import FindingsView
from kbdebug.ui.panes.futures_table import FuturesTable
from kbdebug.ui.panes.source_view import SourceView
from kbdebug.ui.panes.styles import component_style
from kbdebug.ui.panes.timeline import tick_label
from kbdebug.ui.queries import cycles
from kbdebug.ui.screens.breakpoint_dialog import BreakpointDialog

# --- keys that do nothing say why ------------------------------------------------------


async def test_a_key_that_does_not_apply_says_why_and_keys_typed_into_a_dialog_are_not():
    # One app for six keys, none of which moves the position. The dialog comes first: its
    # x must leave the status as it was, not say what the fifth key's x says.
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        status = app.status
        await pilot.press("B", "x", "escape")
        assert app.status == status

        for key, words in [
            ("f", "no future selected"),
            ("z", "no future selected"),
            ("apostrophe", "no mark"),
            ("right_square_bracket", "only one PE"),
            ("x", "'x' is not a key here"),
        ]:
            await pilot.press(key)
            assert app.position == 0, key
            assert words in header(app), (key, header(app))


async def test_c_with_only_disabled_breakpoints_says_they_are_disabled():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        replay.breakpoints.append(SourceLine(file=None, line=86, enabled=False))
        await pilot.press("c")
        assert app.position == 0
        assert "no enabled breakpoints (1 disabled)" in header(app)


# --- the status line says where a move landed ------------------------------------------


async def test_s_names_the_tl_call_it_stopped_at():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("s", "s")
        assert "PE 0 tl.load future 0" in header(app)
        await pilot.press("s")
        # Future 0's wait is the blocking tl.load's own, not a tl.wait.
        assert "blocking tl.load future 0" in header(app) and "stalls 543 cycles" in header(app)
        assert "tl.wait" not in header(app)


async def test_a_cycle_seek_says_which_event_it_landed_on():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("colon", *"t5000", "enter")
        at = int(replay.index.columns.time[current_event(app)])
        assert f"the last event at or before it is #{current_event(app)}, at cycle {at:,}" in (
            header(app)
        )


async def test_a_deadlocked_wait_stalls_forever_not_zero_cycles():
    replay = fresh("deadlock")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("G", "w", "C")
        assert "waits forever (deadlock)" in header(app)
        assert "waits 0 cycles" not in header(app)
        future = app.selected_future
        rows = [line.split() for line in lines(app.query_one(FuturesTable))[1:] if line.strip()]
        row = next(r for r in rows if r[0] == str(future))
        assert "∞" in row
        # Its findings pane does not call a run that never ended free of serialisation.
        view = app.query_one(FindingsView)
        assert not view.findings
        assert view.note == "no findings in what ran: the run did not complete"


# --- figures that tell things apart ----------------------------------------------------


def test_timeline_ticks_keep_the_decimals_that_tell_them_apart():
    assert tick_label(20000, 10000) == "20000"
    assert tick_label(2_000_000, 1_000_000) == "2M"
    assert tick_label(2_500_000, 500_000) == "2.5M"
    labels = [tick_label(6_499_000 + k * 200, 200) for k in range(5)]
    assert len(set(labels)) == 5
    assert tick_label(6_400_000, 100_000) == "6.4M"


def test_a_seven_column_cell_holds_a_seven_digit_cycle():
    assert cycles(6_499_896, 7) == "6499896"
    assert cycles(6_499_896) == "6.5M"


async def test_muted_text_is_dimmer_than_plain_text():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        table = app.query_one(FuturesTable)
        plain = table.base_style.color.get_truecolor()
        muted = component_style(table, "rowview--dim").color.get_truecolor()
        background = table.base_style.bgcolor.get_truecolor()

        def contrast(color) -> int:
            return sum(abs(a - b) for a, b in zip(color, background, strict=True))

        assert contrast(muted) < contrast(plain)


# --- empty panes -----------------------------------------------------------------------


async def test_a_trace_without_futures_says_so_and_selects_none():
    app = KbdebugApp(replay=fresh("gemm_composite"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        table = app.query_one(FuturesTable)
        assert table.row_count() == 0
        assert "no futures in this trace" in " ".join(lines(table))
        table.focus()
        await pilot.press("down", "end")
        assert app.selected_future == -1


# --- the breakpoint list ---------------------------------------------------------------


async def test_breakpoint_list_shows_its_whole_syntax_and_when_it_is_empty():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("B")
        dialog = app.screen
        assert isinstance(dialog, BreakpointDialog)
        shown = " ".join(str(label.render()) for label in dialog.query(Label))
        for part in ("[pe P]", "[PHASE]", "[RULE]"):
            assert part in shown
        assert dialog.query_one("#empty").display
        # The list has the keyboard, empty or not: the keys line says what works there.
        assert "a add" in str(dialog.query_one("#keys", Label).render())
        await pilot.press(*"wait >= 500")
        assert "Enter adds" in str(dialog.query_one("#keys", Label).render())
        await pilot.press("enter")
        assert isinstance(app.replay.breakpoints[0], StalledWait)
        assert not dialog.query_one("#empty").display
        assert isinstance(app.focused, OptionList)
        assert "d remove" in str(dialog.query_one("#keys", Label).render())
        await pilot.press("d")
        assert app.replay.breakpoints == []
        assert dialog.query_one("#empty").display
        await pilot.press("escape")
        assert "no breakpoints left" in header(app)


@pytest.mark.parametrize("existing", [False, True])
async def test_a_then_a_condition_adds_it_with_or_without_breakpoints(existing):
    replay = fresh("flawed_prefetch")
    if existing:
        replay.breakpoints.append(SourceLine(file=None, line=86))
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("B")
        assert isinstance(app.focused, OptionList)
        await pilot.press("a", *"wait >= 840", "enter")
        assert "not a breakpoint" not in str(app.screen.query_one("#error").render())
        added = replay.breakpoints[-1]
        assert isinstance(added, StalledWait) and added.min_stall == 840


# --- findings --------------------------------------------------------------------------


async def test_enter_on_a_finding_shows_its_line_in_the_source():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        for finding in Analysis(replay).findings:
            app.jump_to_finding(finding)
            await pilot.pause()
            assert app.query_one(SourceView).current_line == (finding.loc.file, finding.loc.line)


# --- the timeline's limits -------------------------------------------------------------


async def test_zoom_and_pan_at_their_limits_say_so_and_then_stop_saying_it():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("minus")
        assert "already shows the whole trace" in header(app)
        await pilot.press("less_than_sign")
        assert "+ zooms in" in header(app)
        await pilot.press("plus", "less_than_sign")
        assert "at the start" in header(app)
        await pilot.press("greater_than_sign")
        assert "the timeline shows cycles" in header(app)
        await pilot.press(*["plus"] * 20)
        assert "zoomed in as far as it goes" in header(app)


async def test_picking_a_future_in_the_table_says_what_it_is_and_what_follows_it():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("f")
        assert "no future selected" in header(app)
        app.query_one(FuturesTable).focus()
        await pilot.press("down")
        assert "future 1 (load_async K[0:64, :] on PE 0 at attention.py:85)" in header(app)
        assert "f/F walk its lifecycle" in header(app)
