"""What `kbdebug run` and `kbdebug FILE` say when given the wrong thing; the run's status line."""

from __future__ import annotations

import io
import textwrap
import time

import pytest

from kbdebug.cli import main
from kbdebug.commands import replay as replay_command
from kbdebug.commands import run_status

LAUNCHERS = textwrap.dedent(
    """
    import time
    import numpy as np
    from emulator import Memory
    from emulator.scenarios import Scenario

    def kernel(tl, ptr):
        tl.wait(tl.load_async(ptr, (4, 4), "f32"))

    def launch(n=2):
        mem = Memory(1 << 16)
        ptr = mem.put(np.ones((4, 4), np.float32))
        return Scenario(kernel=kernel, args=(ptr,), grid=(1,), memory=mem)

    def counted(n_tiles=8, log="calls.log"):
        with open(log, "a") as f:
            f.write("build\\n")

        def kernel(tl, ptr):
            with open(log, "a") as f:
                f.write("run\\n")
            for _ in range(n_tiles):
                tl.wait(tl.load_async(ptr, (4, 4), "f32"))

        scenario = launch()
        scenario.kernel = kernel
        return scenario

    def slow_launch(setup=0.5, check=0.5):
        time.sleep(setup)
        scenario = launch()
        scenario.check = lambda memory: time.sleep(check)
        return scenario
    """
)


@pytest.fixture
def launchers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_kernel.py").write_text(LAUNCHERS)
    return tmp_path / "my_kernel.py"


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_run_of_a_python_file_offers_its_launch_functions(launchers, capsys):
    assert main(["run", "my_kernel.py"]) == 2
    line = one_error_line(capsys)
    assert "kbdebug run my_kernel.py:launch" in line
    # Launchers listed; the kernel (first parameter tl) is not one.
    assert "functions there: launch, counted, slow_launch" in line


def test_run_of_a_python_file_never_offers_a_private_helper(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    helper = "def _build(kernel=None):\n    return launch()\n\n\n"
    text = LAUNCHERS.replace("def launch(", helper + "def launch(")
    (tmp_path / "helpers.py").write_text(text)
    assert main(["run", "helpers.py"]) == 2
    line = one_error_line(capsys)
    assert "kbdebug run helpers.py:launch " in line and "_build" not in line
    (tmp_path / "only_private.py").write_text("def _launch(kernel):\n    pass\n")
    assert main(["run", "only_private.py"]) == 2
    line = one_error_line(capsys)
    assert "_launch" not in line and "defines no public function" in line


def test_run_of_a_missing_function_lists_the_ones_there(launchers, capsys):
    assert main(["run", "my_kernel.py:lanch"]) == 2
    line = one_error_line(capsys)
    assert "no function 'lanch'" in line and "launch, counted, slow_launch" in line


def test_run_of_a_missing_python_file_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "nowhere.py"]) == 2
    assert one_error_line(capsys) == "kbdebug run: nowhere.py: no such file"


def test_run_of_a_python_file_that_does_not_parse_names_the_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("import numpy\n\ndef launch(:\n    pass\n")
    assert main(["run", "broken.py"]) == 2
    line = one_error_line(capsys)
    assert "broken.py: does not parse (line 3: " in line
    assert "kbdebug run broken.py:FUNCTION" in line


def test_run_of_a_trace_says_to_open_it(capsys):
    trace = replay_command.bundled_trace()
    assert main(["run", str(trace)]) == 2
    assert one_error_line(capsys).endswith(f"is a trace already: open it with kbdebug {trace}")


def test_a_misspelt_scenario_gets_the_closest_name(capsys):
    assert main(["run", "decode_prefech"]) == 2
    assert "did you mean decode_prefetch?" in one_error_line(capsys)


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("n_tiles=abc", "decode_prefetch's n_tiles takes an integer (default 32), got 'abc'"),
        ("n_tiles=2.5", "n_tiles takes an integer (default 32), got 2.5"),
        ("n_tiles=true", "n_tiles takes an integer (default 32), got True"),
        ("hbm_latency=abc", "\"hbm_latency\" must be a number, got 'abc'"),
        ("hbm_latency=1.5", '"hbm_latency" must be an integer, got 1.5'),
    ],
)
def test_a_value_of_the_wrong_type_is_one_line_naming_parameter_and_type(
    setting, words, tmp_path, capsys
):
    out = tmp_path / "x.kbt"
    assert main(["run", "decode_prefetch", "--set", setting, "-o", str(out)]) == 2
    assert words in one_error_line(capsys)
    assert not out.exists()


