"""The terminal app driven by keys: every binding, the stalled-wait flow, loading and banners."""

from __future__ import annotations

import numpy as np
import pytest
from app_settle import settled
from test_ui_traces import fresh, trace
from textual.command import CommandList, CommandPalette

from emulator.trace.schema import Kind
from kbdebug.replay import SourceLine, StalledWait
from kbdebug.ui import KbdebugApp
from kbdebug.ui.app.header import StatusHeader
from kbdebug.ui.app.loading import LoadingPanel
from kbdebug.ui.panes.events_view import EventsView
from kbdebug.ui.panes.findings_view import FindingsView
from kbdebug.ui.panes.futures_table import FuturesTable
from kbdebug.ui.panes.lanes import future_span
from kbdebug.ui.panes.source_view import SourceView
from kbdebug.ui.panes.timeline import Timeline
from kbdebug.ui.screens.breakpoint_dialog import BreakpointDialog
from kbdebug.ui.screens.help_screen import HelpScreen
from kbdebug.ui.screens.prompt import PromptScreen

SIZE = (160, 48)


def lines(widget) -> list[str]:
    """What a Line API widget shows, one string per screen line."""
    return [widget.render_line(y).text for y in range(widget.size.height)]


def header(app: KbdebugApp) -> str:
    return app.query_one(StatusHeader).render().plain


def current_event(app: KbdebugApp) -> int:
    return app.position - 1


async def opened(app: KbdebugApp, pilot) -> None:
    """Wait until the trace is open and the findings are in."""
    await settled(pilot)


def stalled_waits(replay) -> list[int]:
    """Event indices of the WAIT_BEGINs that stall, in order."""
    c, f = replay.index.columns, replay.index.futures
    begins = np.flatnonzero(c.kind == Kind.WAIT_BEGIN)
    return [int(i) for i in begins if f.stall[c.fut[i]] > 0]


# --- the central flow ------------------------------------------------------------------


async def test_w_then_c_stops_at_a_stalled_wait_and_marks_its_line():
    replay = fresh("flawed_prefetch")
    waits = stalled_waits(replay)
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("w", "c")
        first = waits[0]
        assert current_event(app) == first
        future = int(replay.index.columns.fut[first])
        loc = replay.index.loc(int(replay.index.columns.loc[first]))
        text = header(app)
        assert "stopped" in text and "stalled" in text
        assert f"future {future}" in text
        assert f"attention.py:{loc.line}" in text
        source = app.query_one(SourceView)
        assert source.current_line == (loc.file, loc.line)
        marked = [line for line in lines(source) if "▶" in line]
        assert len(marked) == 1 and marked[0].lstrip().startswith(str(loc.line))
        assert app.selected_future == future

        await pilot.press("c")
        assert current_event(app) == waits[1]
        second = int(replay.index.columns.fut[waits[1]])
        assert f"future {second}" in header(app)
        loc = replay.index.loc(int(replay.index.columns.loc[waits[1]]))
        assert source.current_line[1] == loc.line

        await pilot.press("C")
        assert current_event(app) == first
        assert f"future {future}" in header(app)


async def test_c_runs_to_the_end_after_the_last_hit_and_C_comes_back():
    replay = fresh("flawed_prefetch")
    waits = stalled_waits(replay)
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("G", "w", "C")
        assert current_event(app) == waits[-1]
        await pilot.press("c")
        assert app.position == replay.n_events
        assert "no more breakpoint hits" in header(app)


async def test_keys_that_cannot_act_at_the_start_stay_there_and_say_why():
    # One app for four refusals, each leaving the position at the start for the next: c
    # without breakpoints, E at the start, f with no future selected, : to a bad target.
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("c")
        assert app.position == 0
        assert "no breakpoints" in header(app)

        await pilot.press("E")
        assert app.position == 0
        assert "cannot step" in header(app)

        assert app.selected_future < 0
        await pilot.press("f")
        assert app.position == 0
        assert "no future selected: Tab to the futures table" in header(app)

        await pilot.press("colon", *"xyz", "enter")
        assert app.position == 0
        assert "cannot go to" in header(app)
        await pilot.press("colon", *"99999999", "enter")
        assert app.position == 0
        assert "no event #99999999" in header(app)


async def test_w_twice_stops_breaking_on_stalled_waits():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("w")
        assert [type(bp) for bp in replay.breakpoints if bp.enabled] == [StalledWait]
        assert "stalled waits" in header(app)
        await pilot.press("w")
        assert not any(bp.enabled for bp in replay.breakpoints)


# --- stepping --------------------------------------------------------------------------


