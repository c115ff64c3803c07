"""`kbdebug TRACE`, `kbdebug replay TRACE` and a bare `kbdebug`: what opens, and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ui_traces import trace

from kbdebug import cli
from kbdebug.commands import replay as command
from kbdebug.ui import KbdebugApp


@pytest.fixture
def launched(monkeypatch):
    """Replace running the app with a record of what it was given."""
    apps: list[KbdebugApp] = []

    def run(self, *args, **kwargs):
        apps.append(self)

    monkeypatch.setattr(KbdebugApp, "run", run)
    return apps


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize("argv", [["TRACE"], ["replay", "TRACE"]])
def test_a_small_trace_is_opened_before_the_app_starts(argv, launched):
    path = trace("flawed_prefetch")
    assert cli.main([path if a == "TRACE" else a for a in argv]) == 0
    (app,) = launched
    assert app.replay is not None and app.replay.path == path


def test_a_large_trace_is_header_checked_then_loaded_by_the_app(monkeypatch, launched):
    monkeypatch.setattr(command, "OPEN_BEFORE_SCREEN_BYTES", 0)
    path = trace("flawed_prefetch")
    assert cli.main([path]) == 0
    (app,) = launched
    assert app.replay is None and app.path == path


def test_bare_kbdebug_opens_the_bundled_flawed_prefetch_trace(monkeypatch, launched):
    bundled = trace("flawed_prefetch")
    monkeypatch.setattr(command, "bundled_trace", lambda: Path(bundled))
    assert cli.main([]) == 0
    (app,) = launched
    assert app.path == bundled


def test_bundled_trace_lives_in_the_project_traces_directory():
    path = command.bundled_trace()
    assert path.name == "flawed_prefetch.kbt" and path.parent.name == "traces"
    assert (path.parent.parent / "kbdebug" / "__init__.py").is_file()


def test_a_missing_bundled_trace_is_one_line_and_status_2(monkeypatch, capsys, launched, tmp_path):
    monkeypatch.setattr(command, "bundled_trace", lambda: tmp_path / "flawed_prefetch.kbt")
    assert cli.main([]) == 2
    assert "bundled trace" in one_error_line(capsys)
    assert not launched


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "no such file"),
        (b"", "empty file"),
        (b"hello, world", "not a kbt trace"),
        (b"\x81\xa6format\xa3kbt", "version"),
    ],
)
def test_a_bad_file_is_one_line_and_status_2_before_any_screen(
    content, words, tmp_path, capsys, launched
):
    path = tmp_path / "bad.kbt"
    if content is not None:
        path.write_bytes(content)
    assert cli.main([str(path)]) == 2
    line = one_error_line(capsys)
    assert line.startswith("kbdebug replay: ") and str(path) in line and words in line
    assert not launched


def test_a_bad_large_file_is_caught_by_its_header_before_any_screen(
    monkeypatch, tmp_path, capsys, launched
):
    monkeypatch.setattr(command, "OPEN_BEFORE_SCREEN_BYTES", 0)
    path = tmp_path / "big.kbt"
    path.write_bytes(b"\x93" + b"\x00" * 100_000)
    assert cli.main([str(path)]) == 2
    assert "not a kbt trace" in one_error_line(capsys)
    assert not launched


def test_a_directory_is_one_line_and_status_2(tmp_path, capsys, launched):
    assert cli.main(["replay", str(tmp_path)]) == 2
    assert "directory" in one_error_line(capsys)


def test_a_load_failure_inside_the_app_becomes_one_line_and_status_2(monkeypatch, capsys):
    def run(self, *args, **kwargs):
        self.load_error = "big.kbt: event 5 at byte 900: bad record"

    monkeypatch.setattr(command, "OPEN_BEFORE_SCREEN_BYTES", 0)
    monkeypatch.setattr(KbdebugApp, "run", run)
    assert cli.main([trace("flawed_prefetch")]) == 2
    assert one_error_line(capsys) == "kbdebug replay: big.kbt: event 5 at byte 900: bad record"