def test_opening_a_python_file_says_how_to_run_it(launchers, capsys):
    assert main(["my_kernel.py"]) == 2
    line = one_error_line(capsys)
    assert "not a kbt trace" in line and "kbdebug run my_kernel.py:launch" in line


def test_opening_chrome_json_says_where_to_open_it(tmp_path, capsys):
    path = tmp_path / "export.json"
    path.write_text('{"traceEvents": [], "displayTimeUnit": "ns"}')
    assert main([str(path)]) == 2
    line = one_error_line(capsys)
    assert "Chrome trace JSON" in line and "https://ui.perfetto.dev" in line


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_the_status_line_covers_setup_and_check_from_the_first_second(
    launchers, monkeypatch, capsys
):
    terminal = _Terminal()  # stdout and stderr on one screen, as in a shell
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setattr("sys.stdout", terminal)
    started = time.perf_counter()
    assert main(["run", "my_kernel.py:slow_launch", "-o", "x.kbt"]) == 0
    assert time.perf_counter() - started < 5
    shown = terminal.getvalue()
    assert run_status.FIRST_DRAW_SECONDS < 1
    assert "\rbuilding inputs… 0." in shown
    assert "\rchecking output against numpy… 0." in shown
    # Each status line is erased before a result line is printed over it.
    assert "\r\033[Ksetup:  inputs built in" in shown
    # The check runs before the trace is put in place (its verdict is in the footer): its
    # status line is erased before the trace's line, and its result printed after the run's.
    assert "\r\033[Ktrace:  x.kbt" in shown
    assert "\ncheck:  output matches the numpy reference" in shown


def test_the_status_line_costs_no_extra_run(launchers, monkeypatch, capsys):
    """The line counts events as they are written: the launch is built and run once."""
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert main(["run", "my_kernel.py:counted", "--set", "n_tiles=64", "-o", "x.kbt"]) == 0
    assert (launchers.parent / "calls.log").read_text().split() == ["build", "run"]


def test_no_status_line_when_stderr_is_not_a_terminal(launchers, capsys):
    argv = ["run", "my_kernel.py:slow_launch", "--set", "setup=0.4", "--set", "check=0"]
    assert main([*argv, "-o", "x.kbt"]) == 0
    assert capsys.readouterr().err == ""


def test_a_package_without_traces_records_the_example_once_into_the_cache(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("KBDEBUG_CACHE_DIR", str(tmp_path / "cache"))
    path = replay_command.recorded_example()
    assert path.parent.parent == tmp_path / "cache" / "examples"
    assert path.name == "flawed_prefetch.kbt"
    assert "recording the example trace once" in capsys.readouterr().err
    bundled = replay_command.bundled_trace()  # the checkout's own
    assert path.read_bytes() == bundled.read_bytes()
    assert replay_command.recorded_example() == path
    assert capsys.readouterr().err == ""  # not recorded again


def test_an_unwritable_cache_records_the_example_in_a_temporary_directory(
    tmp_path, monkeypatch, capsys
):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("KBDEBUG_CACHE_DIR", str(blocked / "cache"))
    monkeypatch.setattr(replay_command.tempfile, "tempdir", str(tmp_path / "tmp"))
    path = replay_command.recorded_example()
    assert path.is_file() and path.is_relative_to(tmp_path / "tmp")


def test_a_kernel_error_with_control_characters_is_escaped(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "boom.py").write_text(
        textwrap.dedent("""
        import numpy as np
        from emulator import Memory
        from emulator.scenarios import Scenario

        def kernel(tl, ptr):
            tl.load(ptr, (8, 8), "f16")
            raise RuntimeError("bad \\x1b[31mred")

        def launch():
            mem = Memory(size_bytes=1 << 16)
            return Scenario(kernel=kernel, args=(mem.put(np.ones((8, 8), np.float16)),),
                            grid=(1,), memory=mem)
    """)
    )
    assert main(["run", "boom.py:launch", "-q", "-o", "boom.kbt"]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "bad \\x1b[31mred" in err