async def test_e_E_step_events_G_g_go_to_the_end_and_start_and_s_S_visit_tl_calls():
    # One app: e/E step raw events, G goes to the end and g back to the start, from which
    # s/S visit the focused PE's tl calls as from a fresh start.
    replay = fresh("flawed_prefetch")
    c = replay.index.columns
    # The kernel's start is a stop too: s from the start enters the kernel first.
    stops = (c.kind == Kind.ISSUE) | (c.kind == Kind.WAIT_BEGIN) | (c.kind == Kind.KERNEL_START)
    calls = np.flatnonzero(stops)
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("e", "e", "e")
        assert app.position == 3
        assert "event #2 of" in header(app)
        await pilot.press("E")
        assert app.position == 2
        events = app.query_one(EventsView)
        assert any(line.startswith("▶") and "#1 " in line for line in lines(events))

        await pilot.press("G")
        assert app.position == replay.n_events
        assert "end of the trace" in header(app)
        await pilot.press("g")
        assert app.position == 0

        await pilot.press("s", "s", "s")
        assert current_event(app) == calls[2]
        await pilot.press("S")
        assert current_event(app) == calls[1]


async def test_f_and_F_walk_the_selected_futures_lifecycle():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("w", "c", "c")
        future = app.selected_future
        lifecycle = replay.future_events(future)
        here = current_event(app)
        later = [e for e in lifecycle if e > here]
        await pilot.press("f")
        assert current_event(app) == later[0]
        assert app.selected_future == future
        assert f"future {future}" in header(app)
        await pilot.press("F", "F")
        earlier = [e for e in lifecycle if e < here]
        assert current_event(app) == earlier[-1]


# --- going to places -------------------------------------------------------------------


async def test_colon_goes_to_an_event_number_or_a_cycle():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("colon")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press(*"1234", "enter")
        assert current_event(app) == 1234
        await pilot.press("colon", *"t5000", "enter")
        time = replay.index.columns.time
        assert time[current_event(app)] <= 5000 < time[app.position]


async def test_slash_searches_events_forward():
    replay = fresh("flawed_prefetch")
    c = replay.index.columns
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("slash", *"wait_end", "enter")
        first = int(np.flatnonzero(c.kind == Kind.WAIT_END)[0])
        assert current_event(app) == first
        await pilot.press("slash", "enter")
        assert current_event(app) == int(np.flatnonzero(c.kind == Kind.WAIT_END)[1])
        await pilot.press("slash", "ctrl+a", *"nosuchthing", "enter")
        assert "no event matches" in header(app)


async def test_m_marks_and_apostrophe_jumps_back_and_forth():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("e", "e", "m", "G")
        end = app.position
        await pilot.press("apostrophe")
        assert app.position == 2
        await pilot.press("apostrophe")
        assert app.position == end


