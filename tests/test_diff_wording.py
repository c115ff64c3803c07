"""`kbdebug diff`'s words: its verdict counts new findings as findings, never as hazards
('1 hazard fixed, 1 new' read as a new hazard), and a run whose output check failed is
headed 'completed, output check failed' as ``report`` says it, never 'ok'."""

from __future__ import annotations

import pytest
from kernels_hazards import raw_bug, record

from emulator.trace.schema import SourceLoc
from kbdebug.analysis import Analysis
from kbdebug.analysis.check_verdict import CheckVerdict
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.run_diff import compare
from kbdebug.analysis.summary import Summary
from kbdebug.commands.diff import render
from kbdebug.export import report_text
from kbdebug.replay import Replay

KERNEL = "k.py"
WRONG = CheckVerdict(False, "not equal", "Y[32:64, :]")


def summary(end: int, check: CheckVerdict | None = None) -> Summary:
    return Summary(
        kernel="k",
        grid=(1,),
        n_pes=1,
        status="ok",
        error=None,
        error_loc=None,
        n_events=100,
        end_time=end,
        channels=[],
        stall_cycles=0,
        stall_by_line=[],
        counts={"dma_read_count": 1},
        check=check,
    )


def finding(rule: str, line: int) -> Finding:
    return Finding(
        id=f"{rule}:{KERNEL}:{line}",
        rule=rule,
        title="blocking-load",
        pe=0,
        start=0,
        end=10,
        events=(0,),
        loc=SourceLoc(KERNEL, line, "k"),
        message="m",
        suggestion="s",
    )


@pytest.fixture(scope="module")
def racy_hazards(tmp_path_factory):
    path = record(raw_bug, tmp_path_factory.mktemp("diff_wording") / "bug.kbt")
    hazards = list(Analysis(Replay.open(path, cache=False)).hazards)
    assert len(hazards) == 1
    return hazards


def test_a_fixed_hazard_and_a_new_finding_are_said_apart(racy_hazards):
    diff = compare(summary(1000), summary(1100), [], [finding("KB101", 7)], a_hazards=racy_hazards)
    last = render(diff, "a.kbt", "b.kbt").rstrip().splitlines()[-1]
    assert last == (
        "B is slower: 100 more cycles (+10.0%), 1 hazard fixed, 1 new finding (listed above)"
    )


def test_new_findings_are_counted_as_findings():
    diff = compare(summary(1000), summary(900), [], [finding("KB101", 7), finding("KB102", 9)])
    assert render(diff, "a.kbt", "b.kbt").rstrip().endswith(", 2 new findings (listed above)")


def test_a_run_whose_check_failed_is_not_headed_ok():
    diff = compare(summary(1000, WRONG), summary(1000, CheckVerdict(True)), [], [])
    a, b = render(diff, "a.kbt", "b.kbt").splitlines()[:2]
    assert a == "A: a.kbt  (k, completed, output check failed, 100 events)"
    assert b == "B: b.kbt  (k, ok, 100 events)"


def test_report_words_a_failed_check_as_diff_does():
    first = report_text.render("a.kbt", summary(1000, WRONG), [], []).splitlines()[0]
    assert first == "status: completed, output check failed (first wrong block Y[32:64, :])"
    passed = report_text.render("a.kbt", summary(1000, CheckVerdict(True)), [], [])
    assert passed.splitlines()[0] == "status: ok; output check passed"
