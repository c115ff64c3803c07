"""The compare app driven by keys: the linked cursor (same call, same occurrence; "not in B"
for a call the fix dropped), breakpoints in the focused run, flipping runs, one time axis,
Enter on a finding, the narrow layout, and trace strings shown as text."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from app_settle import settled
from rich.style import Style
from test_compare import KERNELS, edited_runs, line_of  # noqa: F401 - a shared fixture
from textual.worker import WorkerCancelled

from emulator.trace.schema import Kind
from kbdebug.replay import Replay
from kbdebug.ui.compare.app import CompareApp
from kbdebug.ui.compare.findings import FindingGroupsView
from kbdebug.ui.compare.header import CompareHeader
from kbdebug.ui.compare.source import CompareSource, aligned_rows
from kbdebug.ui.queries import cycles

TRACES = Path(__file__).resolve().parents[1] / "traces"


@pytest.fixture
def app(edited_runs) -> CompareApp:  # noqa: F811
    return CompareApp(Replay.open(edited_runs[0]), Replay.open(edited_runs[1]))


def current_line(app: CompareApp, run: str) -> int | None:
    """The line of PE 0's latest tl call in ``run``, None before its first."""
    replay = app.replays[run]
    loc = replay.index.loc(replay.state.pes[0].loc)
    return None if loc is None else loc.line


def stalled_at(replay: Replay, file: str, line: int, pe: int = 0) -> int:
    """The cycles ``pe``'s waits on ``file``:``line`` stalled: their WAIT_END values."""
    index, c = replay.index, replay.index.columns
    total = 0
    for end in np.flatnonzero((c.kind == Kind.WAIT_END) & (c.pe == pe)).tolist():
        loc = index.loc(int(index.futures.wait_loc[int(c.fut[end])]))
        if loc is not None and (loc.file, loc.line) == (file, line):
            total += int(c.val[end])
    return total


async def ready(pilot) -> None:
    await settled(pilot)


async def press_until(pilot, key: str, done, limit: int = 200) -> None:
    for _ in range(limit):
        if done():
            return
        await pilot.press(key)
    raise AssertionError(f"pressed {key} {limit} times without getting there")


async def test_next_call_puts_b_on_the_same_call(app):
    wait_a, wait_b = line_of("before", "tl.wait(f)"), line_of("after", "tl.wait(fut)")
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        a, b = app.replays["a"], app.replays["b"]
        for k in range(3):
            await pilot.press("n")
            await press_until(pilot, "n", lambda: current_line(app, "a") == wait_a)
            # The k-th wait in A: B is on its k-th wait, the edited and moved line.
            assert current_line(app, "b") == wait_b
            assert app.comparison.other_call("a", a.position - 1) == b.position - 1
            assert app.comparison.call_key("a", a.position - 1).occurrence == k
        assert "B: PE 0 tl.wait on future" in app.status


async def test_a_call_the_fix_dropped_says_not_in_b_and_b_stays(app):
    dropped = line_of("before", "tl.max(k, axis=1)")
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await press_until(pilot, "n", lambda: current_line(app, "a") == dropped)
        b_there = app.replays["b"].position
        assert app.status.startswith("not in B") and "tl.max(k,axis=1)" in app.status
        assert not app.linked
        await pilot.press("e")  # still on the same call: B does not move
        assert app.replays["b"].position == b_there
        await pilot.press("n")  # the next call is in B again
        assert app.linked and app.replays["b"].position != b_there


