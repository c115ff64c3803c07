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
