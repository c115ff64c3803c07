"""`kbdebug run`: built-in and user scenarios, settings, and what a failed or killed run leaves."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from emulator.trace.reader import read_trace
from kbdebug.cli import main

ROOT = Path(__file__).resolve().parents[1]

USER_KERNELS = textwrap.dedent(
    """
    import numpy as np
    from emulator import HardwareConfig, Memory
    from emulator.scenarios import Scenario

    def failing(tl, ptr):
        x = tl.load(ptr, (4, 4), "f32")
        return 1 / 0

    def launch_failing():
        mem = Memory(1 << 16)
        ptr = mem.put(np.ones((4, 4), np.float32))
        return Scenario(kernel=failing, args=(ptr,), grid=(1,), memory=mem)

    def waits_forever(tl):
        tl.wait(tl.recv_async("right", (4,), "f32"))

    def launch_deadlock(pes=2):
        return Scenario(kernel=waits_forever, args=(), grid=(pes,), memory=Memory(1024),
                        config=HardwareConfig(mesh_cols=pes))

    def launch_ok(n=3):
        mem = Memory(1 << 16)
        ptr = mem.put(np.arange(16, dtype=np.float32).reshape(4, 4))
        def kernel(tl, p):
            for _ in range(n):
                tl.wait(tl.load_async(p, (4, 4), "f32"))
        return Scenario(kernel=kernel, args=(ptr,), grid=(1,), memory=mem)
    """
)


@pytest.fixture
def user_file(tmp_path) -> Path:
    path = tmp_path / "my_kernels.py"
    path.write_text(USER_KERNELS)
    return path


def test_run_builtin_prints_where_the_trace_went_and_its_figures(tmp_path, capsys):
    out = tmp_path / "d.kbt"
    assert main(["run", "decode_prefetch", "--set", "n_tiles=4", "-q", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    trace = read_trace(out)
    assert f"trace:  {out}" in text
    assert f"{len(trace.events):,} events" in text
    assert f"{out.stat().st_size:,} bytes" in text
    cycles = f"{trace.footer['end_time']:,}"
    assert re.search(rf"^end: +simulated {cycles} cycles in [\d.]+ s of wall time$", text, re.M)
    assert re.search(r"^setup: +inputs built in [\d.]+ s$", text, re.M)
    assert "stall:" in text
    assert re.search(
        r"^check: +output matches the numpy reference \(checked in [\d.]+ s\)$", text, re.M
    )


def test_set_reaches_scenario_parameters_and_hardware_fields(tmp_path, capsys):
    fast, slow = tmp_path / "fast.kbt", tmp_path / "slow.kbt"
    assert main(["run", "decode_blocking", "--set", "n_tiles=2", "-q", "-o", str(fast)]) == 0
    assert (
        main(
            [
                "run",
                "decode_blocking",
                "--set",
                "n_tiles=2",
                "--set",
                "hbm_latency=2000",
                "-q",
                "-o",
                str(slow),
            ]
        )
        == 0
    )
    a, b = read_trace(fast), read_trace(slow)
    assert a.header["config"]["hbm_latency"] == 500
    assert b.header["config"]["hbm_latency"] == 2000
    assert b.footer["end_time"] > a.footer["end_time"]


def test_config_file_is_used(tmp_path, capsys):
    toml = tmp_path / "hw.toml"
    toml.write_text("[hardware]\ndma_read_channels = 2\n")
    out = tmp_path / "x.kbt"
    assert (
        main(
            [
                "run",
                "decode_prefetch",
                "--set",
                "n_tiles=2",
                "--config",
                str(toml),
                "-q",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    kinds = [c["kind"] for c in read_trace(out).header["channels"]]
    assert kinds.count("dma_read") == 2


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["run", "nope"], "unknown scenario 'nope'"),
        (["run", "decode_prefetch", "--set", "n_tile=3"], "--set n_tile: not a parameter"),
        (["run", "decode_prefetch", "--set", "hbm_latency=-1"], '"hbm_latency" must be >= 0'),
        (["run", "decode_prefetch", "--set", "oops"], "expected KEY=VALUE"),
        (["run", "missing.py:launch"], "missing.py: no such file"),
        (["run", "decode_prefetch", "--config", "nowhere.toml"], "nowhere.toml: cannot read"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(argv, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_user_file_scenario_runs_with_its_own_parameters(user_file, tmp_path, capsys):
    out = tmp_path / "ok.kbt"
    assert main(["run", f"{user_file}:launch_ok", "--set", "n=5", "-q", "-o", str(out)]) == 0
    trace = read_trace(out)
    assert trace.footer["status"] == "ok"
    assert "my_kernels.py" in trace.sources
    waits = [e for e in trace.iter_decoded() if e[0].name == "WAIT_END"]
    assert len(waits) == 5


def test_kernel_error_leaves_a_trace_with_an_error_footer(user_file, tmp_path, capsys):
    out = tmp_path / "bad.kbt"
    assert main(["run", f"{user_file}:launch_failing", "-q", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "ZeroDivisionError" in err and "my_kernels.py:8" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    trace = read_trace(out)
    assert trace.footer["status"] == "error"
    assert trace.footer["error_loc"].line == 8


def test_deadlock_leaves_a_trace_with_a_deadlock_footer(user_file, tmp_path, capsys):
    out = tmp_path / "dead.kbt"
    assert main(["run", f"{user_file}:launch_deadlock", "-q", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "deadlock on PEs 0, 1 at cycle" in err and "PE 0 waits on receive future" in err
    trace = read_trace(out)
    assert trace.footer["status"] == "deadlock"
    assert sum(1 for e in trace.iter_decoded() if e[0].name == "DEADLOCK") == 2


def test_run_killed_with_sigkill_leaves_a_readable_prefix_named_partial(tmp_path, capsys):
    out = tmp_path / "killed.kbt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kbdebug",
            "run",
            "decode_prefetch",
            "--set",
            "n_tiles=50000",
            "--set",
            "tile=16",
            "--set",
            "head_dim=16",
            "--no-check",
            "-q",
            "-o",
            str(out),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    partial = tmp_path / f"killed.kbt.partial-{proc.pid}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if partial.exists() and partial.stat().st_size > 300_000:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the run wrote nothing for 60 s")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not out.exists()  # the name a user asked for never holds a cut trace
    trace = read_trace(partial)
    assert trace.truncated and trace.footer is None
    assert len(trace.events) > 10_000
    assert trace.header["launch"]["kernel"] == "decode_prefetch"
    assert "emulator/kernels/attention.py" in trace.sources
    assert main(["report", str(partial)]) == 0  # report reads it too, as cut short
    assert "status: the run did not complete: the trace was cut off" in capsys.readouterr().out


def test_a_hardware_field_the_scenario_overrides_is_refused_not_ignored(tmp_path, capsys):
    out = tmp_path / "p.kbt"
    assert main(["run", "prefill", "--set", "mesh_cols=2", "-q", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "prefill sets mesh_cols to 4 itself" in err and "pes" in err
    assert not out.exists()


def test_set_mesh_reaches_a_user_scenario_without_a_config_parameter(tmp_path, capsys):
    path = tmp_path / "grid.py"
    path.write_text(
        "from emulator import Memory\n"
        "from emulator.scenarios import Scenario\n"
        "def k(tl):\n"
        "    tl.zeros((4,))\n"
        "def launch():\n"
        "    return Scenario(kernel=k, args=(), grid=(4,), memory=Memory(1024))\n"
    )
    out = tmp_path / "g.kbt"
    assert main(["run", f"{path}:launch", "-q", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "needs 4 PEs but the mesh has 1" in err and "no trace written" in err
    assert not out.exists()
    assert main(["run", f"{path}:launch", "--set", "mesh_cols=4", "-q", "-o", str(out)]) == 0
    assert read_trace(out).header["mesh"] == [1, 4]


def test_a_check_that_raises_is_one_line_naming_its_line_and_the_trace_stays(tmp_path, capsys):
    """A bug in the scenario's own check (not a wrong output) is one line with the
    exception and the check's line, exit 1, no traceback; the trace is kept."""
    path = tmp_path / "checked.py"
    path.write_text(
        "import numpy as np\n"
        "from emulator import Memory\n"
        "from emulator.scenarios import Scenario\n"
        "def k(tl, p):\n"
        "    tl.wait(tl.load_async(p, (4, 4), 'f32'))\n"
        "def launch():\n"
        "    mem = Memory(1024)\n"
        "    p = mem.put(np.ones((4, 4), np.float32))\n"
        "    def check(memory):\n"
        "        got = memory.get(p, (4, 4), np.float32)\n"
        "        assert got.sum() == 16\n"
        "        {}['missing']\n"
        "    return Scenario(kernel=k, args=(p,), grid=(1,), memory=mem, check=check)\n"
    )
    out = tmp_path / "c.kbt"
    assert main(["run", f"{path}:launch", "-q", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "the scenario's check raised KeyError: 'missing' at checked.py:12" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert out.exists()  # the run itself completed: its trace is worth opening
