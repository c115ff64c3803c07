"""Hazards in `kbdebug diff` and the compare app: fixed in B, new in B and still there,
paired by rule and aligned lines, listed before the findings; a new hazard fails the gate
whatever the speed (a racy kernel against its fenced twin, and one whose lines moved)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_settle import settled
from kernels_hazards import line_of, raw_bug, raw_fenced, raw_lucky, record

from kbdebug.cli import main
from kbdebug.export import diff_json
from kbdebug.replay import Replay
from kbdebug.ui.compare.app import CompareApp
from kbdebug.ui.compare.findings import FindingGroupsView


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("diff_hazards")
    kernels = {"bug": raw_bug, "fenced": raw_fenced, "lucky": raw_lucky}
    return {name: str(record(k, root / f"{name}.kbt")) for name, k in kernels.items()}


def diff(capsys, a: str, b: str, *flags: str) -> tuple[int, dict, str]:
    """(exit status with --fail-on-regression, the JSON document, the text)."""
    status = main(["diff", a, b, "--json", "--fail-on-regression", *flags])
    doc = json.loads(capsys.readouterr().out)
    main(["diff", a, b])
    return status, doc, capsys.readouterr().out


def test_the_fence_fixes_the_hazard_and_the_text_lists_it_before_the_findings(runs, capsys):
    _, doc, text = diff(capsys, runs["bug"], runs["fenced"])
    hazards = doc["hazards"]
    assert [h["rule"] for h in hazards["fixed"]] == ["KB201"]
    assert hazards["new"] == hazards["still"] == []
    assert hazards["fixed"][0]["second"]["loc"]["line"] == line_of(raw_bug, "second")
    assert not any("hazard" in r for r in doc["regressions"])
    assert list(doc).index("hazards") < list(doc).index("findings")
    assert "1 fixed in B, 0 new in B, 0 still there" in text
    fixed = f"  fixed    KB201 kernels_hazards.py:{line_of(raw_bug, 'second')}  read-after-write"
    assert fixed in text
    assert text.index(fixed) < text.index("\nfindings:")


def test_a_new_hazard_is_a_regression_even_when_b_is_faster(runs, capsys):
    status, doc, text = diff(capsys, runs["fenced"], runs["bug"])
    assert doc["headline"][0]["delta"] < 0  # the racy run ends earlier
    assert [h["rule"] for h in doc["hazards"]["new"]] == ["KB201"]
    assert doc["regression"] and "B adds 1 hazard" in doc["regressions"]
    assert status == 1
    assert "REGRESSION: B adds 1 hazard" in text
    err = capsys.readouterr().err
    assert main(["diff", runs["fenced"], runs["bug"]]) == 0  # no gate without the flag
    assert "B adds 1 hazard" not in err


def test_a_hazard_whose_lines_moved_is_still_there_paired_by_the_aligned_lines(runs, capsys):
    _, doc, text = diff(capsys, runs["bug"], runs["lucky"])
    hazards = doc["hazards"]
    assert hazards["fixed"] == hazards["new"] == []
    (pair,) = hazards["still"]
    assert pair["a"]["second"]["loc"]["line"] == line_of(raw_bug, "second")
    assert pair["b"]["second"]["loc"]["line"] == line_of(raw_lucky, "second")
    assert pair["a"]["first"]["loc"]["line"] == line_of(raw_bug, "first")
    assert pair["b"]["first"]["loc"]["line"] == line_of(raw_lucky, "first")
    assert "B adds 1 hazard" not in doc["regressions"]
    moved = (
        f"still    KB201 kernels_hazards.py:{line_of(raw_lucky, 'second')} "
        f"(in A kernels_hazards.py:{line_of(raw_bug, 'second')})"
    )
    assert moved in text


def test_runs_without_hazards_print_no_hazard_section(runs, capsys):
    _, doc, text = diff(capsys, runs["fenced"], runs["fenced"])
    assert doc["hazards"] == {"fixed": [], "new": [], "still": []}
    assert "hazards (" not in text


def test_the_documented_diff_schema_is_the_code_s():
    """docs/json-schemas.md shows the schema block of kbdebug.export.diff_json."""
    doc = diff_json.to_json.__doc__
    block = doc[doc.index("        {\n") : doc.index("\n        }\n") + 10]
    block = "\n".join(line[8:] for line in block.split("\n"))
    page = (Path(__file__).parents[1] / "docs" / "json-schemas.md").read_text()
    assert '"hazards": {"fixed": [hazard]' in block
    assert block in page


async def test_the_compare_findings_pane_lists_the_fixed_hazard_first_and_enter_goes_to_it(
    runs,
):
    app = CompareApp(Replay.open(runs["bug"]), Replay.open(runs["fenced"]))
    async with app.run_test(size=(160, 48)) as pilot:
        await settled(pilot)
        view = app.query_one(FindingGroupsView)
        titles = [r.text for r in view._rows if r.finding is None]
        assert titles[:3] == [
            "hazards fixed in B (1)",
            "hazards new in B (none)",
            "hazards still there (none)",
        ]
        assert titles[3].startswith("fixed in B")
        hazard = app.comparison.findings.hazards.fixed[0]
        assert view._rows[view.cursor].finding == hazard
        await pilot.press("x")  # focus B: the fixed hazard is A's, so A gets focus
        view.focus()
        await pilot.pause()
        await pilot.press("enter")
        assert app.side == "a"
        assert app.replays["a"].position - 1 in hazard.events
        assert "KB201" in app.status