async def test_brackets_focus_the_next_and_previous_pe():
    app = KbdebugApp(replay=fresh("prefill"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert app.focused_pe == 2
        assert app.query_one(Timeline).focused_pe == 2
        assert "PE 2/4" in header(app)
        await pilot.press("left_square_bracket", "left_square_bracket", "left_square_bracket")
        assert app.focused_pe == 3


async def test_a_breakpoint_stop_focuses_the_pe_that_hit_it():
    replay = fresh("prefill")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("w")
        for _ in range(6):
            await pilot.press("c")
            assert app.focused_pe == int(replay.index.columns.pe[current_event(app)])


# --- breakpoints -----------------------------------------------------------------------


async def test_b_toggles_a_breakpoint_on_the_source_line_and_c_stops_there():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("w", "c", "c")  # on the wait of attention.py:86
        source = app.query_one(SourceView)
        file, line = source.cursor_line
        await pilot.press("b", "w", "g")
        assert [(bp.file, bp.line) for bp in replay.breakpoints if isinstance(bp, SourceLine)] == [
            (file, line)
        ]
        assert any("●" in row and row.lstrip().startswith(str(line)) for row in lines(source))
        await pilot.press("c")
        assert replay.index.loc(int(replay.index.columns.loc[current_event(app)])).line == line
        assert f":{line}" in header(app)
        await pilot.press("b")
        assert not any(isinstance(bp, SourceLine) for bp in replay.breakpoints)


async def test_B_adds_a_minimum_stall_condition_and_continue_honours_it():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("B")
        assert isinstance(app.screen, BreakpointDialog)
        await pilot.press(*"wait >= 800", "enter", "escape")
        assert not isinstance(app.screen, BreakpointDialog)
        (bp,) = replay.breakpoints
        assert isinstance(bp, StalledWait) and bp.min_stall == 800
        await pilot.press("c")
        fut = int(replay.index.columns.fut[current_event(app)])
        assert replay.index.futures.stall[fut] >= 800
        assert "waits >= 800" in header(app)


async def test_B_space_disables_and_d_removes_a_breakpoint():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("w", "B", "space")
        assert not replay.breakpoints[0].enabled
        await pilot.press("d", "escape")
        assert replay.breakpoints == []


async def test_B_rejects_nonsense_and_says_why():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("B", *"frobnicate", "enter")
        assert replay.breakpoints == []
        assert "not a breakpoint" in str(app.screen.query_one("#error").render())


# --- the timeline ----------------------------------------------------------------------


async def test_plus_and_minus_zoom_the_timeline_and_angle_brackets_pan():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        timeline = app.query_one(Timeline)
        full = timeline.view_span
        await pilot.press("plus", "plus")
        assert timeline.view_span == pytest.approx(full / 4)
        start = timeline.view_start
        await pilot.press("greater_than_sign")
        assert timeline.view_start == pytest.approx(start + full / 16)
        await pilot.press("less_than_sign")
        assert timeline.view_start == pytest.approx(start)
        await pilot.press("minus", "minus", "minus")
        assert timeline.view_span == full


async def test_z_zooms_to_the_selected_futures_span_and_Z_to_the_whole_trace():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        timeline = app.query_one(Timeline)
        full = timeline.view_span
        await pilot.press("w", "c", "c", "z")
        _, issue, resolve, *_ = future_span(replay, app.selected_future)
        assert timeline.view_start < issue and resolve < timeline.view_start + timeline.view_span
        assert timeline.view_span == pytest.approx(3 * (resolve - issue))
        await pilot.press("Z")
        assert (timeline.view_start, timeline.view_span) == (0, full)


async def test_timeline_follows_the_cursor_when_zoomed_in():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press(*["plus"] * 5, "G")
        timeline = app.query_one(Timeline)
        assert timeline.view_start <= replay.time < timeline.view_start + timeline.view_span
        assert "▼" in lines(timeline)[0]


async def test_clicking_the_timeline_seeks_to_that_cycle():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        timeline = app.query_one(Timeline)
        column = timeline.plot_width // 2
        await pilot.click(Timeline, offset=(timeline.label_width + column, 2))
        cycle = timeline.cycle_at(column)
        time = replay.index.columns.time
        assert app.position > 0
        assert time[current_event(app)] <= cycle
        assert app.position == replay.n_events or time[app.position] > cycle


async def test_timeline_shows_a_lane_per_channel_in_use_and_the_kernel_and_scratch():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        timeline = lines(app.query_one(Timeline))[1:7]
        labels = [line[:12].strip() for line in timeline]
        assert labels == ["PE0 kernel", "rd0", "wr0", "gemm", "math", "scratch"]
        # Each label gives its level over the window: busy shares, scratch peak/capacity.
        levels = [line[12:20].strip() for line in timeline]
        assert levels[:5] == ["25%", "30%", "<1%", "22%", "2%"]
        assert levels[5] == "34K/1M"


# --- the panes -------------------------------------------------------------------------


async def test_choosing_a_future_in_the_table_highlights_it_on_the_timeline():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        table = app.query_one(FuturesTable)
        table.focus()
        await pilot.press("down", "down", "down")
        assert app.selected_future == 3
        assert app.query_one(Timeline).selected_future == 3
        assert any(line.split()[0] == "3" for line in lines(table)[1:] if line.strip())


async def test_futures_table_shows_each_futures_phase_at_the_cursor():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("w", "c")
        table = lines(app.query_one(FuturesTable))
        assert table[0].split()[0] == "future" and table[0].split()[-1] == "phase"
        row = next(line for line in table[1:] if line.split()[0] == str(app.selected_future))
        assert row.split()[-1] == "waiting"
        assert table[-1].rstrip().endswith("not issued")


async def test_enter_on_an_event_goes_there():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        events = app.query_one(EventsView)
        events.focus()
        await pilot.press("down", "down", "down", "enter")
        assert current_event(app) == 3


async def test_enter_on_a_finding_jumps_to_its_first_event_on_its_line():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        view = app.query_one(FindingsView)
        findings = view.findings
        assert len(findings) >= 2, "the flawed prefetch has a finding per serialised wait"
        app.query_one("#tabs").active = "findings-tab"
        await pilot.pause()
        view.focus()
        await pilot.press("down")
        shown = " ".join(" ".join(lines(view)).split())
        assert findings[1].message.split()[0] in shown and "→" in shown
        await pilot.press("enter")
        finding = findings[1]
        assert current_event(app) in finding.events
        # The first of its events on the line the finding names, so the source shows it.
        assert app.query_one(SourceView).current_line == (finding.loc.file, finding.loc.line)
        earlier = [e for e in finding.events if e < current_event(app)]
        c = replay.index.columns
        assert all(replay.index.loc(int(c.loc[e])) != finding.loc for e in earlier)
        assert finding.rule in header(app)


async def test_question_mark_lists_every_key_and_closes():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = dict(app.screen.keys)
        for key in ("s", "S", "n", "N", "o", "O", "t", "T", "e", "E", ";", ",", "c", "C", "w",
                    "b", "B", "f", "F", "g", "G", ":", "[", "]", "+", "-", "z", "Z", "<", ">",
                    "/", "m", "'", "?", "q", "^p"):  # fmt: skip
            assert key in keys, key
        await pilot.press("s")  # keys do not reach the debugger under the help
        assert app.position == 0
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_ctrl_p_palette_runs_debugger_actions_by_name():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("ctrl+p")
        assert CommandPalette.is_open(app)
        await pilot.press(*"end")
        for _ in range(50):  # the palette searches in a worker
            await pilot.pause(0.02)
            if app.screen.query(CommandList).only_one().option_count:
                break
        await pilot.press("enter")
        await pilot.pause()
        assert app.position == replay.n_events


async def test_q_quits():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


# --- opening ---------------------------------------------------------------------------


async def test_a_trace_given_by_path_loads_in_a_worker_behind_a_progress_bar():
    app = KbdebugApp(path=trace("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        assert app.query(LoadingPanel)
        await opened(app, pilot)
        assert not app.query(LoadingPanel)
        assert app.replay is not None and app.replay.n_events > 0
        await pilot.press("w", "c")
        assert "stopped at a blocking tl.load stalled" in header(app)


async def test_a_stop_at_a_blocking_loads_wait_says_it_is_a_blocking_tl_load():
    # The first stalled wait of the bundled trace is a blocking tl.load's own: its line
    # has no tl.wait, and the status must not say there is one.
    replay = fresh("flawed_prefetch")
    index = replay.index
    first = stalled_waits(replay)[0]
    future = int(index.columns.fut[first])
    assert index.string(int(index.commands.op[int(index.futures.cmd[future])])) == "load"
    stall = int(index.futures.stall[future])
    loc = index.loc(int(index.columns.loc[first]))
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("w", "c")
        assert app.status.startswith(
            f"stopped at a blocking tl.load stalled {stall:,} cycles "
            f"at attention.py:{loc.line}: future {future}"
        )
        assert len(app.status) <= 79  # whole on an 80-column screen
        assert "tl.wait" not in app.status
        # A tl.wait's stop still says tl.wait.
        await press_until_wait(app, pilot)
        assert app.status.startswith("stopped at a stalled tl.wait at attention.py:")


async def press_until_wait(app: KbdebugApp, pilot) -> None:
    """Continue until the stop is at a tl.wait (a wait that is not a blocking load's)."""
    index = app.replay.index
    for _ in range(50):
        await pilot.press("c")
        future = int(index.columns.fut[current_event(app)])
        if index.string(int(index.commands.op[int(index.futures.cmd[future])])) != "load":
            return
    raise AssertionError("no tl.wait stop within 50 continues")


async def test_a_bad_file_loaded_in_the_worker_exits_with_status_2(tmp_path):
    bad = tmp_path / "bad.kbt"
    bad.write_bytes(b"\x81\xa6format\xa3xyz")
    app = KbdebugApp(path=str(bad))
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(100):
            if app.return_code is not None:
                break
            await pilot.pause(0.01)
    assert app.return_code == 2
    assert app.load_error.startswith(str(bad))
    assert "\n" not in app.load_error


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("deadlock", ["deadlock on PEs 0, 1 at cycle", "PE 0 waits on", "test_ui_traces.py:"]),
        ("error", ["kernel error on PE 0:", "ValueError: boom"]),
        ("truncated", ["did not complete: the trace was cut off"]),
    ],
)
async def test_a_trace_that_did_not_end_well_opens_with_a_banner(name, words):
    app = KbdebugApp(replay=fresh(name))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        banner = str(app.query_one("#banner").render())
        for word in words:
            assert word in banner


async def test_a_good_trace_has_no_banner():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        assert not app.query("#banner")


async def test_small_terminal_survives_every_key():
    app = KbdebugApp(replay=fresh("ring_attention"))
    async with app.run_test(size=(40, 12)) as pilot:
        await opened(app, pilot)
        await pilot.press("w", "c", "c", "C", "e", "E", "s", "S", "n", "N", "f", "F", "plus")
        await pilot.press("o", "O", "t", "T", "minus")
        await pilot.press("right_square_bracket", "greater_than_sign", "less_than_sign", "G", "g")
        assert app.is_running
        assert "stalled" in header(app) or app.position >= 0
