"""kbdebug sweep: grid, rows against single runs, marks, failures, traces, Ctrl+C, outputs."""

from __future__ import annotations

import csv
import io
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from emulator.scenarios import decode_prefetch
from kbdebug.cli import main
from kbdebug.errors import UserError
from kbdebug.replay import Replay
from kbdebug.sweep.grid import Axis, parse_axis, points, trace_name
from kbdebug.sweep.local import LocalBackend
from kbdebug.sweep.point import OK, PointTask, Row
from kbdebug.sweep.progress import Progress
from kbdebug.sweep.results import Results

ROOT = Path(__file__).resolve().parents[1]
#: A 4-tile decode: a point takes a few milliseconds.
SMALL = ["--set", "n_tiles=4", "-q"]

USER_KERNELS = textwrap.dedent(
    """
    import os
    import signal
    import numpy as np
    from emulator import HardwareConfig, Memory
    from emulator.scenarios import Scenario

    def launch(mode="ok", n=3, log=None, ready=-1):
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()}\\n")
        mem = Memory(1 << 16)
        ptr = mem.put(np.arange(16, dtype=np.float32).reshape(4, 4))
        def kernel(tl, p):
            for _ in range(n):
                tl.wait(tl.load_async(p, (4, 4), "f32"))
            if mode == "hang":
                os.write(ready, b"x")  # running, its trace open: the test may stop it now
                signal.pause()  # until the sweep cancels it
            if mode == "raise":
                raise ValueError("bad \\x1b[31mred\\x1b[0m value")
            if mode == "crash":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "deadlock":
                tl.wait(tl.recv_async("right", (4,), "f32"))
        pes = 2 if mode == "deadlock" else 1
        return Scenario(kernel=kernel, args=(ptr,), grid=(pes,), memory=mem,
                        config=HardwareConfig(mesh_cols=pes))
    """
)


def sweep(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["sweep", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def sweep_json(capsys, *argv: str) -> dict:
    status, out, err = sweep(capsys, *argv, "--json")
    assert status == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def user_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("user") / "my_kernels.py"
    path.write_text(USER_KERNELS)
    return path


@pytest.fixture(scope="module")
def decode_rows() -> dict[int, list[dict]]:
    """The rows of one 2x2 decode sweep at -j 1 and at -j 2, run once for the module."""
    out = {}
    for jobs in (1, 2):
        buf = io.StringIO()
        sys_stdout, sys.stdout = sys.stdout, buf
        try:
            status = main(
                ["sweep", "decode_prefetch", "--grid", "depth=1,2", "--grid",
                 "hbm_latency=300,800", *SMALL, "-j", str(jobs), "--json"]
            )  # fmt: skip
        finally:
            sys.stdout = sys_stdout
        assert status == 0
        out[jobs] = json.loads(buf.getvalue())["rows"]
    return out


# --- the grid ---------------------------------------------------------------------------


def test_grid_values_ranges_and_order():
    depth = parse_axis("depth=1..3", int)
    lat = parse_axis("hbm_latency=300,800", int)
    assert depth == Axis("depth", (1, 2, 3))
    grid = points([depth, lat])
    assert [p.params for p in grid[:3]] == [
        (("depth", 1), ("hbm_latency", 300)),
        (("depth", 1), ("hbm_latency", 800)),
        (("depth", 2), ("hbm_latency", 300)),
    ]
    assert [p.index for p in grid] == list(range(6))
    assert trace_name("decode_prefetch", grid[1]) == "decode_prefetch.depth=1.hbm_latency=800.kbt"


@pytest.mark.parametrize(
    "text, message",
    [
        ("depth", "expected KEY=V1,V2"),
        ("depth=1,,2", "empty value"),
        ("depth=1,2,1", "given twice"),
        ("depth=3..1", "empty range"),
    ],
)
def test_bad_grid_is_one_line(text, message):
    with pytest.raises(UserError, match=message):
        parse_axis(text, int)


def test_trace_name_keeps_unsafe_characters_out():
    (point,) = points([Axis("mode", ("../x y",))])
    assert "/" not in trace_name("s", point) and " " not in trace_name("s", point)


# --- refused before any point runs -------------------------------------------------------


def test_unknown_grid_key_lists_the_valid_ones_and_runs_nothing(tmp_path, capsys):
    status, out, err = sweep(
        capsys, "decode_prefetch", "--grid", "deph=1,2", "--traces", str(tmp_path / "t")
    )
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "--grid deph: not a parameter of decode_prefetch" in err
    assert "depth" in err and "hbm_latency" in err  # the valid keys, both kinds
    assert not (tmp_path / "t").exists()  # refused before even the directory was made


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--grid", "hbm_latency=300,-5"], "--grid hbm_latency=-5"),
        (["--grid", "depth=1,2", "--set", "depth=3"], "--set depth: also swept"),
        (["--grid", "depth=1", "--grid", "depth=2"], "given twice"),
        (["--set", "depth=1"], "nothing to sweep"),
        (["--grid", "depth=1", "-j", "0"], "-j 0"),
        (["--grid", "tile=32,sixty"], "--grid tile=sixty: decode_prefetch's tile takes an integer"),
        (["--grid", "depth=1", "--set", "n_tiles=2.5"], "--set n_tiles=2.5"),
        (["--grid", "depth=1", "--plot", "--json"], "--plot"),
    ],
)
def test_bad_arguments_are_one_line(capsys, argv, message):
    status, out, err = sweep(capsys, "decode_prefetch", *argv)
    assert status == 2 and out == ""
    assert message in err and err.count("\n") == 1


