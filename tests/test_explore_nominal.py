"""`kbdebug explore` on a kernel wrong at its nominal timing: said first, exit 1, even
when no perturbed run differs from that failing run."""

from __future__ import annotations

import json
from pathlib import Path

from kbdebug.cli import main

WRONG = f"{Path(__file__).parent / 'kernels_wrong_at_nominal.py'}:launch_wrong"


def test_a_nominal_run_that_fails_its_check_is_said_first_and_exits_1(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    status = main(["explore", WRONG, "--runs", "2", "-j", "1", "-q"])
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert status == 1
    assert lines[0].startswith("NOMINAL RUN FAILED (wrong output): the kernel is wrong")
    # Every run fails the same way: none differs from the nominal, still listed as such.
    assert "none of 2 differs from the nominal" in out


def test_json_exits_1_and_says_so_on_stderr(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    status = main(["explore", WRONG, "--runs", "1", "-j", "1", "-q", "--json"])
    out, err = capsys.readouterr()
    assert status == 1
    assert json.loads(out)["nominal"]["outcome"] == "check failed"
    assert "NOMINAL RUN FAILED" in err
