"""One bug on many PEs is one finding, and the report of a mesh fits on a screen."""

from __future__ import annotations

import json
import re

import pytest

import kbdebug.export.report_json as report_json
from emulator.config import HardwareConfig
from emulator.scenarios import SCENARIOS
from kbdebug.analysis import Analysis, find_all, matches
from kbdebug.analysis.across_pes import short_id, where_text
from kbdebug.cli import main
from kbdebug.replay import Replay

PES = 16


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    """Prefill with one block of rows per PE, prefetched one tile ahead of a long HBM
    latency: the same two bugs on all 16 PEs."""
    path = tmp_path_factory.mktemp("mesh") / "prefill16.kbt"
    scenario = SCENARIOS["prefill"](pes=PES, depth=1, n_tiles=8)
    scenario.config = HardwareConfig(**{**scenario.config.__dict__, "hbm_latency": 3000})
    scenario.run(trace=path)
    return str(path)


def run_report(capsys, *args) -> tuple[int, str]:
    code = main(["report", *args])
    return code, capsys.readouterr().out


def test_the_same_bug_on_every_pe_is_one_finding_that_says_where(mesh):
    replay = Replay.open(mesh, cache=False)
    per_pe = find_all(replay)
    grouped = Analysis(replay).findings
    rules = sorted({f.rule for f in per_pe})
    assert sorted(f.rule for f in grouped) == rules  # one per rule and site
    for f in grouped:
        mine = [g for g in per_pe if g.rule == f.rule and g.loc == f.loc]
        assert f.pes == tuple(sorted(g.pe for g in mine)) == tuple(range(PES))
        assert sorted(f.pe_savings) == sorted(g.pe_saving for g in mine)
        assert f.saving == max(g.saving for g in mine)
        assert f.count == sum(g.count for g in mine)
        assert ":pe" not in f.id and where_text(f, PES) == f"on {PES} of {PES} PEs"


def test_a_mesh_report_fits_on_a_screen_and_says_what_totals_add_up(mesh, capsys):
    code, text = run_report(capsys, mesh)
    assert code == 0
    lines = text.splitlines()
    assert len(lines) < 150
    assert f"(summed over {PES} PEs)" in text
    assert text.count("prefetch-too-shallow") == 1
    assert re.search(r"achieved\s+[\d,]+ on every PE", text)
    assert f"on {PES} of {PES} PEs" in text
    # --per-pe lists each PE and each channel again.
    code, whole = run_report(capsys, mesh, "--per-pe")
    assert code == 0
    for pe in range(PES):
        assert re.search(rf"^\s+PE{pe}\s+achieved", whole, re.M)
        assert f"pe{pe}.dma_read0" in whole


def test_short_ids_are_shown_and_select_in_fail_on(mesh, capsys):
    replay = Replay.open(mesh, cache=False)
    (deep,) = [f for f in Analysis(replay).findings if f.rule == "KB107"]
    short = short_id(deep)
    assert re.fullmatch(r"KB107 pipeline\.py:\d+ ← attention\.py:\d+", short)
    code, text = run_report(capsys, mesh)
    assert short in text
    helper_line = short.split(" ← ")[0]
    for selector in (short, short.replace("←", "<-"), helper_line, f"{deep.id}:pe3"):
        assert matches(deep, selector), selector
        code, _ = run_report(capsys, mesh, "--fail-on", selector)
        assert code == 1, selector
    assert not matches(deep, f"{deep.id}:pe{PES}")  # it holds on PEs 0..15 only
    code, _ = run_report(capsys, mesh, "--fail-on", "KB107 pipeline.py:1")
    assert code == 0


def test_json_keeps_the_canonical_id_and_lists_the_pes(mesh, capsys):
    main(["report", mesh, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "kbdebug.report/4"
    for f in doc["findings"]:
        assert f["pes"] == list(range(PES)) and len(f["pe_savings"]) == PES
        assert f["short_id"].startswith(f["rule"] + " ")
        assert f["id"].startswith(f["rule"] + ":") and ":pe" not in f["id"]


def test_the_documented_report_schema_is_the_code_s():
    """docs/json-schemas.md shows the schema block of kbdebug.export.report_json."""
    from pathlib import Path

    doc = report_json.__doc__
    block = doc[doc.index("    {\n") :].rstrip()
    block = "\n".join(line[4:] for line in block.split("\n"))
    page = (Path(__file__).parents[1] / "docs" / "json-schemas.md").read_text()
    assert block in page


def _gap(pe: int, gap: int):
    from emulator.trace.schema import SourceLoc
    from kbdebug.analysis.finding import Finding

    loc = SourceLoc("k.py", 3, "kernel")
    ident = "KB106:k.py::kernel::def#0" + (f":pe{pe}" if pe else "")
    return Finding(ident, "KB106", "below-bound", pe, 0, 1, (pe,), loc, "m", "s", gap, 0.1, gap)


def test_a_below_bound_gap_saves_on_the_launch_only_what_its_last_pe_gives_back():
    """KB106 is a per-PE gap; on a mesh its saving is what the launch's end gains with
    every listed PE's gap closed: nothing when a PE without the gap ends last."""
    from kbdebug.analysis.across_pes import group_across_pes

    ends = {0: 1000, 1: 1200, 2: 900}
    # PE 1 ends last and has no gap: closing PE 0's and PE 2's saves nothing.
    assert group_across_pes([_gap(0, 300), _gap(2, 100)], ends=ends, floor=0.03) == []
    # PE 1's gap of 400: the launch then ends with PE 0 at 1000, 200 earlier.
    (f,) = group_across_pes([_gap(1, 400), _gap(2, 100)], ends=ends, start=0, floor=0.03)
    assert (f.saving, f.pes, f.pe_savings) == (200, (1, 2), (400, 100))
    assert f.share == 200 / 1200
    # Below the floor (3 % of 1,200 cycles) it is dropped.
    assert group_across_pes([_gap(1, 30)], ends=ends, floor=0.03) == []
