"""A run that did not complete is worded once, the same way everywhere: ``did not complete:
deadlock on PEs 0, 1 at cycle 4: ...`` in report, diff, the app's banner, run and sweep rows
(issue 26: "DEADLOCK: the run did not complete: deadlock on ...")."""

from __future__ import annotations

import pytest

from emulator import HardwareConfig, Memory, run_kernel
from emulator.errors import DeadlockError
from kbdebug.cli import main
from kbdebug.launch.errors import failure_text
from kbdebug.replay import Replay
from kbdebug.ui.queries import banner

PAIR = HardwareConfig(mesh_rows=1, mesh_cols=2)
LAUNCH = """
from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario

def stuck(tl):
    tl.wait(tl.recv_async("right", (4,), "f16"))

def launch():
    pair = HardwareConfig(mesh_rows=1, mesh_cols=2)
    return Scenario(kernel=stuck, args=(), grid=(2,), memory=Memory(1 << 12), config=pair)
"""
SAID = "deadlock on PEs 0, 1 at cycle 4: PE 0 waits on receive future 0 at "


def _stuck(tl):
    tl.wait(tl.recv_async("right", (4,), "f16"))


@pytest.fixture(scope="module")
def deadlocked(tmp_path_factory) -> tuple[str, DeadlockError]:
    path = tmp_path_factory.mktemp("said_once") / "stuck.kbt"
    with pytest.raises(DeadlockError) as raised:
        run_kernel(_stuck, (), (2,), Memory(1 << 12), PAIR, trace=path)
    return str(path), raised.value


def test_report_says_deadlock_once(deadlocked, capsys):
    assert main(["report", deadlocked[0]]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"status: the run did not complete: {SAID}")
    assert first.lower().count("deadlock") == 1


def test_diff_says_deadlock_once_per_run(deadlocked, capsys):
    main(["diff", deadlocked[0], deadlocked[0]])
    a, b = capsys.readouterr().out.splitlines()[:2]
    for line in (a, b):
        assert f"did not complete: {SAID}" in line and line.lower().count("deadlock") == 1


def test_the_apps_banner_says_deadlock_once(deadlocked):
    text = banner(Replay.open(deadlocked[0], cache=False))
    assert text.startswith(f"did not complete: {SAID}") and text.count("deadlock") == 1


def test_run_and_sweep_rows_word_the_failure_as_the_trace_does(deadlocked, tmp_path, capsys):
    assert failure_text(deadlocked[1]).startswith(SAID)
    launch = tmp_path / "stuck.py"
    launch.write_text(LAUNCH)
    assert main(["run", f"{launch}:launch", "-q", "-o", str(tmp_path / "r.kbt")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"kbdebug run: {SAID}") and err.count("deadlock") == 1
    # A nominal run that deadlocks is a failure of explore's (58f65f6), said first.
    assert main(["explore", f"{launch}:launch", "--runs", "1"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("NOMINAL RUN FAILED (deadlock)")
    nominal = next(line for line in out if line.startswith("nominal:"))
    assert nominal.startswith(f"nominal: end cycle 4: {SAID}") and nominal.count("deadlock") == 1
