"""A large trace starts opening before the app is up; the app collects it (kbdebug TRACE)."""

from __future__ import annotations

import os

import pytest
from test_ui_app import SIZE, header, opened
from test_ui_traces import trace

from emulator.trace.errors import TraceFormatError
from kbdebug.commands import replay as command
from kbdebug.replay import Replay
from kbdebug.replay.opening import Opening


@pytest.fixture
def large(monkeypatch):
    """Every trace counts as large: opened on a thread, not before the screen."""
    monkeypatch.setattr(command, "OPEN_BEFORE_SCREEN_BYTES", 0)


def broken_copy(tmp_path, name: str) -> str:
    """The trace with bytes msgpack never uses written over its middle (header intact)."""
    data = bytearray(open(trace(name), "rb").read())
    middle = len(data) // 2
    assert middle > 4096
    data[middle : middle + 64] = b"\xc1" * 64
    path = tmp_path / f"{name}_broken.kbt"
    path.write_bytes(bytes(data))
    return str(path)


def test_an_opening_gives_the_replay_replay_open_gives():
    path = trace("flawed_prefetch")
    opening = Opening(path, cache=False)
    replay = opening.result()
    assert opening.wait(0) and opening.fraction == 1.0
    expected = Replay.open(path, cache=False)
    assert replay.n_events == expected.n_events
    st = os.stat(path)
    assert opening.stamp == (st.st_mtime_ns, st.st_size)


def test_an_opening_raises_the_reader_s_error_when_collected(tmp_path):
    opening = Opening(broken_copy(tmp_path, "flawed_prefetch"), cache=False)
    with pytest.raises(TraceFormatError, match="byte"):
        opening.result()


async def test_the_app_collects_the_opening_started_before_it(large):
    path = trace("flawed_prefetch")
    app = command.make_app(path)
    assert app.replay is None
    started = app.opening
    assert isinstance(started, Opening) and started.path == path
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        assert app.opening is None  # collected, not opened a second time
        assert app.replay is not None
        assert app.replay.n_events == started.result().n_events
        assert app.stamp == started.stamp
        await pilot.press("w", "c")
        assert "a blocking tl.load stalled" in header(app)


async def test_a_trace_broken_after_its_header_fails_in_the_app_with_one_line(
    large, tmp_path, monkeypatch
):
    monkeypatch.setattr(command, "HEADER_PROBE_BYTES", 4096)  # the break is past the probe
    path = broken_copy(tmp_path, "flawed_prefetch")
    app = command.make_app(path)  # the header is fine: the app starts
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(200):
            if app.return_code is not None:
                break
            await pilot.pause(0.01)
    assert app.return_code == 2
    assert app.load_error is not None and "\n" not in app.load_error
    assert "byte" in app.load_error and os.path.basename(path) in app.load_error
