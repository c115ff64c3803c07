"""A run that did not complete claims no bound or efficiency in ``report`` (text and
--json): its end is where it stopped, so a bound below a load it recorded contradicted
the trace (a deadlocked swap read 'launch: bound 8 cycles' beside 543-cycle loads)."""

from __future__ import annotations

import json

import pytest

from emulator import HardwareConfig, Memory, run_kernel
from emulator.errors import DeadlockError
from kbdebug.cli import main

PAIR = HardwareConfig(mesh_rows=1, mesh_cols=2)
ROWS, COLS = 16, 64


def _swap_waiting_first(tl, x_ptr):
    """Each PE loads its rows, then waits to receive before it sends: a deadlock."""
    pe = tl.program_id(0)
    mine = tl.load(x_ptr + pe * ROWS * COLS * 2, (ROWS, COLS), "f16")
    tl.wait(tl.recv_async("left", (ROWS, COLS), "f16"))
    tl.wait(tl.send("right", mine))


def _load_only(tl, x_ptr):
    pe = tl.program_id(0)
    tl.load(x_ptr + pe * ROWS * COLS * 2, (ROWS, COLS), "f16")


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("no_bound")
    paths = {"deadlock": root / "deadlock.kbt", "complete": root / "complete.kbt"}
    mem = Memory(1 << 16)
    with pytest.raises(DeadlockError):
        run_kernel(_swap_waiting_first, (0,), (2,), mem, PAIR, trace=paths["deadlock"])
    run_kernel(_load_only, (0,), (2,), Memory(1 << 16), PAIR, trace=paths["complete"])
    return {name: str(path) for name, path in paths.items()}


def test_report_of_a_deadlock_says_no_bound(traces, capsys):
    assert main(["report", traces["deadlock"]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("status: the run did not complete: deadlock")
    assert "bound: none (the run did not complete: deadlock)" in lines[:6]
    assert not any(line.startswith("launch: bound") for line in lines)
    assert not any("achieved" in line or "efficiency" in line for line in lines)


def test_report_json_of_a_deadlock_claims_no_bound(traces, capsys):
    main(["report", "--json", traces["deadlock"]])
    doc = json.loads(capsys.readouterr().out)
    assert doc["complete"] is False
    assert doc["launch"] is None and doc["efficiency"] == []


def test_a_complete_run_keeps_its_bound(traces, capsys):
    main(["report", traces["complete"]])
    out = capsys.readouterr().out
    assert "\nlaunch: bound " in out and "bound: none" not in out
    main(["report", "--json", traces["complete"]])
    doc = json.loads(capsys.readouterr().out)
    assert doc["launch"]["bound"] > 0 and len(doc["efficiency"]) == 2


def test_sarif_and_junit_of_a_deadlock_claim_no_bound(traces, capsys):
    main(["report", "--format", "sarif", traces["deadlock"]])
    properties = json.loads(capsys.readouterr().out)["runs"][0]["properties"]
    assert properties["launchBound"] is None and properties["launchEfficiency"] is None
    main(["report", "--format", "junit", traces["deadlock"]])
    assert '<property name="launch_bound" value="" />' in capsys.readouterr().out
    main(["report", "--format", "sarif", traces["complete"]])
    assert json.loads(capsys.readouterr().out)["runs"][0]["properties"]["launchBound"] > 0
