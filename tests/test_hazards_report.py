"""Hazards in ``kbdebug report``: listed before the findings (text and --json), and any
one fails ``--fail-on any`` or ``--fail-on hazard`` whatever ``--min-saving`` says."""

from __future__ import annotations

import json

import kernels_hazards as kh
import pytest

from kbdebug.analysis.select import parse_selectors
from kbdebug.cli import main


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """A racy kernel (a store read back unwaited) and its fenced twin."""
    root = tmp_path_factory.mktemp("hazard_report")
    return {
        "bug": str(kh.record(kh.raw_bug, root / "bug.kbt")),
        "fenced": str(kh.record(kh.raw_fenced, root / "fenced.kbt")),
    }


def report(capsys, *args) -> tuple[int, str, str]:
    code = main(["report", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_text_lists_hazards_before_the_findings(traces, capsys):
    code, out, _ = report(capsys, traces["bug"])
    assert code == 0
    first, second = kh.line_of(kh.raw_bug, "first"), kh.line_of(kh.raw_bug, "second")
    assert out.index("hazards (1:") < out.index("\nfindings")
    section = out[out.index("hazards (1:") : out.index("\nfindings")]
    assert "KB201 read-after-write  on PE 0" in section
    assert f"store at tests/kernels_hazards.py:{first}" in section
    assert f"load_async at tests/kernels_hazards.py:{second}" in section
    assert "fix: tl.wait the store" in section
    _, fenced, _ = report(capsys, traces["fenced"])
    assert "hazards: none" in fenced


def test_json_has_the_hazard_with_both_lines_before_the_findings(traces, capsys):
    _, out, _ = report(capsys, traces["bug"], "--json")
    doc = json.loads(out)
    keys = list(doc)
    assert keys.index("hazards") < keys.index("findings")
    (hazard,) = doc["hazards"]
    assert hazard["rule"] == "KB201" and hazard["across_pes"] is False
    assert hazard["first"]["loc"]["line"] == kh.line_of(kh.raw_bug, "first")
    assert hazard["second"]["loc"]["line"] == kh.line_of(kh.raw_bug, "second")
    assert hazard["bytes"]["hi"] - hazard["bytes"]["lo"] == kh.TILE
    assert hazard["fix"]["loc"]["line"] == kh.line_of(kh.raw_bug, "second")
    _, fenced, _ = report(capsys, traces["fenced"], "--json")
    assert json.loads(fenced)["hazards"] == []


@pytest.mark.parametrize("selector", ["any", "hazard", "HAZARD", "kb201"])
def test_a_hazard_fails_the_gate_whatever_its_size(traces, capsys, selector):
    code, out, err = report(capsys, traces["bug"], "--fail-on", selector, "--min-saving", "100%")
    assert code == 1, err
    assert "matched 1 hazard" in err and "read-after-write" in err
    code, _, err = report(capsys, traces["fenced"], "--fail-on", selector)
    assert code == 0, err


def test_other_selectors_leave_hazards_alone(traces, capsys):
    code, _, err = report(capsys, traces["bug"], "--fail-on", "KB203,KB102")
    assert code == 0, err
    _, out, _ = report(capsys, traces["bug"], "--json", "--fail-on", "hazard")
    gate = json.loads(out)["gate"]
    assert gate["failed"] and gate["matched"] == [json.loads(out)["hazards"][0]["id"]]


def test_hazard_is_a_selector():
    assert parse_selectors(["Hazard,kb202"]) == ["hazard", "KB202"]
    with pytest.raises(ValueError, match="'hazard'"):
        parse_selectors(["hazards"])