def test_cluster_without_ray_says_how_to_install_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    status, _, err = sweep(capsys, "decode_prefetch", "--grid", "depth=1", "--cluster", "auto")
    assert status == 2 and "pip install 'kbdebug[cluster]'" in err


# --- rows -------------------------------------------------------------------------------


def test_rows_match_a_single_run_of_each_point(decode_rows):
    for row in decode_rows[1]:
        p = row["params"]
        scenario = decode_prefetch(n_tiles=4, depth=p["depth"])
        scenario.config = scenario.config.replace(hbm_latency=p["hbm_latency"])
        result = scenario.run()
        assert row["outcome"] == "ok"
        assert row["end_cycle"] == result.end_time
        assert row["stall_cycles"] == result.metrics["stall_cycles"]
        assert row["dma_read_count"] == result.metrics["dma_read_count"]
        assert 0 < row["bound"] <= row["end_cycle"]
        assert row["efficiency"] == pytest.approx(row["bound"] / row["end_cycle"])


def test_rows_are_identical_at_one_and_two_jobs(decode_rows):
    assert decode_rows[1] == decode_rows[2]
    assert [r["index"] for r in decode_rows[2]] == [0, 1, 2, 3]


def test_deeper_prefetch_hides_a_long_latency(decode_rows):
    end = {
        (r["params"]["depth"], r["params"]["hbm_latency"]): r["end_cycle"] for r in decode_rows[1]
    }
    assert end[(2, 800)] < end[(1, 800)]
    assert end[(1, 300)] < end[(1, 800)]


def test_best_and_depth_needed_marks():
    axes = [Axis("hbm_latency", (300, 800)), Axis("depth", (1, 2, 3, 4))]
    grid = points(axes)
    ends = [1000, 1000, 1000, 1000, 2000, 1500, 1010, 1000]
    results = Results("s", axes, grid)
    for p, end in zip(grid, ends, strict=True):
        results.add(Row(p.index, OK, end_cycle=end, bound=900, efficiency=0.9))
    assert results.best() == 0
    # hbm_latency=800: 1010 is within 2 % of 1000, so depth 3 is enough there.
    assert results.depth_needed() == [({"hbm_latency": 300}, 0), ({"hbm_latency": 800}, 6)]
    table = results.table()
    assert table.splitlines()[1].startswith("*d")
    assert "hbm_latency=800: depth 3 (end cycle 1,010)" in table


def test_a_depth_needed_at_the_grids_edge_says_to_extend_the_grid():
    axes = [Axis("hbm_latency", (500, 2000)), Axis("depth", (1, 2, 3, 4))]
    grid = points(axes)
    ends = [1000, 900, 900, 900, 4000, 3000, 2000, 1500]
    results = Results("s", axes, grid)
    for p, end in zip(grid, ends, strict=True):
        results.add(Row(p.index, OK, end_cycle=end, bound=int(0.72 * 1500), efficiency=0.72))
    table = results.table()
    assert "hbm_latency=500: depth 2 (end cycle 900)" in table
    line = "hbm_latency=2000: depth ≥ 4 (end cycle 1,500, 72% efficient): extend --grid depth"
    assert line in table
    assert [d["at_edge"] for d in results.to_json()["depth_needed"]] == [False, True]
    # At the edge but at its bound: deeper cannot end earlier, so 4 is the answer.
    results.add(Row(7, OK, end_cycle=1500, bound=1500, efficiency=1.0))
    assert "hbm_latency=2000: depth 4 (end cycle 1,500)" in results.table()


def test_an_interrupted_setting_gets_no_depth():
    axes = [Axis("hbm_latency", (300, 800)), Axis("depth", (1, 2))]
    grid = points(axes)
    results = Results("s", axes, grid, interrupted=True)
    for index, end in [(0, 1000), (1, 1000), (2, 3000)]:  # depth 2 at 800 never ran
        results.add(Row(index, OK, end_cycle=end))
    assert results.depth_needed() == [({"hbm_latency": 300}, 0)]
    assert results.unsettled() == [{"hbm_latency": 800}]
    table = results.table()
    assert "no answer for hbm_latency=800: not all their depths finished" in table
    assert "best (of the points that finished)" in table


