"""Traces the UI tests open, recorded once per session by the emulator, and checks of them."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from kernels_across_pes import run_relay

from emulator.config import HardwareConfig
from emulator.errors import EmulatorError
from emulator.kernel.runner import run_kernel
from emulator.scenarios import SCENARIOS
from kbdebug.replay import Replay


def deadlocked(tl):
    """Two PEs each wait for a message the other never sends."""
    f = tl.load_async(0, (8, 8), "f16")
    tl.wait(f)
    r = tl.recv_async("right", (8,), "f32")
    tl.wait(r)


def failing(tl):
    """A kernel that raises after one load."""
    f = tl.load_async(0, (8, 8), "f16")
    tl.wait(f)
    raise ValueError("boom")


def uneven(tl):
    """Each PE of a 4x4 mesh loads and computes a different amount: its end, stall and
    efficiency differ from its neighbours'."""
    pid = tl.program_id(0)
    x = tl.load(0, (32, 32), "f16")
    for k in range(pid % 5):
        x = tl.wait(tl.load_async(2048 * (k + 1), (32, 32), "f16"))
    for _ in range((pid * 7) % 4):
        x = tl.dot(x, x)


@functools.cache
def _directory() -> str:
    directory = tempfile.mkdtemp(prefix="kbdebug-ui-tests-")
    # Shared by every test of the session (recorded once), so removed when it ends.
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


@functools.cache
def trace(name: str) -> str:
    """The path of a trace: a built-in scenario, ``deadlock``, ``error``, ``truncated`` or
    ``mesh16`` (16 uneven PEs on a 4x4 mesh) or ``relay`` (4 PEs, each receive waiting for
    the PE before it: kernels_across_pes.relay)."""
    path = os.path.join(_directory(), f"{name}.kbt")
    if name in SCENARIOS:
        SCENARIOS[name]().run(trace=path)
    elif name == "deadlock":
        config = HardwareConfig().replace(mesh_rows=1, mesh_cols=2)
        with pytest.raises(EmulatorError):
            run_kernel(deadlocked, (), (2,), None, config, trace=path)
    elif name == "relay":
        run_relay(Path(path), pes=4, n_dots=16)
    elif name == "mesh16":
        config = HardwareConfig().replace(mesh_rows=4, mesh_cols=4)
        run_kernel(uneven, (), (16,), None, config, trace=path)
    elif name == "error":
        with pytest.raises(EmulatorError):
            run_kernel(failing, (), (1,), None, HardwareConfig(), trace=path)
    elif name == "truncated":
        with open(trace("flawed_prefetch"), "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
    else:
        raise KeyError(name)
    return path


def fresh(name: str) -> Replay:
    """A new Replay (its own position and breakpoints) of trace ``name``."""
    return Replay.open(trace(name))


@pytest.mark.parametrize(
    ("name", "status"),
    [("flawed_prefetch", "ok"), ("deadlock", "deadlock"), ("error", "error"),
     ("truncated", "truncated")],
)  # fmt: skip
def test_each_trace_ends_as_its_name_says(name, status):
    assert fresh(name).status == status