async def test_stalled_wait_breakpoint_stops_in_the_focused_run_and_the_other_follows(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("w", "c")
        a, b = app.replays["a"], app.replays["b"]
        stopped = a.position - 1
        assert app.status.startswith("A: stopped")
        assert int(a.index.futures.stall[int(a.index.columns.fut[stopped])]) > 0
        assert b.position - 1 == app.comparison.other_call("a", stopped)
        assert not b.breakpoints  # the breakpoint is A's


async def test_a_stop_at_a_blocking_load_is_named_a_load_in_compare():
    app = CompareApp(
        Replay.open(TRACES / "decode_blocking.kbt"), Replay.open(TRACES / "decode_prefetch.kbt")
    )
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("w", "c")
        a_part = app.status.split("·")[0]
        assert a_part.startswith(
            "A: stopped at a blocking tl.load stalled 543 cycles at attention.py:"
        )
        assert "tl.wait" not in a_part


async def test_n_over_a_helper_shows_the_calling_line_in_compare():
    app = CompareApp(
        Replay.open(TRACES / "flawed_prefetch.kbt"), Replay.open(TRACES / "decode_prefetch.kbt")
    )
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press(*"nnn")  # the start, q's load (issue and wait: one line), the helper
        a = app.replays["a"]
        loc = a.index.loc(a.state.pes[0].loc)
        assert loc.caller is not None  # a tl call inside the helper...
        shown = app.query_one(CompareSource).current_line("a")
        assert shown == (loc.caller.file, loc.caller.line)  # ...shown on the calling line
        await pilot.press("s")
        assert app.query_one(CompareSource).current_line("a")[1] != loc.caller.line


async def test_flip_makes_the_keys_move_b_and_a_follow(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("x")
        assert app.side == "b"
        await press_until(pilot, "n", lambda: current_line(app, "b") == line_of("after", "fut)"))
        a, b = app.replays["a"], app.replays["b"]
        assert a.position - 1 == app.comparison.other_call("b", b.position - 1)
        assert current_line(app, "a") == line_of("before", "tl.wait(f)")


async def test_both_timelines_zoom_together_and_align_at_the_call(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("n", "n", "n", "n", "plus", "plus", "plus")
        ta, tb = app.timeline("a"), app.timeline("b")
        assert ta.view_span == tb.view_span < ta.shared_end
        assert ta.view_start == tb.view_start
        await pilot.press("a")
        shift = app.replays["b"].time - app.replays["a"].time
        assert tb.view_start - ta.view_start == pytest.approx(shift)
        await pilot.press("greater_than_sign")
        assert tb.view_start - ta.view_start == pytest.approx(shift)


async def test_enter_on_a_fixed_finding_goes_to_it_in_a(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("x")  # focused on B: the fixed finding is A's, so A gets focus
        view = app.query_one(FindingGroupsView)
        view.focus()
        await pilot.pause()
        await pilot.press("enter")
        fixed = app.comparison.findings.fixed[0]
        assert app.side == "a"
        assert app.replays["a"].position - 1 in fixed.events
        assert fixed.rule in app.status


async def test_narrow_screen_shows_one_run_and_x_flips_it(app):
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(pilot)
        assert app.timeline("a").display and not app.timeline("b").display
        await pilot.press("x")
        await pilot.pause()
        assert app.timeline("b").display and not app.timeline("a").display


async def test_trace_names_are_text_not_markup(tmp_path):
    hostile = tmp_path / "[bold red]x[-].kbt"
    shutil.copy(TRACES / "flawed_prefetch.kbt", hostile)
    app = CompareApp(Replay.open(hostile), Replay.open(TRACES / "decode_prefetch.kbt"))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        header = app.query_one(CompareHeader).render().plain
        assert "[bold red]x[-].kbt" in header
        assert "[bold red]x[-].kbt" in str(app.timeline("a").border_title)


async def test_paths_are_opened_in_a_worker_then_compared(edited_runs):  # noqa: F811
    app = CompareApp(*edited_runs)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("n")  # refused while loading: nothing to move yet
        await ready(pilot)
        await ready(pilot)
        assert app.comparison is not None and app.timeline("b").display
        await pilot.press("n", "n")
        assert app.replays["a"].position > 0


async def test_a_trace_that_fails_to_open_ends_the_app_with_one_line(tmp_path):
    bad = tmp_path / "bad.kbt"
    bad.write_bytes(b"\x93garbage that is no trace")
    app = CompareApp(str(TRACES / "flawed_prefetch.kbt"), str(bad))
    async with app.run_test(size=(80, 24)) as pilot:
        with contextlib.suppress(WorkerCancelled):  # the app exits as the worker ends
            await ready(pilot)
    assert app.load_error is not None and "\n" not in app.load_error
    assert app.return_code == 2


async def test_a_line_breakpoint_in_b_stops_b_and_a_follows(app):
    wait_a, wait_b = line_of("before", "tl.wait(f)"), line_of("after", "tl.wait(fut)")
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("x")
        source = app.query_one(CompareSource)
        source.cursor = source.row_of("b", wait_b)
        await pilot.press("b", "c", "c")
        a, b = app.replays["a"], app.replays["b"]
        assert app.status.startswith("B: stopped")
        assert current_line(app, "b") == wait_b and current_line(app, "a") == wait_a
        assert app.comparison.call_key("b", b.position - 1).occurrence == 1
        assert a.position - 1 == app.comparison.other_call("b", b.position - 1)
        assert not a.breakpoints


async def test_the_source_shows_both_runs_stalls_on_aligned_lines(app):
    wait_a, wait_b = line_of("before", "tl.wait(f)"), line_of("after", "tl.wait(fut)")
    first_load = line_of("after", "fut = tl.load_async(k_ptr,")
    dropped = line_of("before", "tl.max(k, axis=1)")
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        await pilot.press("w", "c")
        source = app.query_one(CompareSource)
        assert source.rows[source.cursor] == (wait_a, wait_b)
        assert (None, first_load) in source.rows and (dropped, None) in source.rows
        row = "".join(s.text for s in source.render_row(source.cursor, 160, Style()))
        shown = tuple(row.split("│")[0].split()[-3:])
        file_a, file_b = source.files
        stall_a = stalled_at(app.replays["a"], file_a, wait_a)
        stall_b = stalled_at(app.replays["b"], file_b, wait_b)
        assert stall_a > stall_b > 0  # the fix waits less on that line
        assert shown == (cycles(stall_a, 5), cycles(stall_b, 5), f"-{cycles(stall_a - stall_b, 5)}")


def test_aligned_rows_keep_both_versions_in_order():
    # A: 1 2 3 4; B: 1 x 2 4 y (3 deleted, x and y added, 4 moved up by one).
    rows = aligned_rows({1: 1, 2: 3, 4: 4}, 4, 5)
    assert rows == [(1, 1), (None, 2), (2, 3), (3, None), (4, 4), (None, 5)]


async def test_a_run_cut_short_is_named_before_any_figure(edited_runs, tmp_path):  # noqa: F811
    """A truncated B ends early and stalls little: the header says so, not just '-67 %'."""
    data = Path(edited_runs[1]).read_bytes()
    cut = tmp_path / "cut.kbt"
    cut.write_bytes(data[: len(data) * 2 // 3])
    app = CompareApp(Replay.open(edited_runs[0]), Replay.open(cut))
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        header = app.query_one(CompareHeader).render().plain
        assert "B did not complete: the trace was cut off" in header
        assert "A did not complete" not in header
        assert "(figures not comparable)" in header


async def test_b_on_a_line_without_a_tl_call_moves_to_the_next_one_as_gdb_does(app):
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot)
        replay = app.replays["a"]
        file = replay.index.loc(replay.index.commands.loc[0]).file
        loop, issue = line_of("before", "for j in range"), line_of("before", "tl.load_async")
        app.toggle_line_breakpoint(file, loop)
        await pilot.pause()
        assert [bp.line for bp in replay.breakpoints] == [issue]
        assert app.status.startswith(
            f"A: no tl call on decode.py:{loop}: breakpoint moved to decode.py:{issue}"
        )
        assert not app.replays["b"].breakpoints
        app.toggle_line_breakpoint(file, 10_000)
        await pilot.pause()
        assert "no breakpoint set" in app.status
        assert [bp.line for bp in replay.breakpoints] == [issue]


async def test_the_source_opens_on_the_kernels_def_and_5_focuses_the_findings():
    """As in one run: before the first tl call the source shows the kernel's def line
    (not line 1 of its file), and 5 gives the findings pane the keyboard."""
    app = CompareApp(
        Replay.open(TRACES / "flawed_prefetch.kbt"), Replay.open(TRACES / "decode_prefetch.kbt")
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        source = app.query_one(CompareSource)
        file, line = source.cursor_line
        assert file.endswith("attention.py")
        assert (
            source.replays["a"]
            .index.sources[file]
            .splitlines()[line - 1]
            .lstrip()
            .startswith("def decode_flawed_prefetch(")
        )
        await pilot.press("5")
        await pilot.pause()
        assert app.focused is app.query_one(FindingGroupsView)
        assert "findings of A and B" in app.status