def test_failed_points_never_win():
    axes = [Axis("depth", (1, 2))]
    results = Results("s", axes, points(axes))
    results.add(Row(0, "kernel error", "boom", end_cycle=10))
    results.add(Row(1, OK, end_cycle=500))
    assert results.best() == 1


# --- failures ---------------------------------------------------------------------------


def test_failing_points_are_rows_and_the_sweep_goes_on(user_file, capsys):
    doc = sweep_json(
        capsys, f"{user_file}:launch", "--grid", "mode='ok','raise','crash','deadlock'",
        "-j", "2", "-q",
    )  # fmt: skip
    outcome = {r["params"]["mode"]: r for r in doc["rows"]}
    assert outcome["ok"]["outcome"] == "ok" and doc["best"] == 0
    assert outcome["raise"]["outcome"] == "kernel error"
    assert "bad" in outcome["raise"]["message"]
    assert outcome["crash"]["outcome"] == "crashed"
    assert "SIGKILL" in outcome["crash"]["message"]
    assert outcome["deadlock"]["outcome"] == "deadlock"
    assert outcome["deadlock"]["message"].startswith("deadlock on PEs 0, 1 at cycle ")
    assert doc["finished"] == doc["points"] == 4


def test_a_refused_value_is_a_row_and_kernel_text_is_escaped(user_file, capsys):
    status, out, err = sweep(capsys, f"{user_file}:launch", "--grid", "mode='raise','ok'", "-q")
    assert status == 0
    assert "\x1b" not in out and "\\x1b[31mred" in out
    status, out, _ = sweep(capsys, "decode_prefetch", "--grid", "depth=0,1", *SMALL)
    assert status == 0
    assert "refused" in out and "depth must be at least 1" in out


def test_no_point_ok_exits_1(user_file, capsys):
    status, out, _ = sweep(capsys, f"{user_file}:launch", "--grid", "mode='raise'", "-q")
    assert status == 1 and "no point completed ok" in out


# --- traces -----------------------------------------------------------------------------


def test_traces_are_kept_under_their_parameters_and_never_overwritten(tmp_path, capsys):
    traces = tmp_path / "t"
    argv = ["decode_prefetch", "--grid", "depth=1,2", *SMALL, "--traces", str(traces)]
    status, out, _ = sweep(capsys, *argv)
    assert status == 0 and "traces: 2 kept" in out
    names = sorted(p.name for p in traces.iterdir())
    assert names == ["decode_prefetch.depth=1.kbt", "decode_prefetch.depth=2.kbt"]
    assert Replay.open(traces / names[1]).status == "ok"
    before = (traces / names[0]).read_bytes()
    (traces / names[1]).write_text("my notes")
    status, out, err = sweep(capsys, *argv)
    assert status == 2 and out == "" and "exists (and 1 more); use --force" in err
    assert (traces / names[1]).read_text() == "my notes"
    status, _, _ = sweep(capsys, *argv, "--force")
    assert status == 0 and (traces / names[0]).read_bytes() == before
    assert Replay.open(traces / names[1]).status == "ok"


