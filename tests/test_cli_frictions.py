"""The command line's first-hour frictions (issue 26 item 6), one test each: launch errors
with their line and Python's hint, three traces, a report of Chrome JSON, an output
folder that does not exist, messages that do not repeat, no temp file left by a sweep."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kbdebug.cli import main

LAUNCHES = textwrap.dedent(
    """\
    import numpy as np
    from emulator import Memory
    from emulator.scenarios import Scenario


    def kernel(tl, k_ptr):
        f = tl.load_asnyc(k_ptr, (8, 8), "f16")
        tl.wait(f)


    def launch_typo():
        mem = Memory(size_bytes=1 << 16)
        k_ptr = mem.put(np.ones((8, 8), np.float16))
        return Scenario(kernel=kernel, args=(k_ptr,), grid=(1,), memory=mem)


    def launch_raises(n=3):
        if n > 2:
            raise ValueError(f"n must be at most 2, not {n}")


    def launch_misspelt():
        return Scenarioo(kernel=kernel, args=(0,), grid=(1,))
    """
)


@pytest.fixture
def launches(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "launches.py"
    path.write_text(LAUNCHES)
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_launch_errors_name_their_line_and_keep_pythons_hint(launches, capsys):
    status, _, err = run(capsys, "run", f"{launches}:launch_raises", "-o", "x.kbt")
    assert status == 2 and err.count("\n") == 1
    assert "ValueError: n must be at most 2, not 3 (at launches.py:19 in launch_raises)" in err
    _, _, err = run(capsys, "run", f"{launches}:launch_misspelt", "-o", "x.kbt")
    assert "(at launches.py:23 in launch_misspelt); Did you mean: 'Scenario'?" in err
    status, _, err = run(capsys, "run", f"{launches}:launch_raises", "--traceback", "-o", "x.kbt")
    assert "Traceback (most recent call last)" in err and 'launches.py", line 19' in err
    # A misspelt tl call in the kernel keeps the hint too.
    status, _, err = run(capsys, "run", f"{launches}:launch_typo", "-o", "x.kbt")
    assert status == 1 and "launches.py:7" in err and "Did you mean: 'load_async'?" in err


def test_three_traces_say_what_kbdebug_takes(tmp_path, capsys):
    status, _, err = run(capsys, "a.kbt", "b.kbt", "c.kbt")
    assert status == 2 and "unrecognized arguments" not in err
    assert "3 traces given (a.kbt b.kbt c.kbt)" in err and "kbdebug A B compares two" in err


def test_report_and_diff_of_chrome_json_give_the_perfetto_hint(tmp_path, capsys):
    json_file = tmp_path / "x.json"
    json_file.write_text('{"traceEvents": []}')
    for argv in (["report", str(json_file)], ["diff", str(json_file), str(json_file)]):
        status, _, err = run(capsys, *argv)
        assert status == 2 and "https://ui.perfetto.dev" in err and len(err.splitlines()) == 1


def test_an_output_in_a_missing_folder_is_refused_before_the_inputs_are_built(launches, capsys):
    status, out, err = run(capsys, "run", f"{launches}:launch_typo", "-o", "nodir/x.kbt")
    assert status == 2 and out == ""  # no "setup: inputs built" line: nothing ran
    assert "cannot write nodir/x.kbt: there is no folder nodir" in err


def test_incomplete_runs_say_what_happened_once(tmp_path):
    from emulator import HardwareConfig, Memory, run_kernel
    from kbdebug.analysis.select import incomplete
    from kbdebug.replay import Replay
    from kbdebug.ui.queries import banner

    def stuck(tl):
        tl.wait(tl.recv_async("right", (4,), "f16"))

    def stopped(tl):
        raise KeyboardInterrupt("SIGINT")

    pair = HardwareConfig(mesh_rows=1, mesh_cols=2)
    with pytest.raises(Exception, match="deadlock"):
        run_kernel(stuck, (), (2,), Memory(1 << 12), pair, trace=tmp_path / "d.kbt")
    reason = incomplete(Replay.open(tmp_path / "d.kbt"))
    assert reason.startswith("deadlock on PEs 0, 1 at cycle ") and reason.count("deadlock") == 1
    with pytest.raises(KeyboardInterrupt):
        run_kernel(stopped, (), (1,), Memory(1 << 12), trace=tmp_path / "i.kbt")
    assert banner(Replay.open(tmp_path / "i.kbt")) == "did not complete: interrupted by SIGINT"
