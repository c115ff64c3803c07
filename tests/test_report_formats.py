"""`kbdebug report --format sarif|github|junit|markdown`: valid documents that say what
the findings say, GitHub's limits and escapes, and the exit statuses of any format."""

from __future__ import annotations

import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import kernels_hazards as kh
import pytest

from kbdebug.analysis import Analysis
from kbdebug.analysis.finding import RULES
from kbdebug.analysis.hazards import HAZARD_RULES
from kbdebug.cli import main
from kbdebug.export import github
from kbdebug.export.markdown import md_text
from kbdebug.launch.launcher import load
from kbdebug.replay import Replay

HERE = Path(__file__).parent
BUNDLED = HERE.parent / "traces"
SCHEMA = json.loads((HERE / "data" / "sarif-schema-2.1.0.json").read_text())
HELPER_KERNEL = HERE / "corpus" / "sync_fetch_helper_three_tiles.py"
#: One GitHub workflow command: ``::KIND key=value,key=value::message`` with every value
#: escaped (no raw ``:``, ``,``, CR or LF in a value; no CR or LF in the message).
COMMAND = re.compile(
    r"::(error|warning|notice)( [a-z]+=[^:,\r\n]*(,[a-z]+=[^:,\r\n]*)*)?::[^\r\n]*"
)


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    """Bundled traces (one PE with two findings, four PEs, one clean), one with a finding
    inside a helper, one with a hazard across two PEs, and one cut short."""
    root = tmp_path_factory.mktemp("formats")
    helper = root / "helper.kbt"
    load(f"{HELPER_KERNEL}:launch_bug").builder().run(trace=helper)
    cut = root / "cut.kbt"
    whole = (BUNDLED / "flawed_prefetch.kbt").read_bytes()
    cut.write_bytes(whole[: len(whole) // 2])
    return {
        "hazard": kh.record(kh.raw_across_bug, root / "hazard.kbt", pes=2),
        "flawed": BUNDLED / "flawed_prefetch.kbt",
        "ring": BUNDLED / "ring_attention.kbt",
        "clean": BUNDLED / "decode_prefetch.kbt",
        "helper": helper,
        "cut": cut,
    }


def report(capsys, *args) -> tuple[int, str, str]:
    status = main(["report", *map(str, args)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def findings_json(capsys, path) -> list[dict]:
    status, out, err = report(capsys, path, "--json")
    assert status == 0, err
    return json.loads(out)["findings"]


# --- SARIF ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["flawed", "ring", "clean", "helper", "hazard", "cut"])
def test_sarif_is_valid_against_the_2_1_0_schema(traces, capsys, name):
    status, out, err = report(capsys, traces[name], "--format", "sarif")
    assert status == 0, err
    log = json.loads(out)
    errors = sorted(jsonschema.Draft4Validator(SCHEMA).iter_errors(log), key=str)
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])
    assert log["version"] == "2.1.0"


def test_sarif_has_one_rule_per_code_with_help_and_level(traces, capsys):
    _, out, _ = report(capsys, traces["flawed"], "--format", "sarif")
    rules = json.loads(out)["runs"][0]["tool"]["driver"]["rules"]
    names = {**RULES, **HAZARD_RULES}
    assert [r["id"] for r in rules] == sorted(names)
    for r in rules:
        assert r["name"] == names[r["id"]]
        assert r["shortDescription"]["text"] and r["help"]["text"]
    levels = {r["id"]: r["defaultConfiguration"]["level"] for r in rules}
    assert levels["KB102"] == "warning" and levels["KB106"] == "note"
    assert levels["KB201"] == levels["KB202"] == levels["KB203"] == "error"


def test_sarif_result_is_at_the_helper_line_with_its_caller_saving_and_id(traces, capsys):
    (finding,) = findings_json(capsys, traces["helper"])
    _, out, _ = report(capsys, traces["helper"], "--format", "sarif")
    run = json.loads(out)["runs"][0]
    (result,) = run["results"]
    assert result["ruleId"] == "KB102" == run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"]
    where = result["locations"][0]["physicalLocation"]
    assert where["artifactLocation"] == {"uri": finding["loc"]["file"], "uriBaseId": "SRCROOT"}
    assert where["region"]["startLine"] == finding["loc"]["line"]
    source = HELPER_KERNEL.read_text().splitlines()
    assert "expect: KB102" in source[finding["loc"]["line"] - 1]
    (caller,) = result["relatedLocations"]
    assert "expect-call" in source[caller["physicalLocation"]["region"]["startLine"] - 1]
    assert result["partialFingerprints"] == {"kbdebugFindingId/v1": finding["id"]}
    assert result["properties"]["saving"] == finding["saving"] > 0
    assert f"est. saving {finding['saving']:,} cycles" in result["message"]["text"]


def test_sarif_of_a_run_that_did_not_complete_says_so(traces, capsys):
    _, out, _ = report(capsys, traces["cut"], "--format", "sarif")
    (invocation,) = json.loads(out)["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    assert "did not complete" in invocation["toolExecutionNotifications"][0]["message"]["text"]


def test_a_hazard_is_an_error_at_its_second_access_with_the_first_and_the_fix_related(
    traces, capsys
):
    (hazard,) = Analysis(Replay.open(traces["hazard"], cache=False)).hazards
    _, out, _ = report(capsys, traces["hazard"], "--format", "sarif")
    (result,) = json.loads(out)["runs"][0]["results"]
    assert result["ruleId"] == "KB201" and result["level"] == "error"
    lines = [r["physicalLocation"]["region"]["startLine"] for r in result["relatedLocations"]]
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == kh.line_of(
        kh.raw_across_bug, "second"
    )
    assert lines == [kh.line_of(kh.raw_across_bug, "first"), hazard.fix_loc.line]
    assert result["partialFingerprints"] == {"kbdebugFindingId/v1": hazard.id}
    assert result["properties"]["pes"] == [0, 1] and result["properties"]["acrossPes"]


# --- GitHub annotations -------------------------------------------------------------------


def test_github_lines_are_workflow_commands_at_the_findings_lines(traces, capsys):
    findings = findings_json(capsys, traces["flawed"])
    status, out, _ = report(capsys, traces["flawed"], "--format", "github")
    lines = out.splitlines()
    assert status == 0 and len(lines) == len(findings) == 2
    for line, f in zip(lines, findings, strict=True):
        assert COMMAND.fullmatch(line), line
        assert line.startswith(f"::warning file={f['loc']['file']},line={f['loc']['line']},")
        assert "title=KB102 wait-right-after-issue" in line
        assert f"{f['saving']:,} cycles" in line


def test_github_annotates_a_hazard_as_an_error(traces, capsys):
    (line,) = report(capsys, traces["hazard"], "--format", "github")[1].splitlines()
    second = kh.line_of(kh.raw_across_bug, "second")
    assert COMMAND.fullmatch(line)
    assert line.startswith(f"::error file=tests/kernels_hazards.py,line={second},title=KB201")


def test_github_escapes_as_the_actions_toolkit_does():
    assert github.escape_data("50% a\r\nb: c, d") == "50%25 a%0D%0Ab: c, d"
    assert github.escape_property("a:b,c%d\r\n") == "a%3Ab%2Cc%25d%0D%0A"


class ManyFindings(Analysis):
    """The flawed trace's analysis with its first finding made 13 (a trace with more
    than GitHub shows in a step)."""

    @property
    def findings(self):
        first = super().findings[0]
        return [
            dataclasses.replace(first, id=f"{first.id}~{i}", saving=first.saving - i)
            for i in range(13)
        ]


def test_github_annotates_ten_of_a_kind_then_says_how_many_more(traces):
    analysis = ManyFindings(Replay.open(traces["flawed"], cache=False))
    lines = github.annotations(analysis, "t.kbt").splitlines()
    assert [COMMAND.fullmatch(x) is not None for x in lines] == [True] * 10 + [False]
    assert lines[0].endswith("~0") and lines[9].endswith("~9")  # the largest ten, in order
    assert lines[-1].startswith("kbdebug: 3 more findings not annotated")


# --- Markdown ----------------------------------------------------------------------------


def test_markdown_summary_has_a_row_per_finding(traces, capsys):
    findings = findings_json(capsys, traces["ring"])
    status, out, _ = report(capsys, traces["ring"], "--format", "markdown")
    rows = [x for x in out.splitlines() if x.startswith("| KB")]
    assert status == 0 and len(rows) == len(findings) == 1
    assert rows[0].count(" | ") == 5  # six cells: nothing from the trace split one
    assert f"{findings[0]['saving']:,} cycles" in rows[0]
    assert "efficiency" in out


def test_markdown_text_from_a_trace_is_never_markup():
    text = md_text("a | b <script>x</script> [link](http://e) *em* `c`\n# h \x1b[31m")
    assert "|" not in text.replace("\\|", "")
    assert "<" not in text and "\n" not in text and "\x1b" not in text
    assert "\\[link\\]" in text and "\\*em\\*" in text and "\\`c\\`" in text


# --- JUnit -------------------------------------------------------------------------------


def test_junit_has_a_case_per_pe_failing_with_its_findings(traces, capsys):
    (finding,) = findings_json(capsys, traces["ring"])
    status, out, _ = report(capsys, traces["ring"], "--format", "junit")
    suite = ET.fromstring(out).find("testsuite")
    cases = suite.findall("testcase")
    assert status == 0 and [c.get("name") for c in cases] == ["PE 0", "PE 1", "PE 2", "PE 3"]
    assert suite.get("tests") == "4" and suite.get("failures") == "4"
    for case in cases:
        failure = case.find("failure")
        assert failure.get("type") == "KB101" and finding["id"] in failure.text


def test_junit_fails_only_what_the_gate_counts(traces, capsys):
    status, out, _ = report(capsys, traces["flawed"], "--format", "junit", "--fail-on", "KB104")
    suite = ET.fromstring(out).find("testsuite")
    assert status == 0 and suite.get("tests") == "1" and suite.get("failures") == "0"
    assert "KB102" in suite.find("testcase/system-out").text
    clean = ET.fromstring(report(capsys, traces["clean"], "--format", "junit")[1])
    assert clean.get("failures") == "0" and clean.find("testsuite/testcase") is not None


def test_junit_fails_each_pe_of_a_hazard_whatever_the_gate(traces, capsys):
    _, out, _ = report(capsys, traces["hazard"], "--format", "junit", "--fail-on", "KB104")
    suite = ET.fromstring(out).find("testsuite")
    assert suite.get("tests") == suite.get("failures") == "2"
    failure = suite.find("testcase/failure")
    assert failure.get("type") == "KB201" and failure.get("message") == "1 hazard"
    assert f"kernels_hazards.py:{kh.line_of(kh.raw_across_bug, 'second')}" in failure.text
    rows = report(capsys, traces["hazard"], "--format", "markdown")[1].splitlines()
    assert [r.split(" | ")[3] for r in rows if r.startswith("| KB")] == ["hazard"]


def test_junit_of_a_run_that_did_not_complete_is_an_error(traces, capsys):
    _, out, _ = report(capsys, traces["cut"], "--format", "junit")
    suite = ET.fromstring(out).find("testsuite")
    assert suite.get("errors") == suite.get("tests") != "0"
    assert "did not complete" in suite.find("testcase/error").get("message")


# --- exit statuses -----------------------------------------------------------------------


@pytest.mark.parametrize("form", ["sarif", "github", "junit", "markdown", "json"])
def test_fail_on_exits_as_with_text_whatever_the_format(traces, capsys, form):
    assert report(capsys, traces["flawed"], "--format", form, "--fail-on", "any")[0] == 1
    assert report(capsys, traces["clean"], "--format", form, "--fail-on", "any")[0] == 0
    assert report(capsys, traces["cut"], "--format", form, "--fail-on", "any")[0] == 3


def test_json_and_another_format_together_is_a_usage_error(traces, capsys):
    status, out, err = report(capsys, traces["flawed"], "--json", "--format", "sarif")
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert report(capsys, traces["flawed"], "--json", "--format", "json")[0] == 0