def test_a_row_says_what_kbdebug_report_says_of_its_kept_trace(tmp_path, capsys):
    traces = tmp_path / "t"
    doc = sweep_json(
        capsys, "flawed_prefetch", "--grid", "hbm_latency=300,800", *SMALL, "--traces", str(traces)
    )
    for row in doc["rows"]:
        assert main(["report", row["trace"], "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert row["end_cycle"] == report["end_time"]
        assert row["stall_cycles"] == report["stall_cycles"]
        assert row["dma_read_count"] == report["dma_read_count"]
        (pe,) = report["efficiency"]
        assert row["bound"] == pe["start"] + pe["bound"]
        assert row["findings"], "flawed_prefetch has findings"
        by_saving = sorted(report["findings"], key=lambda f: (-f["saving"], f["id"]))
        assert row["findings"] == [{"id": f["id"], "saving": f["saving"]} for f in by_saving]


# --- outputs ----------------------------------------------------------------------------


def test_csv_has_a_line_per_point(capsys):
    status, out, _ = sweep(capsys, "decode_prefetch", "--grid", "depth=1,2", *SMALL, "--csv")
    assert status == 0
    lines = list(csv.DictReader(io.StringIO(out)))
    assert [(r["depth"], r["outcome"]) for r in lines] == [("1", "ok"), ("2", "ok")]
    assert sum(int(r["best"]) for r in lines) == 1
    assert all(int(r["end_cycle"]) > 0 for r in lines)


def test_plot_draws_one_series_per_other_value(capsys):
    status, out, _ = sweep(
        capsys, "decode_prefetch", "--grid", "depth=1,2", "--grid", "hbm_latency=300,800",
        *SMALL, "--plot",
    )  # fmt: skip
    assert status == 0
    plot = out[out.index("end cycle vs depth") :]
    assert "hbm_latency=300" in plot and "hbm_latency=800" in plot
    assert "\x1b" not in plot  # not a terminal: no colours


def test_progress_line_counts_points_and_estimates_the_rest():
    stream = io.StringIO()
    progress = Progress(10, enabled=True, stream=stream)
    progress.started -= 4.0
    for ok in (True, True, False, True):
        progress.row(ok)
    line = progress.line()
    assert "4/10 points, 6 left, 1 failed" in line and "ETA 6s" in line
    assert stream.getvalue().startswith("\r")
    progress.clear()
    assert stream.getvalue().endswith("\r\x1b[K")


def test_a_worker_process_runs_a_bounded_number_of_points(user_file, tmp_path):
    """A worker's memory is that of a few points: after its quota a fresh process takes over."""
    log = tmp_path / "pids"
    tasks = [
        PointTask(i, f"{user_file}:launch", (("n", i + 1), ("log", str(log))), (), None)
        for i in range(5)
    ]
    rows = []
    LocalBackend(1, points_per_worker=2).run(tasks, rows.append)
    assert sorted(r.index for r in rows) == [0, 1, 2, 3, 4]
    assert all(r.outcome == OK for r in rows)
    pids = log.read_text().split()
    assert len(pids) == 5 and str(os.getpid()) not in pids
    assert [pids.count(p) for p in dict.fromkeys(pids)] == [2, 2, 1]


# --- Ctrl+C -----------------------------------------------------------------------------


def test_ctrl_c_cancels_the_points_running_and_prints_those_finished(user_file, tmp_path):
    """Ctrl+C once the two ok points have finished and the two others are running, their
    traces open: exactly the two finished are rows and traces; no partial trace is left."""
    traces = tmp_path / "t"
    ready, ready_w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbdebug", "sweep", f"{user_file}:launch",
         "--grid", "mode='ok','hang'", "--grid", "n=1,2", "--set", f"ready={ready_w}",
         "-j", "2", "-q", "--traces", str(traces)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        start_new_session=True, pass_fds=(ready_w,),
    )  # fmt: skip
    os.close(ready_w)
    try:
        # Workers take a point once the parent has the row of their last: both hanging
        # points running means both ok rows are in. b"" (every writer gone): the sweep died.
        assert os.read(ready, 1) + os.read(ready, 1) == b"xx", proc.communicate(timeout=30)
        assert len(list(traces.glob("*.partial-*"))) == 2  # the running points' traces
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl+C: the whole group
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(ready)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "interrupted: 2 of 4 points finished (listed above)" in err
    rows = [line for line in out.splitlines() if re.match(r"[*d]*\s+'?ok'?\s+\d\s", line)]
    assert len(rows) == 2, out
    kept = sorted(p.name for p in traces.iterdir())
    assert kept == ["my_kernels.launch.mode=ok.n=1.kbt", "my_kernels.launch.mode=ok.n=2.kbt"]
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # no worker left behind


def test_a_killed_point_leaves_no_partial_trace(user_file, tmp_path, monkeypatch, capsys):
    """A worker killed mid-point cannot remove its partial trace: the sweep does."""
    traces, scratch = tmp_path / "t", tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where unkept traces are written
    status, out, _ = sweep(
        capsys, f"{user_file}:launch", "--grid", "mode='ok','crash'", "--traces", str(traces)
    )
    assert status == 0 and "crashed" in out
    assert sorted(p.name for p in traces.iterdir()) == ["my_kernels.launch.mode=ok.kbt"]
    status, out, _ = sweep(capsys, f"{user_file}:launch", "--grid", "mode='crash','ok'", "-j", "1")
    assert status == 0 and "crashed" in out
    assert list(scratch.iterdir()) == []


def test_a_worker_stopped_as_it_starts_runs_no_point(user_file, tmp_path):
    """SIGTERM between the fork and the worker's own handlers stops it, not its point: it
    once reached the parent's StopRequest handler (forked with it), which only takes note."""
    from kbdebug.sweep.local import _Worker
    from kbdebug.sweep.stop import StopRequest

    log = tmp_path / "pids"
    task = PointTask(0, f"{user_file}:launch", (("log", str(log)),), (), None)
    with StopRequest().installed():
        worker = _Worker(multiprocessing.get_context("fork"), 1)  # forked with our handlers
        worker.give(task)
        worker.process.terminate()  # long before the new process has its own handlers
        row, lives = worker.collect()
    assert row.outcome == "crashed" and not lives
    assert not log.exists()
