"""The first five minutes: panes found by number, a key bar that keeps ? and q, findings by
saving, the efficiency in the header, a source that fits, a sortable futures table."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_ui_app import header, lines, opened
from test_ui_traces import fresh
from textual.content import Content

from kbdebug.analysis import pe_bounds
from kbdebug.replay import SourceLine
from kbdebug.ui import KbdebugApp
from kbdebug.ui.app.keybar import KeyBar
from kbdebug.ui.panes.events_view import EventsView
from kbdebug.ui.panes.findings_view import FindingsView
from kbdebug.ui.panes.futures_table import FuturesTable
from kbdebug.ui.panes.mesh_view import MeshView
from kbdebug.ui.panes.source_view import SourceView
from kbdebug.ui.panes.timeline import LEGENDS, Timeline
from kbdebug.ui.screens.help_screen import HelpScreen

SIZE = (160, 48)


def plain(content) -> str:
    return content.plain if hasattr(content, "plain") else Content.from_markup(content).plain


def title(widget) -> str:
    return plain(widget.border_title)


def tab_labels(app) -> list[str]:
    return [plain(tab.label) for tab in app.query("ContentTab")]


# --- panes by number -------------------------------------------------------------------


async def test_number_keys_focus_their_panes_and_mark_only_that_title():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        for key, pane in (("1", Timeline), ("3", FuturesTable), ("4", EventsView), ("6", MeshView)):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.focused, pane)
            titles = [title(app.query_one(w)) for w in (Timeline, SourceView, FuturesTable)]
            titles += tab_labels(app)
            # Every pane shows its number; only the focused one has the ▶ mark.
            assert [t.lstrip("▶")[:3] for t in titles] == ["[1]", "[2]", "[3]", "[4]", "[5]", "[6]"]
            assert [t[:4] for t in titles if t.startswith("▶")] == [f"▶[{key}]"]


async def test_5_opens_the_findings_tab_biggest_saving_first():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("5")
        await pilot.pause()
        view = app.query_one(FindingsView)
        assert app.focused is view
        assert tab_labels(app)[1] == "▶[5] Findings (2)"
        savings = [f.saving for f in view.findings]
        assert savings == sorted(savings, reverse=True) and savings[0] > 0
        assert "saves ~" in lines(view)[0]


async def test_key_bar_at_80x24_keeps_help_and_quit_and_leads_with_the_pane_keys():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=(80, 24)) as pilot:
        await opened(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        bar = app.query_one(KeyBar).text
        assert len(bar) <= 80
        assert "? help" in bar and "q quit" in bar
        assert bar.lstrip().startswith("⏎ pick  o sort")
        await pilot.press("1")
        await pilot.pause()
        assert app.query_one(KeyBar).text.lstrip().startswith("←→ pan  +- zoom")
        # The findings pane itself says the highlighted finding's message and fix, whole.
        await pilot.press("5", "down")
        await pilot.pause()
        view = app.query_one(FindingsView)
        second = view.findings[1]
        shown = "".join("".join(lines(view)).split())
        assert "".join(second.message.split()) in shown
        assert "".join(("→ " + second.suggestion).split()) in shown
        assert "…" not in "".join(lines(view)[view.size.height - view.detail_rows :])


async def test_clicking_a_key_in_the_key_bar_runs_it():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=(80, 24)) as pilot:
        await opened(app, pilot)
        await pilot.click(KeyBar, offset=(app.query_one(KeyBar).text.index("s step"), 0))
        assert app.position == 1
        await pilot.click(KeyBar, offset=(app.query_one(KeyBar).text.index("? help"), 0))
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)


async def test_help_and_palette_list_every_pane_and_its_keys():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        palette = {title: action for title, _, action in app.palette_actions()}
        for n, name in enumerate(("timeline", "source", "futures", "events", "findings"), 1):
            assert any(t.startswith(f"Focus pane {n}: the {name}") for t in palette)
        sort = next(a for t, a in palette.items() if t.startswith("Futures pane [3]: Sort"))
        await app.run_key_action(sort)
        assert app.query_one(FuturesTable).sort == "stall"
        await pilot.press("question_mark")
        await pilot.pause()
        help_text = str(app.screen.query_one("Static").render())
        assert isinstance(app.screen, HelpScreen)
        for pane in ("[1] timeline", "[2] source", "[3] futures", "[4] events", "[5] findings"):
            assert f"Pane {pane}" in help_text
        assert "Sort by id, stall or issue" in help_text


# --- header and timeline ---------------------------------------------------------------


async def test_header_shows_the_pe_efficiency_against_its_bound():
    replay = fresh("flawed_prefetch")
    bound = pe_bounds(replay)[0]
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        assert f"{bound.efficiency:.0%} efficient (bound {bound.bound:,} cycles)" in header(app)
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=(80, 24)) as pilot:
        await opened(app, pilot)
        await pilot.press("w")
        first = header(app).splitlines()[0]
        assert f"{bound.efficiency:.0%} eff" in first and "● stalled waits" in first


@pytest.mark.parametrize("width", [60, 80, 100, 120, 160])
async def test_header_keeps_one_format_that_shortens_at_narrow_widths(width):
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=(width, 24)) as pilot:
        await opened(app, pilot)
        await pilot.press("w", "c")
        first = header(app).splitlines()[0]
        assert len(first) <= width
        # The same words at every width, never a second, cryptic format (t=0 #-/3376).
        assert "t=" not in first and "/3" not in first.split("cycle")[0]
        assert "cycle 4" in first and "event #6" in first
        if width >= 80:
            assert first.lstrip().startswith(("kbdebug flawed_prefetch.kbt", "flawed_prefetch"))
            assert "PE 0 stalled" in first and "32% eff" in first and "stalled waits" in first


async def test_the_cursor_marker_never_overwrites_an_axis_label():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        timeline = app.query_one(Timeline)
        axis = lines(timeline)[0][timeline.label_width :]
        inside = {col for col, c in enumerate(axis) if c.isdigit()}
        # An event whose cycle is drawn in the middle of a label's digits.
        times = replay.index.columns.time
        event = next(i for i in range(replay.n_events) if timeline.column_of(times[i]) in inside)
        app.move_to(event + 1)
        await pilot.pause()
        axis = lines(timeline)[0][timeline.label_width :]
        assert "▼" in axis
        for token in axis.split():
            assert re.fullmatch(r"[╵▼](\d+(\.\d+)?[kMGT]?)?", token), token


# --- source ----------------------------------------------------------------------------


async def test_source_opens_at_the_kernel_def_in_whole_lines_and_the_legend_shows_at_160():
    # The legend half of this test: shown at 160x48, left out at 80x24 (see the W test).
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        assert lines(app.query_one(Timeline))[-1].strip() == LEGENDS[0]
        source = app.query_one(SourceView)
        file, line = source.cursor_line
        assert replay.index.sources[file].split("\n")[line - 1].startswith("def decode_flawed")
        shown = "\n".join(lines(source))
        assert 'fk = tl.load_async(k_ptr + j * tile_bytes, (tile, head_dim), "f16")' in shown


async def test_source_scrolls_sideways_under_a_fixed_gutter():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=(80, 24)) as pilot:
        await opened(app, pilot)
        await pilot.press("2")
        source = app.query_one(SourceView)
        before = lines(source)[0]
        assert "def decode_flawed_prefetch(tl, q" in before
        await pilot.press("right", "right")
        after = lines(source)[0]
        assert source.code_left == 16
        assert after[: before.index("│") + 1] == before[: before.index("│") + 1]
        assert "def decode" not in after and "prefetch(tl, q_ptr" in after


async def test_no_legend_at_80x24_and_W_gives_the_source_the_whole_width_3_the_futures():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=(80, 24)) as pilot:
        await opened(app, pilot)
        # Too short for the timeline's legend (shown at 160x48: see the source test).
        assert "running" not in "".join(lines(app.query_one(Timeline)))
        source, table = app.query_one(SourceView), app.query_one(FuturesTable)
        narrow = source.size.width
        await pilot.press("2", "W")
        await pilot.pause()
        assert not table.display and source.size.width == 80 > narrow
        assert "k_ptr, v_ptr, o_ptr, n_tiles," in lines(source)[0]
        await pilot.press("3")
        await pilot.pause()
        assert table.display and app.focused is table and source.size.width == narrow


async def test_b_on_a_line_without_a_tl_call_moves_to_the_next_line_with_one():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        source = app.query_one(SourceView)
        file, line = source.cursor_line
        source.cursor = line  # the docstring under the def: no tl call
        await pilot.press("b")
        assert [(bp.file, bp.line) for bp in replay.breakpoints] == [(file, 81)]
        assert "no tl call on attention.py:78: breakpoint moved to attention.py:81" in header(app)
        source.cursor = 200  # past the kernel's last tl call
        await pilot.press("b")
        assert [(bp.file, bp.line) for bp in replay.breakpoints] == [(file, 81)]
        assert "no breakpoint set" in header(app)
        assert all(isinstance(bp, SourceLine) for bp in replay.breakpoints)


# --- futures ---------------------------------------------------------------------------


async def test_futures_show_their_line_and_no_time_before_the_cursor_reaches_it():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        table = app.query_one(FuturesTable)
        head, first, second = lines(table)[:3]
        columns = head.split()
        assert columns[:5] == ["future", "op", "line", "issued", "done"]
        # At the start nothing is issued: a line number, a stall total, no times.
        assert first.split() == ["0", "load", "81", "543", "not", "issued"]
        assert second.split() == ["1", "load_async", "85", "842", "not", "issued"]
        await pilot.press("w", "c")  # future 0's wait: issued, not done yet
        assert lines(table)[1].split() == ["0", "load", "81", "0", "543", "waiting"]
        await pilot.press("c")
        assert lines(table)[1].split() == ["0", "load", "81", "0", "547", "543", "resolved"]


async def test_o_cycles_the_futures_order_by_stall_issue_and_id():
    replay = fresh("prefill")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("3", "a", "o")  # every PE's futures, by stall
        table = app.query_one(FuturesTable)
        f, k = replay.index.futures, replay.index.commands
        assert table.sort == "stall" and "futures of every PE by stall" in title(table)
        stalls = f.stall[table.order]
        assert (np.diff(stalls) <= 0).all() and stalls[0] == f.stall.max()
        assert "stall▼" in lines(table)[0]
        shown = int(lines(table)[1].split()[0])
        assert f.stall[shown] == f.stall.max()
        await pilot.press("down")
        assert app.selected_future == int(table.order[1])
        await pilot.press("o")
        issued = k.issue[f.cmd[table.order]]
        assert table.sort == "issue" and (np.diff(issued) >= 0).all()
        # The selected future stays selected, its row follows it.
        assert table.cursor == int(table.rank[app.selected_future])
        await pilot.press("o")
        assert table.sort == "id" and table.order.tolist() == list(range(len(f.cmd)))


async def test_the_source_keeps_the_stopped_line_in_view_when_the_findings_take_its_rows():
    # At 120x36 (the README picture) the findings tab takes rows from the source pane:
    # the line the PE stopped at must stay on screen (it was scrolled out, the ▶ gone).
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=(120, 36)) as pilot:
        await opened(app, pilot)
        await pilot.press("w", "c", "c")
        await pilot.pause()
        source = app.query_one(SourceView)
        line = source.current_line[1]
        await pilot.press("5")
        await pilot.pause()
        shown = lines(source)
        assert any("▶" in row and row.lstrip().startswith(str(line)) for row in shown), shown
