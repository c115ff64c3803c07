"""The alignment of two runs (kbdebug.analysis.compare): calls paired by edit-proof identity
and occurrence across an edit, futures side by side, findings grouped, the header figures,
the same numbers as `kbdebug diff`; and `kbdebug compare` refusing bad files in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from emulator.trace.schema import Kind
from kbdebug.analysis.align import call_events
from kbdebug.analysis.compare import Comparison
from kbdebug.cli import main
from kbdebug.replay import Replay

KERNELS = Path(__file__).parent / "compare_kernels"
TRACES = Path(__file__).resolve().parents[1] / "traces"


def record(folder: Path, version: str) -> str:
    """Run ``compare_kernels/VERSION/decode.py:launch`` as a user would, into ``folder``."""
    trace = folder / f"{version}.kbt"
    status = main(["run", str(KERNELS / version / "decode.py") + ":launch", "-o", str(trace)])
    assert status == 0
    return str(trace)


@pytest.fixture(scope="session")
def edited_runs(tmp_path_factory) -> tuple[str, str]:
    """The small decode kernel before its fix and after (edited: lines moved, the wait's
    text changed, a tl.max dropped, the next load issued before the work)."""
    folder = tmp_path_factory.mktemp("compare")
    return record(folder, "before"), record(folder, "after")


@pytest.fixture
def comparison(edited_runs) -> Comparison:
    return Comparison(Replay.open(edited_runs[0]), Replay.open(edited_runs[1]))


def calls_of(comparison: Comparison, run: str, text: str) -> list[int]:
    """The events of ``run``'s tl calls made on the source line holding ``text``."""
    index = comparison.replay(run).index
    version = "before" if run == "a" else "after"
    line = line_of(version, text)
    events, locs = call_events(index)
    return [int(e) for e, loc in zip(events, locs, strict=True) if index.locs[loc].line == line]


def line_of(version: str, text: str) -> int:
    lines = (KERNELS / version / "decode.py").read_text().splitlines()
    return next(k + 1 for k, line in enumerate(lines) if text in line)


def test_each_wait_pairs_with_the_same_occurrence_across_the_edit(comparison):
    waits_a = calls_of(comparison, "a", "tl.wait(f)")
    waits_b = calls_of(comparison, "b", "tl.wait(fut)")
    assert len(waits_a) == len(waits_b) == 6
    # The text changed (f -> fut) and the line moved: paired through the aligned lines.
    assert [comparison.other_call("a", e) for e in waits_a] == waits_b
    assert [comparison.other_call("b", e) for e in waits_b] == waits_a
    keys = [comparison.call_key("a", e) for e in waits_a]
    assert [k.occurrence for k in keys] == list(range(6))
    assert all(k.site == keys[0].site for k in keys)


def test_a_call_the_fix_dropped_is_in_no_other_run(comparison):
    dropped = calls_of(comparison, "a", "tl.max(k, axis=1)")
    assert len(dropped) == 6
    assert all(comparison.other_call("a", e) is None for e in dropped)
    # The fix's first load (above the loop) is new in B: nothing in A is it.
    first_load = calls_of(comparison, "b", "fut = tl.load_async(k_ptr,")
    assert len(first_load) == 1 and comparison.other_call("b", first_load[0]) is None


def test_the_current_call_follows_the_position(comparison):
    waits = calls_of(comparison, "a", "tl.wait(f)")
    assert comparison.current_call("a", waits[2] + 1, 0) == waits[2]
    assert comparison.current_call("a", waits[2] + 2, 0) == waits[2]
    assert comparison.current_call("a", 0, 0) is None


def test_the_future_of_a_wait_is_side_by_side_with_its_counterpart(comparison):
    a = comparison.a
    wait = calls_of(comparison, "a", "tl.wait(f)")[1]
    future = int(a.index.columns.fut[wait])
    fa, fb = comparison.future_pair("a", future)
    assert fa.future == future and fb is not None
    b_wait = comparison.other_call("a", wait)
    assert fb.future == int(comparison.b.index.columns.fut[b_wait])
    # Before the fix the wait stalled for the whole transfer; after it, under the dot.
    assert fa.stall > 0 and fb.stall < fa.stall
    assert fa.issue <= fa.grant <= fa.done and fa.wait <= fa.resolved
    assert comparison.future_pair("b", fb.future) == (fa, fb)


def test_findings_are_grouped_fixed_new_still_there_with_savings(comparison):
    groups = comparison.findings
    assert [f.rule for f in groups.fixed] == ["KB102"]
    assert groups.fixed[0].saving > 0
    assert groups.new == [] and groups.still == []


def test_header_figures_are_the_diffs(comparison, edited_runs, capsys):
    end, efficiency, stall = comparison.headline
    assert main(["diff", *edited_runs, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_name = {c["name"]: c for c in doc["headline"]}
    assert (end.a, end.b) == (by_name["end cycle"]["a"], by_name["end cycle"]["b"])
    assert (stall.a, stall.b) == (by_name["stall cycles"]["a"], by_name["stall cycles"]["b"])
    assert end.verdict == stall.verdict == efficiency.verdict == "better"
    assert efficiency.a == pytest.approx(by_name["efficiency PE0"]["a"])
    removed = [f["id"] for f in doc["findings"]["removed"]]
    assert removed == [f.id for f in comparison.findings.fixed]


def test_a_moved_line_pairs_with_itself(comparison):
    a_file, b_file = comparison.a.index.locs[0].file, comparison.b.index.locs[0].file
    wait_a, wait_b = line_of("before", "tl.wait(f)"), line_of("after", "tl.wait(fut)")
    assert comparison.lines.b_line(a_file, wait_a) == (b_file, wait_b)
    rows = {r.a_where: r for r in comparison.diff.stall_by_line}
    row = rows[f"{a_file}:{wait_a}"]
    assert row.b_where == f"{b_file}:{wait_b}" and row.stall.a > row.stall.b


def test_identical_runs_pair_every_call(edited_runs):
    a = Replay.open(edited_runs[0])
    same = Comparison(a, Replay.open(edited_runs[0]))
    events = same.calls.calls("a")
    assert all(same.other_call("a", int(e)) == int(e) for e in events)
    assert {Kind(int(a.index.columns.kind[e])) for e in events} == {Kind.ISSUE, Kind.WAIT_BEGIN}


@pytest.mark.parametrize("content", [b"", b"not a trace at all", None])
def test_compare_refuses_a_bad_file_in_one_line(tmp_path, capsys, content):
    bad = tmp_path / "bad.kbt"
    if content is not None:
        bad.write_bytes(content)
    status = main([str(TRACES / "flawed_prefetch.kbt"), str(bad)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "Traceback" not in err and str(bad) in err


def test_compare_refuses_a_directory_and_an_escape_in_a_name(tmp_path, capsys):
    assert main(["compare", str(tmp_path), str(TRACES / "flawed_prefetch.kbt")]) == 2
    assert "is a directory" in capsys.readouterr().err
    hostile = tmp_path / "x\x1b]0;owned\x07.kbt"
    shutil.copy(TRACES / "flawed_prefetch.kbt", hostile)
    hostile.write_bytes(b"\x93garbage")
    assert main(["compare", str(hostile), str(TRACES / "flawed_prefetch.kbt")]) == 2
    assert "\x1b" not in capsys.readouterr().err
