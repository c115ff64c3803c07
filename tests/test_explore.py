"""`kbdebug explore` and `kbdebug run --perturb`: a race's differing runs, each reproducible."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from emulator.trace.reader import read_trace
from kbdebug.cli import main
from kbdebug.sweep.point import PointTask, build
from kbdebug.sweep.progress import Progress
from kbdebug.ui import KbdebugApp

KERNELS = Path(__file__).parent / "kernels_store_load_race.py"
RACE = f"{KERNELS}:launch_race"
FENCED = f"{KERNELS}:launch_fenced"
RACE_HAZARD = "KB201 read-after-write tests/kernels_store_load_race.py:30 after :28"


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def explore(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["explore", *args, "-j", "2", "-q"])
    out, err = capsys.readouterr()
    return status, out, err


def test_run_perturb_reproduces_a_run_byte_for_byte_and_says_so(in_tmp, capsys):
    for name in ("a.kbt", "b.kbt"):
        main(["run", RACE, "--perturb", "7", "--perturb-latency", "0.3", "-q", "-o", name])
    assert (in_tmp / "a.kbt").read_bytes() == (in_tmp / "b.kbt").read_bytes()
    config = read_trace(str(in_tmp / "a.kbt")).header["config"]
    assert (config["perturb_seed"], config["perturb_latency"]) == (7, 0.3)
    main(["run", RACE, "--perturb", "0", "-q", "-o", "off.kbt"])
    main(["run", RACE, "-q", "-o", "nominal.kbt"])
    assert (in_tmp / "off.kbt").read_bytes() == (in_tmp / "nominal.kbt").read_bytes()


def test_a_perturbation_keeps_the_hardware_the_scenario_chose(in_tmp, capsys):
    own = f"{KERNELS}:launch_fenced_on_two_write_channels"
    main(["run", own, "--perturb", "3", "-q", "-o", "own.kbt"])
    config = read_trace(str(in_tmp / "own.kbt")).header["config"]
    assert (config["dma_write_channels"], config["perturb_seed"]) == (2, 3)
    for hw in ((("perturb_seed", 3),), (("perturb_seed", 3), ("perturb_grant_window", 4))):
        _, scenario = build(PointTask(0, own, (), hw, None))  # an explore run, a --grid point
        assert (scenario.config.dma_write_channels, scenario.config.perturb_seed) == (2, 3)
    main(["run", own, "--set", "perturb_seed=3", "-q", "-o", "set.kbt"])
    assert (in_tmp / "set.kbt").read_bytes() == (in_tmp / "own.kbt").read_bytes()


def test_explore_lists_the_race_s_wrong_outputs_with_their_hazard_and_command(in_tmp, capsys):
    status, out, _ = explore(capsys, RACE, "--runs", "8")
    assert status == 1
    lines = out.splitlines()
    assert lines[1] == "nominal: ok, end cycle 4,170"
    assert lines[2].startswith("runs:    ") and "wrong output" in lines[2]
    table = lines[lines.index("") + 1 :]
    assert table[0].split() == ["seed", "differs", "end", "cycle", "hazard", "reproduce"]
    first = table[1]
    assert "wrong output" in first
    assert RACE_HAZARD in first
    seed = int(first.split()[0])
    command = first[first.index("kbdebug run ") :]
    assert command == f"kbdebug run {RACE} --perturb {seed}"
    assert f"first differing run, seed {seed}: tiles [" in out
    assert "at tests/kernels_store_load_race.py:31" in out  # the output store of that tile
    # The printed command gives that run again: its output fails the check the same way.
    assert main([*shlex.split(command)[1:], "-q", "-o", "again.kbt"]) == 1
    assert "of the output differ from x * 2 + 1" in capsys.readouterr().err


def test_explore_of_the_fenced_twin_finds_no_run_that_differs(in_tmp, capsys):
    status, out, _ = explore(capsys, FENCED, "--runs", "8", "--perturb-grant", "3")
    assert status == 0
    assert "none of 8 differs from the nominal" in out
    assert out.splitlines()[0].endswith(
        "DMA grants delayed up to 1.5x the HBM latency, read grants among the 3 oldest waiting"
    )
    assert "first differing run" not in out


def test_a_run_that_deadlocks_where_the_nominal_did_not_differs_as_a_deadlock(in_tmp, capsys):
    status, out, _ = explore(capsys, f"{KERNELS}:launch_flag_race", "--runs", "4", "--json")
    doc = json.loads(out)
    assert status == 1 and doc["nominal"]["outcome"] == "ok"
    deadlocked = [r for r in doc["runs"] if r["differs"] == ["deadlock"]]
    assert deadlocked and doc["differ"] == len(deadlocked)
    message = deadlocked[0]["message"]
    assert message.startswith("deadlock on PE") and message.count("deadlock") == 1
    assert doc["first"]["differing_bytes"] is None  # the flag is all it wrote: the same bytes


def test_explore_json_lists_every_run_with_its_seed_and_command(in_tmp, capsys):
    status, out, _ = explore(capsys, RACE, "--runs", "4", "--seed", "20", "--json")
    doc = json.loads(out)
    assert doc["schema"] == "kbdebug.explore/1"
    assert doc["seeds"] == {"first": 20, "count": 4}
    assert doc["bounds"] == {
        "perturb_latency": 1.0,
        "perturb_grant_delay": 1.5,
        "perturb_grant_window": 2,
    }
    assert doc["nominal"]["outcome"] == "ok" and doc["nominal"]["end_cycle"] == 4170
    assert [r["seed"] for r in doc["runs"]] == [20, 21, 22, 23]
    differing = [r for r in doc["runs"] if r["differs"]]
    assert status == (1 if differing else 0) and doc["differ"] == len(differing)
    for r in differing:
        assert r["differs"] == ["wrong output"]
        assert [h["label"] for h in r["hazards"]] == [RACE_HAZARD]
        assert r["hazards"][0]["id"].startswith("KB201:tests/kernels_store_load_race.py::")
        assert r["command"].endswith(f"--perturb {r['seed']}")
    assert doc["first"]["seed"] == differing[0]["seed"]
    assert doc["first"]["store"]["line"] == "tests/kernels_store_load_race.py:31"


def test_the_first_differing_run_names_the_tile_whose_bytes_differ(in_tmp, capsys):
    # Seed 6 reads the old bytes on the second tile only: its output's second tile differs.
    status, out, _ = explore(capsys, RACE, "--runs", "1", "--seed", "6", "--json")
    doc = json.loads(out)
    assert doc["runs"][0]["message"] == "tiles [1] of the output differ from x * 2 + 1"
    store = doc["first"]["store"]
    assert (store["line"], store["ordinal"], store["of"], store["bytes"]) == (
        "tests/kernels_store_load_race.py:31",
        2,
        2,
        512,
    )
    differing = doc["first"]["differing_bytes"]
    assert store["addr"] <= differing["lo"] < differing["hi"] <= store["addr"] + 512


def test_open_keeps_the_first_failing_trace_under_a_new_name_each_time(in_tmp, capsys, monkeypatch):
    opened = []
    monkeypatch.setattr(KbdebugApp, "run", lambda self, *a, **k: opened.append(self))
    stem = "kernels_store_load_race.launch_race.perturb-"
    kept_names = []
    for _ in range(2):
        status, out, _ = explore(capsys, RACE, "--runs", "4", "--open")
        assert status == 1
        seed = int(out.split("first differing run, seed ")[1].split(":")[0])
        trace_line = next(line for line in out.splitlines() if line.startswith("  trace: "))
        kept = trace_line.removeprefix("  trace: ")
        kept_names.append(kept)
        assert (in_tmp / kept).is_file()
        assert read_trace(str(in_tmp / kept)).header["config"]["perturb_seed"] == seed
    assert [Path(k).name for k in kept_names] == [f"{stem}{seed}.kbt", f"{stem}{seed}-2.kbt"]
    assert len(opened) == 2
    # The kept trace is the one its reproducing command records, byte for byte.
    main(["run", RACE, "--perturb", str(seed), "-q", "-o", "again.kbt"])
    assert (in_tmp / "again.kbt").read_bytes() == (in_tmp / kept).read_bytes()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--runs", "0"], "--runs 0: expected 1 to 100,000"),
        (["--seed", "0"], "--seed 0: expected at least 1 (seed 0 is the nominal run)"),
        (["--set", "perturb_seed=3"], "--set perturb_seed: explore sets the perturbation itself"),
        (["--perturb-latency", "12"], '--perturb-latency 12.0: "perturb_latency" must be <= 9.0'),
        (["--open", "--json"], "--open opens the app: use it without --json"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(in_tmp, capsys, args, said):
    status, out, err = explore(capsys, RACE, *args)
    assert status == 2 and out == ""
    assert err.startswith(f"kbdebug explore: {said}") and err.count("\n") == 1


def test_the_progress_bar_counts_runs_and_those_that_differ():
    progress = Progress(65, enabled=False, label="explore", unit="runs", failures="differ")
    progress.row(True)
    progress.row(False)
    assert (
        progress.line().startswith("explore [")
        and "2/65 runs, 63 left, 1 differ" in progress.line()
    )
