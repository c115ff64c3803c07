"""`kbdebug run ... --open`: the app opens on the trace just written, knowing how to re-run it."""

from __future__ import annotations

import textwrap

import pytest

from kbdebug.cli import main
from kbdebug.ui import KbdebugApp

FAILING = textwrap.dedent(
    """
    import numpy as np
    from emulator import Memory
    from emulator.scenarios import Scenario

    def failing(tl, ptr):
        tl.load(ptr, (4, 4), "f32")
        return 1 / 0

    def launch():
        mem = Memory(1 << 16)
        ptr = mem.put(np.ones((4, 4), np.float32))
        return Scenario(kernel=failing, args=(ptr,), grid=(1,), memory=mem)
    """
)


@pytest.fixture
def launched(monkeypatch):
    """Replace running the app with a record of what it was given."""
    apps: list[KbdebugApp] = []
    monkeypatch.setattr(KbdebugApp, "run", lambda self, *a, **k: apps.append(self))
    return apps


def test_open_records_then_opens_the_app_on_the_new_trace(tmp_path, launched, capsys):
    out = tmp_path / "d.kbt"
    argv = ["run", "decode_prefetch", "--set", "n_tiles=3", "-o", str(out), "-q"]
    assert main([*argv, "--open"]) == 0
    (app,) = launched
    assert app.path == str(out) and app.replay is not None
    assert app.replay.status == "ok"
    assert "check:  output matches" in capsys.readouterr().out


def test_the_app_gets_the_command_that_records_the_same_trace_again(tmp_path, launched):
    out = tmp_path / "d.kbt"
    assert main(["run", "decode_prefetch", "--set", "n_tiles=3", "-o", str(out), "--open"]) == 0
    (app,) = launched
    assert "--open" not in app.rerun
    first = out.read_bytes()
    out.unlink()
    assert main(list(app.rerun)) == 0
    assert out.read_bytes() == first


def test_open_of_a_failed_run_still_opens_its_trace_then_exits_1(tmp_path, launched, capsys):
    (tmp_path / "k.py").write_text(FAILING)
    out = tmp_path / "k.kbt"
    assert main(["run", f"{tmp_path / 'k.py'}:launch", "-o", str(out), "--open"]) == 1
    (app,) = launched
    assert app.replay is not None and app.replay.status == "error"
    assert "ZeroDivisionError" in capsys.readouterr().err


def test_open_refuses_a_device_before_running_anything(launched, capsys):
    assert main(["run", "decode_prefetch", "-o", "/dev/null", "--open"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "kbdebug run: --open needs a trace file; /dev/null is a device or a pipe"
    assert not launched
