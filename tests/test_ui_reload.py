"""The record, look, fix, look-again loop inside the app: r reloads a changed trace file,
R re-runs the ``kbdebug run`` that recorded it; failures keep the old trace on screen."""

from __future__ import annotations

import os
import shutil

from test_ui_app import header, opened
from test_ui_traces import trace

from kbdebug.replay import Replay
from kbdebug.ui import KbdebugApp
from kbdebug.ui.app.reloading import OutputTail, rerun_argv

SIZE = (120, 36)


async def settle(app, pilot) -> None:
    """Wait until a reload or a re-run is over."""
    for _ in range(400):
        await pilot.pause(0.02)
        if not app.reloading:
            break
    await opened(app, pilot)


async def test_r_says_unchanged_then_reloads_a_changed_file_at_the_same_cycle(tmp_path):
    path = str(tmp_path / "run.kbt")
    shutil.copy(trace("flawed_prefetch"), path)
    app = KbdebugApp(path)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("w", "c", "c")
        old, cycle, event = app.replay, app.replay.time, app.position - 1
        await pilot.press("r")
        assert app.replay is old and "unchanged" in header(app)
        # The kernel was fixed and recorded again over the same file.
        shutil.copy(trace("decode_prefetch"), path + ".new")
        os.replace(path + ".new", path)
        await pilot.press("r")
        await settle(app, pilot)
        assert app.replay is not old
        fixed = Replay.open(trace("decode_prefetch"))
        n_events = fixed.n_events
        assert app.replay.n_events == n_events
        # The fix changes nothing up to that event (the new trace has it at the same
        # cycle): the cursor stays on it.
        assert int(fixed.index.columns.time[event]) == cycle
        same = f"at the same event (#{event}, cycle {cycle:,})"
        assert f"reloaded: {n_events:,} events, {same}" in header(app)
        assert app.position - 1 == event and app.replay.time == cycle
        assert [type(bp).__name__ for bp in app.replay.breakpoints] == ["StalledWait"]
        await pilot.press("r")
        assert "unchanged" in header(app)
        # A run of another length: the cursor keeps its cycle.
        await pilot.press("c")
        cycle = app.replay.time
        shutil.copy(trace("decode_blocking"), path + ".new")
        os.replace(path + ".new", path)
        await pilot.press("r")
        await settle(app, pilot)
        assert f"at the same cycle ({cycle:,})" in header(app)
        assert app.replay.time <= cycle < app.replay.index.columns.time[app.position]


async def test_a_reload_that_fails_keeps_the_old_trace(tmp_path):
    path = str(tmp_path / "run.kbt")
    shutil.copy(trace("flawed_prefetch"), path)
    app = KbdebugApp(path)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        old = app.replay
        with open(path, "wb") as f:
            f.write(b"not a trace at all")
        await pilot.press("r")
        await settle(app, pilot)
        assert app.replay is old
        assert "cannot reload" in header(app)


async def test_R_without_a_run_command_says_what_it_needs():
    app = KbdebugApp(trace("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("R")
        assert "R re-runs a trace opened by kbdebug run ... --open" in header(app)


async def test_R_reruns_the_run_command_and_reloads_or_shows_its_error(tmp_path):
    path = str(tmp_path / "small.kbt")
    argv = ["run", "decode_prefetch", "--set", "n_tiles=2", "--no-check", "-o", path, "--open"]
    shutil.copy(trace("flawed_prefetch"), path)
    app = KbdebugApp(path, rerun=argv)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        old = app.replay
        await pilot.press("R")
        assert "re-running kbdebug run decode_prefetch --set n_tiles=2" in header(app)
        await settle(app, pilot)
        assert "re-ran in" in header(app), header(app)
        assert app.replay is not old and app.replay.n_events < old.n_events
        # A run that fails: its last line is shown and the trace stays.
        app.rerun = ("run", "no_such_scenario_xyz", "-o", path)
        kept = app.replay
        await pilot.press("R")
        await settle(app, pilot)
        assert app.replay is kept
        assert "re-run failed (kept the old trace)" in header(app)
        assert "no_such_scenario_xyz" in app.status


def test_rerun_drops_open_and_the_tail_shows_the_last_progress_line():
    argv = rerun_argv(["run", "x", "--open", "-o", "t.kbt"])
    assert argv[1:] == ["-m", "kbdebug", "run", "x", "-o", "t.kbt"]
    tail = OutputTail()
    tail.feed(b"setup\r\x1b[2Krunning 10%\rrunning 55%\r")
    assert tail.last_line == "running 55%"
    tail.feed(b"\nerror: bad thing\n\n")
    assert tail.last_line == "error: bad thing"
