"""Config and launch files read safely; hardware values bounded before anything runs.

Each reproducer is a command that used to end in a traceback, a hang, a
MemoryError or a trace no reader takes: now one line on stderr, exit status 2
(bad input) or 1 (a run that cannot be written), no traceback.
"""

from __future__ import annotations

import errno
import io
import os
import textwrap

import pytest
from trace_synth import make_header

from emulator.config import MAX_CONFIG_BYTES, HardwareConfig
from emulator.trace import wire
from emulator.trace.writer import TraceWriter
from kbdebug.cli import main
from kbdebug.launch.file import MAX_LAUNCH_BYTES

LAUNCH = textwrap.dedent(
    """
    from emulator.scenarios import SCENARIOS

    def launch(n_tiles=4):
        return SCENARIOS["decode_prefetch"](n_tiles=n_tiles)
    """
)


def one_line(capsys) -> str:
    """The one line a refused command prints on stderr."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --config files: hw, run and sweep read them the same way.

COMMANDS = {
    "hw": lambda path: ["hw", "--config", path],
    "run": lambda path: ["run", "decode_prefetch", "--config", path, "-o", "out.kbt"],
    "sweep": lambda path: ["sweep", "decode_prefetch", "--config", path, "--grid", "depth=1,2"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_config_with_a_latin1_comment_names_the_file_and_line(here, capsys, command):
    (here / "hw.toml").write_bytes(b"[hardware]\n# caf\xe9\nhbm_latency = 800\n")
    assert main(COMMANDS[command]("hw.toml")) == 2
    line = one_line(capsys)
    assert line == (
        f"kbdebug {command}: hw.toml: line 2: not UTF-8 (byte 0xe9 at column 6); "
        "a TOML file is UTF-8"
    )
    assert not (here / "out.kbt").exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_config_nested_1000_deep_is_one_line(here, capsys, command):
    (here / "hw.toml").write_text("a = " + "[" * 1000 + "]" * 1000 + "\n")
    assert main(COMMANDS[command]("hw.toml")) == 2
    line = one_line(capsys)
    assert line.startswith(f"kbdebug {command}: hw.toml: not readable: ")
    assert "nested too deeply" in line


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_config_that_is_a_device_is_refused_unread(here, capsys, command):
    assert main(COMMANDS[command]("/dev/zero")) == 2
    line = one_line(capsys)
    assert line == f"kbdebug {command}: /dev/zero: is a character device, not a regular file"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_config_that_is_a_fifo_is_refused_without_blocking(here, capsys, command):
    os.mkfifo(here / "hw.toml")  # no writer: reading it would block for ever
    assert main(COMMANDS[command]("hw.toml")) == 2
    line = one_line(capsys)
    assert line == f"kbdebug {command}: hw.toml: is a FIFO (named pipe), not a regular file"


def test_a_config_over_the_bound_is_refused_unread(here, capsys):
    (here / "hw.toml").write_text("hbm_latency = 800\n" + "#" * MAX_CONFIG_BYTES + "\n")
    assert main(["hw", "--config", "hw.toml"]) == 2
    line = one_line(capsys)
    size = (here / "hw.toml").stat().st_size
    assert line == (
        f"kbdebug hw: hw.toml: {size:,} bytes: a hardware file is read only up to 1 MiB"
    )


def test_a_config_that_is_a_directory_is_refused(here, capsys):
    (here / "hw.toml").mkdir()
    assert main(["hw", "--config", "hw.toml"]) == 2
    assert one_line(capsys) == "kbdebug hw: hw.toml: is a directory, not a regular file"


def test_a_config_integer_of_thousands_of_digits_is_one_line(here, capsys):
    (here / "hw.toml").write_text("hbm_latency = " + "9" * 5000 + "\n")
    assert main(["hw", "--config", "hw.toml"]) == 2
    line = one_line(capsys)
    assert line.startswith("kbdebug hw: hw.toml: not readable: ") and len(line) < 200


def test_a_config_value_out_of_range_names_the_file_and_field(here, capsys):
    (here / "hw.toml").write_text("[hardware]\nhbm_latency = 10_000_000_000_000_000\n")
    assert main(["run", "decode_prefetch", "--config", "hw.toml", "-o", "out.kbt"]) == 2
    line = one_line(capsys)
    assert line.startswith('kbdebug run: hw.toml: "hbm_latency" must be <= 1_000_000_000 cycles')
    assert not (here / "out.kbt").exists()


# Hardware values: bounded before anything runs.


@pytest.mark.parametrize(
    "value", ["9223372036854775808", "10000000000000000", "1" + "0" * 400, "2**63"]
)
def test_run_refuses_an_out_of_range_latency_before_it_runs(here, capsys, value):
    argv = ["run", "decode_prefetch", "--set", f"hbm_latency={value}", "-o", "out.kbt"]
    assert main(argv) == 2
    line = one_line(capsys)
    assert line.startswith("kbdebug run: --set hbm_latency=")
    assert ': "hbm_latency" must be ' in line
    assert len(line) < 250
    assert not (here / "out.kbt").exists()
    assert "setup:" not in capsys.readouterr().out  # nothing was built


def test_sweep_refuses_an_out_of_range_grid_value_before_any_point(here, capsys):
    argv = ["sweep", "decode_prefetch", "--grid", "hbm_latency=500,10000000000000000"]
    assert main(argv) == 2
    line = one_line(capsys)
    assert line == (
        "kbdebug sweep: --grid hbm_latency=10000000000000000: "
        '"hbm_latency" must be <= 1_000_000_000 cycles, got 10000000000000000 '
        "(kbdebug hw lists the ranges)"
    )


def test_a_mesh_with_more_channels_than_a_trace_holds_is_refused(here, capsys):
    assert main(["run", "ring_attention", "--set", "pes=20000", "-o", "out.kbt"]) == 2
    line = one_line(capsys)
    assert "1x20000 mesh" in line and "120,000 channels" in line and "65,536" in line


def test_a_run_whose_clock_would_pass_the_trace_limit_is_a_run_error(here, capsys, monkeypatch):
    # No kernel of a test's size reaches 2**53 cycles within the ranges: the writer's
    # limit is lowered instead, to a time this run passes.
    monkeypatch.setattr(wire, "MAX_CYCLES", 1_000_000)
    argv = ["run", "decode_prefetch", "--set", "n_tiles=4", "--set", "hbm_latency=400000"]
    assert main([*argv, "-o", "out.kbt", "--no-check"]) == 1
    line = one_line(capsys)
    assert line.startswith("kbdebug run: cannot write out.kbt: the run's clock reached cycle ")
    assert "the last a trace holds" in line
    assert not (here / "out.kbt").exists() and not list(here.glob("out.kbt.partial*"))


def test_a_sweep_point_whose_clock_would_pass_the_limit_is_an_error_row(monkeypatch):
    from kbdebug.sweep.point import ERROR, PointTask, run_point

    monkeypatch.setattr(wire, "MAX_CYCLES", 1_000_000)
    task = PointTask(
        index=0,
        scenario="decode_prefetch",
        params=(("n_tiles", 4),),
        hw=(("hbm_latency", 400_000),),
        base_config=None,
        check=False,
    )
    row = run_point(task)
    assert row.outcome == ERROR
    assert row.message.startswith("cannot write its trace: the run's clock reached cycle ")


def test_the_writer_refuses_a_time_past_2_53_as_a_write_error():
    writer = TraceWriter(io.BytesIO())
    writer.begin(make_header())
    writer.emit(*_kernel_start(wire.MAX_CYCLES))  # the limit itself is a time a trace holds
    writer.emit(*_kernel_start(wire.MAX_CYCLES + 1))
    with pytest.raises(OSError) as info:
        writer.flush()
    assert info.value.errno == errno.EOVERFLOW and writer.write_error is info.value
    assert "9,007,199,254,740,993" in str(info.value)
    writer.end({"status": "ok", "end_time": 0, "error": None, "error_loc": None})  # closes


def test_the_writer_refuses_a_footer_end_time_past_2_53():
    writer = TraceWriter(io.BytesIO())
    writer.begin(make_header())
    footer = {"status": "ok", "end_time": wire.MAX_CYCLES + 1, "error": None, "error_loc": None}
    with pytest.raises(OSError, match="past 2\\*\\*53"):
        writer.end(footer)
    assert writer.write_error is not None


def _kernel_start(time: int) -> tuple:
    from emulator.trace.schema import Kind, SourceLoc

    return (Kind.KERNEL_START, time, 0, "kernel", SourceLoc("k.py", 1, "kernel"))


# Launch files: run, sweep and `kbdebug F.py` read and compile them the same way.


def _deep_launches() -> dict[str, str]:
    """~100 KB launch files, each with one expression nested deeper than Python compiles."""
    head = "from emulator.scenarios import SCENARIOS\n\ndef launch():\n    x = "
    tail = "\n    return SCENARIOS['decode_prefetch'](n_tiles=2)\n"
    return {
        "parens": head + "(" * 50_000 + "1" + ")" * 50_000 + tail,  # SyntaxError
        "unary": head + "-" * 100_000 + "1" + tail,  # MemoryError in the parser
        "binary": head + "+".join(["1"] * 50_000) + tail,  # RecursionError compiling
        "attributes": head + "a." * 50_000 + "b" + tail,  # RecursionError compiling
    }


LAUNCH_COMMANDS = {
    "run": lambda path: ["run", f"{path}:launch", "-o", "out.kbt"],
    "sweep": lambda path: ["sweep", f"{path}:launch", "--grid", "hbm_latency=300,500"],
}


@pytest.mark.parametrize("command", sorted(LAUNCH_COMMANDS))
@pytest.mark.parametrize("kind", sorted(_deep_launches()))
def test_a_deeply_nested_launch_file_is_one_line_with_its_line(here, capsys, command, kind):
    (here / "deep.py").write_text(_deep_launches()[kind])
    assert main(LAUNCH_COMMANDS[command]("deep.py")) == 2
    line = one_line(capsys)
    assert line.startswith(f"kbdebug {command}: deep.py: line 4: does not compile: ")
    assert not (here / "out.kbt").exists()


@pytest.mark.parametrize("kind", sorted(_deep_launches()))
def test_opening_a_deeply_nested_python_file_is_one_line(here, capsys, kind):
    (here / "deep.py").write_text(_deep_launches()[kind])
    assert main(["deep.py"]) == 2
    line = one_line(capsys)
    assert "deep.py: at byte 0: not a kbt trace" in line
    assert "it does not parse (line 4: " in line


def test_run_of_a_deeply_nested_file_without_a_function_names_the_line(here, capsys):
    (here / "deep.py").write_text(_deep_launches()["binary"])
    assert main(["run", "deep.py"]) == 2
    line = one_line(capsys)
    assert line == (
        "kbdebug run: deep.py: does not parse (line 4: an expression nested too deeply "
        "(RecursionError)); fix it, then: kbdebug run deep.py:FUNCTION"
    )


@pytest.mark.parametrize("command", sorted(LAUNCH_COMMANDS))
def test_a_launch_file_with_a_latin1_comment_names_the_line(here, capsys, command):
    (here / "k.py").write_bytes(b"# caf\xe9\n" + LAUNCH.encode())
    assert main(LAUNCH_COMMANDS[command]("k.py")) == 2
    line = one_line(capsys)
    assert line.startswith(f"kbdebug {command}: k.py: line 1: not UTF-8 (byte 0xe9 at column 6)")


def test_a_launch_file_that_declares_latin1_runs(here, capsys):
    (here / "k.py").write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + LAUNCH.encode())
    assert main(["run", "k.py:launch", "-o", "out.kbt"]) == 0
    assert (here / "out.kbt").stat().st_size > 0


@pytest.mark.parametrize("command", sorted(LAUNCH_COMMANDS))
def test_a_launch_file_over_the_bound_is_refused_unread(here, capsys, command):
    (here / "k.py").write_text(LAUNCH + "#" * MAX_LAUNCH_BYTES + "\n")
    assert main(LAUNCH_COMMANDS[command]("k.py")) == 2
    size = (here / "k.py").stat().st_size
    assert one_line(capsys) == (
        f"kbdebug {command}: k.py: {size:,} bytes: a launch file is read only up to 1 MiB"
    )


@pytest.mark.parametrize("command", sorted(LAUNCH_COMMANDS))
def test_a_launch_file_that_is_a_fifo_is_refused_without_blocking(here, capsys, command):
    os.mkfifo(here / "k.py")
    assert main(LAUNCH_COMMANDS[command]("k.py")) == 2
    assert (
        one_line(capsys) == f"kbdebug {command}: k.py: is a FIFO (named pipe), not a regular file"
    )


def test_run_of_a_fifo_python_file_is_refused_without_blocking(here, capsys):
    os.mkfifo(here / "k.py")
    assert main(["run", "k.py"]) == 2
    assert one_line(capsys) == "kbdebug run: k.py: is a FIFO (named pipe), not a regular file"


def test_a_launch_file_with_a_nul_byte_names_the_line(here, capsys):
    (here / "k.py").write_text(LAUNCH + "x = 1\0\n")
    assert main(["run", "k.py:launch", "-o", "out.kbt"]) == 2
    line = one_line(capsys)
    assert line.startswith("kbdebug run: k.py: line 6: does not compile: ")


def test_a_launch_file_that_compiles_still_runs_and_names_its_source(here, capsys):
    (here / "k.py").write_text(LAUNCH)
    assert main(["run", "k.py:launch", "-o", "out.kbt"]) == 0
    from emulator.trace.reader import read_trace

    trace = read_trace(here / "out.kbt")
    assert trace.footer["status"] == "ok"


def test_the_python_api_refuses_out_of_range_values():
    from emulator import ConfigError

    with pytest.raises(ConfigError, match='"hbm_latency" must be <= 1_000_000_000 cycles'):
        HardwareConfig(hbm_latency=2**63)
