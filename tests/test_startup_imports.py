"""Opening a trace does not load the kernel runtime: the app and the replay start faster."""

from __future__ import annotations

import subprocess
import sys

import emulator


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return set(out.stdout.split())


def test_the_replay_and_the_app_do_not_import_simpy_or_greenlet():
    for statement in ("import kbdebug.replay", "from kbdebug.ui import KbdebugApp"):
        loaded = _loaded_after(statement)
        assert "emulator.trace.schema" in loaded
        assert not {"simpy", "greenlet", "emulator.kernel"} & loaded, statement


def test_the_emulator_package_still_gives_its_public_names():
    loaded = _loaded_after("from emulator import run_kernel, LoadFuture, HardwareConfig")
    assert {"emulator.kernel", "simpy", "greenlet"} <= loaded
    assert emulator.LoadFuture.__name__ == "LoadFuture"
    assert set(emulator.__all__) <= set(dir(emulator))
    try:
        emulator.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
