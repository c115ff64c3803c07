"""CI gates: `report --fail-on` and `diff --fail-on-regression` on runs that did not complete
(crashed, deadlocked, interrupted, truncated, no events), on files that are not traces,
with lower-case and comma selectors and --min-saving.

Exit statuses under test: 0 pass, 1 a finding or regression, 2 not a trace / bad
selector, 3 the run (B for diff) did not complete.
"""

from __future__ import annotations

import json

import kernels_for_findings as kf
import msgpack
import pytest

from emulator import HardwareConfig, run_kernel
from emulator.scenarios import decode_blocking, decode_prefetch
from kbdebug.analysis.findings import MIN_SHARE
from kbdebug.cli import main

PAIR = HardwareConfig(mesh_rows=1, mesh_cols=2)


def _deadlock(tl):
    f = tl.recv_async("right", (4,), "f16")
    tl.wait(f)


def _interrupted(tl, a_ptr, b_ptr, out_ptr, n):
    x = tl.load(a_ptr, kf.TILE, "f16")
    tl.dot(x, x)
    raise KeyboardInterrupt


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("gates")
    paths = {name: root / f"{name}.kbt" for name in ("blocking", "prefetch")}
    decode_blocking().run(trace=paths["blocking"])
    decode_prefetch().run(trace=paths["prefetch"])
    paths["crashed"] = root / "crashed.kbt"
    with pytest.raises(Exception, match="boom"):
        kf.run(kf.raises_midway, paths["crashed"])
    paths["deadlock"] = root / "deadlock.kbt"
    with pytest.raises(Exception, match="deadlock"):
        run_kernel(_deadlock, (), (2,), config=PAIR, trace=paths["deadlock"])
    paths["interrupted"] = root / "interrupted.kbt"
    with pytest.raises(KeyboardInterrupt):
        kf.run(_interrupted, paths["interrupted"])
    whole = paths["blocking"].read_bytes()
    paths["truncated"] = root / "truncated.kbt"
    paths["truncated"].write_bytes(whole[: len(whole) // 2])
    paths["empty"] = root / "empty.kbt"
    paths["empty"].write_bytes(b"")
    paths["header_cut"] = root / "header_cut.kbt"
    paths["header_cut"].write_bytes(whole[:20])
    return {name: str(path) for name, path in paths.items()}


def cli(capsys, *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


INCOMPLETE = {
    "crashed": "kernel error on PE 0",
    "deadlock": "deadlock on PEs 0, 1",
    "interrupted": "interrupted",
    "truncated": "cut off after",
}


# --- report: runs that did not complete ------------------------------------------------


@pytest.mark.parametrize("name", sorted(INCOMPLETE))
@pytest.mark.parametrize("selector", ["any", "KB102", "kb101,KB104"])
def test_report_gate_fails_with_3_on_a_run_that_did_not_complete(traces, capsys, name, selector):
    status, out, err = cli(capsys, "report", traces[name], "--fail-on", selector)
    assert status == 3
    assert "the run did not complete" in out.splitlines()[0]
    assert INCOMPLETE[name] in out.splitlines()[0]
    assert "did not complete" in err and INCOMPLETE[name] in err and "Traceback" not in err


@pytest.mark.parametrize("name", sorted(INCOMPLETE))
def test_report_without_a_gate_still_reports_an_incomplete_run(traces, capsys, name):
    status, out, _ = cli(capsys, "report", traces[name])
    assert status == 0
    assert "the run did not complete: " in out.splitlines()[0]
    status, out, _ = cli(capsys, "report", traces[name], "--json")
    doc = json.loads(out)
    assert status == 0 and doc["complete"] is False and INCOMPLETE[name] in doc["incomplete"]
    assert doc["gate"] == {
        "selectors": [],
        "min_saving": MIN_SHARE,
        "failed": False,
        "exit": 0,
        "matched": [],
        "below_min_saving": [],
    }


def test_report_gate_of_a_trace_with_a_header_and_no_events_is_3(traces, capsys, tmp_path):
    # The header alone: the first msgpack object of the file.
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(open(traces["blocking"], "rb").read())
    assert isinstance(unpacker.unpack(), dict)
    path = tmp_path / "no_events.kbt"
    path.write_bytes(open(traces["blocking"], "rb").read()[: unpacker.tell()])
    status, out, _ = cli(capsys, "report", str(path), "--json")
    doc = json.loads(out)
    assert status == 0 and doc["events"] == 0
    assert doc["incomplete"].startswith("the trace holds no events")
    status, out, err = cli(capsys, "report", str(path), "--fail-on", "any")
    assert status == 3 and "holds no events" in err and "holds no events" in out


# --- files that are not traces: 2 everywhere ------------------------------------------


@pytest.mark.parametrize("name", ["empty", "header_cut"])
@pytest.mark.parametrize(
    "command",
    [
        ["report", "{}"],
        ["report", "{}", "--fail-on", "any"],
        ["report", "{}", "--json"],
        ["diff", "{prefetch}", "{}", "--fail-on-regression"],
        ["diff", "{}", "{prefetch}"],
        ["export", "{}", "-o", "{out}"],
    ],
)
def test_an_empty_or_header_cut_file_is_not_a_trace_exit_2(traces, capsys, tmp_path, name, command):
    args = [
        a.replace("{}", traces[name])
        .replace("{prefetch}", traces["prefetch"])
        .replace("{out}", str(tmp_path / "out.json"))
        for a in command
    ]
    status, out, err = cli(capsys, *args)
    assert status == 2 and not out
    assert len(err.splitlines()) == 1 and traces[name] in err and "Traceback" not in err


# --- diff ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(INCOMPLETE))
def test_diff_fails_with_3_when_b_did_not_complete_and_never_says_better(traces, capsys, name):
    status, out, err = cli(capsys, "diff", traces["blocking"], traces[name], "--fail-on-regression")
    assert status == 3
    assert "better" not in out and "B is faster" not in out
    assert out.rstrip().splitlines()[-1].startswith("REGRESSION: B did not complete: ")
    assert "B did not complete" in err
    status, out, _ = cli(capsys, "diff", traces["blocking"], traces[name], "--json")
    doc = json.loads(out)
    assert status == 0 and doc["regression"] and not doc["comparable"]
    assert doc["b"]["complete"] is False and INCOMPLETE[name] in doc["b"]["incomplete"]
    assert doc["regressions"][0].startswith("B did not complete: ")
    rows = doc["headline"] + doc["stall_by_line"]
    assert rows and all(c["verdict"] == "" for c in rows)


def test_diff_of_a_crash_fixed_is_not_a_regression(traces, capsys):
    status, out, _ = cli(capsys, "diff", traces["crashed"], traces["blocking"],
                         "--fail-on-regression")  # fmt: skip
    assert status == 0
    assert "better" not in out
    assert out.rstrip().splitlines()[-1].startswith("A did not complete")


def test_diff_of_complete_runs_still_gates_on_speed(traces, capsys):
    assert cli(capsys, "diff", traces["blocking"], traces["prefetch"],
               "--fail-on-regression")[0] == 0  # fmt: skip
    status, out, err = cli(capsys, "diff", traces["prefetch"], traces["blocking"],
                           "--fail-on-regression")  # fmt: skip
    assert status == 1 and "REGRESSION: B ends" in out and "B ends" in err


def test_diff_warns_when_the_runs_ran_different_kernels(traces, capsys):
    _, out, _ = cli(capsys, "diff", traces["blocking"], traces["crashed"])
    assert "warning: A and B ran different kernels: decode_blocking and raises_midway" in out
    # Two versions of one kernel kept in one file pair by likeness: no warning for that,
    # only for the helpers B calls tl from.
    _, out, _ = cli(capsys, "diff", traces["blocking"], traces["prefetch"])
    assert "different kernels" not in out and "only B calls tl from _issue" in out
    _, out, _ = cli(capsys, "diff", traces["blocking"], traces["blocking"])
    assert "warning" not in out


# --- selectors -------------------------------------------------------------------------


def test_lower_case_and_comma_selectors(traces, capsys):
    path = traces["blocking"]
    assert cli(capsys, "report", path, "--fail-on", "kb101", "--min-saving", "0")[0] == 1
    assert cli(capsys, "report", path, "--fail-on", "ANY", "--min-saving", "0")[0] == 1
    status, _, err = cli(capsys, "report", path, "--fail-on", "kb103,kb101", "--min-saving", "0")
    assert status == 1
    assert "KB101:" in err and "est. saving" in err
    status, out, err = cli(capsys, "report", path, "--fail-on", "kb101,KB999")
    assert status == 2 and not out and "KB999" in err and len(err.splitlines()) == 1


def test_a_prefetched_run_passes_the_any_gate(traces, capsys):
    status, _, err = cli(capsys, "report", traces["prefetch"], "--fail-on", "any")
    assert status == 0 and not err


def test_min_saving_counts_only_findings_worth_that_share(traces, capsys):
    path = traces["blocking"]
    doc = json.loads(cli(capsys, "report", path, "--json", "--min-saving", "0")[1])
    shares = [f["share"] for f in doc["findings"]]
    assert shares and max(shares) > 0
    above = max(shares) + 0.001
    status, _, err = cli(capsys, "report", path, "--fail-on", "any", "--min-saving", f"{above}")
    assert status == 0 and not err
    pct = f"{100 * above:.3f}%"
    assert cli(capsys, "report", path, "--fail-on", "any", "--min-saving", pct)[0] == 0
    below = max(shares) - 0.001
    status, _, err = cli(capsys, "report", path, "--fail-on", "any", "--min-saving", f"{below}")
    assert status == 1 and "matched" in err
    out = cli(capsys, "report", path, "--json", "--fail-on", "any", "--min-saving", f"{below}")[1]
    gate = json.loads(out)["gate"]
    assert gate["failed"] and gate["exit"] == 1 and gate["matched"]
    assert len(gate["matched"]) + len(gate["below_min_saving"]) == len(shares)


@pytest.mark.parametrize("value", ["abc", "150%", "-1", "2"])
def test_bad_min_saving_is_exit_2(traces, capsys, value):
    status, out, err = cli(capsys, "report", traces["prefetch"], "--min-saving", value)
    assert status == 2 and not out and "--min-saving" in err and len(err.splitlines()) == 1
