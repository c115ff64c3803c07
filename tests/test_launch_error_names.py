"""Errors from a launch function name it FILE.py:FUNCTION as the user typed it, never the
trace name's FILE.FUNCTION."""

from __future__ import annotations

import textwrap

import pytest

from kbdebug.cli import main

LAUNCH_FILE = textwrap.dedent(
    """
    import numpy as np
    from emulator import Memory
    from emulator.scenarios import Scenario

    def kernel(tl, ptr):
        tl.wait(tl.load_async(ptr, (4, 4), "f32"))

    def helper(n=2):
        if n != 4:
            raise ValueError(f"n must be 4, got {n}")
        mem = Memory(1 << 16)
        ptr = mem.put(np.ones((4, 4), np.float32))
        return Scenario(kernel=kernel, args=(ptr,), grid=(1,), memory=mem)
    """
)


@pytest.fixture
def launch_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "a_gemm.py").write_text(LAUNCH_FILE)
    return tmp_path


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_launch_function_that_raises_is_named_as_given(launch_dir, capsys):
    assert main(["run", "kernels/a_gemm.py:helper"]) != 0
    line = _one_error_line(capsys)
    assert "kernels/a_gemm.py:helper: ValueError: n must be 4, got 2" in line
    assert "a_gemm.helper" not in line


def test_a_wrong_setting_names_the_launch_function_as_given(launch_dir, capsys):
    assert main(["run", "kernels/a_gemm.py:helper", "--set", "n=x"]) == 2
    line = _one_error_line(capsys)
    assert "kernels/a_gemm.py:helper's n takes an integer" in line
    assert "a_gemm.helper" not in line


def test_the_trace_keeps_its_file_function_name(launch_dir, capsys):
    assert main(["run", "kernels/a_gemm.py:helper", "--set", "n=4"]) == 0
    assert (launch_dir / "a_gemm.helper.kbt").is_file()
