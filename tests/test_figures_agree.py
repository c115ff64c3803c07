"""One trace, one set of figures: report, diff, compare, sweep and the model agree on each
bundled trace and on launches of many PEs (one with its work split unevenly, pipelines,
a tree), and the findings never contradict the efficiency beside them: a PE's findings
against its bound, KB111 (work moved between PEs) against the launch's balanced bound."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from kernels_across_pes import (
    copy_rows,
    copy_rows_prefetched,
    run_copy,
    run_gemm_rows,
    run_pipeline,
    run_tree,
)
from test_imbalance_pipeline import run_heavy_last_stage

from kbdebug.analysis import find_all, pe_bounds
from kbdebug.analysis.compare import Comparison
from kbdebug.analysis.imbalance import imbalance_of
from kbdebug.analysis.model import build_model, launch_efficiency
from kbdebug.cli import main
from kbdebug.commands.diff import diff_runs
from kbdebug.replay import Replay
from kbdebug.sweep.point import OK, _analyse

TRACES = sorted(Path(__file__).resolve().parents[1].glob("traces/*.kbt"))


def _gemm_uneven(path):
    run_gemm_rows(path, 20, spread=False)


def _copy_heavy(path):
    run_copy(copy_rows, path, heavy=3)


def _prefetched_heavy(path):
    run_copy(copy_rows_prefetched, path, heavy=3)


#: Launches of 8 PEs: three with one PE doing 3x the work (at its bound, its stores
#: waited, prefetched), a pipeline and a tree whose last PEs end late by the chain.
LAUNCHES = {
    "gemm_uneven": _gemm_uneven,
    "copy_heavy": _copy_heavy,
    "prefetched_heavy": _prefetched_heavy,
    "pipeline": run_pipeline,
    "tree": run_tree,
    # 4 send/recv stages, the last with 3 more multiplies a tile (held-out pipe4.py)
    "pipeline_heavy": run_heavy_last_stage,
}
IMBALANCED = {"gemm_uneven", "copy_heavy", "prefetched_heavy", "pipeline_heavy"}


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_every_command_shows_the_same_figures(path, tmp_path, capsys):
    _figures_agree(path, tmp_path, capsys)


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_every_command_shows_the_same_figures_on_a_mesh(name, tmp_path, capsys):
    path = tmp_path / "runs" / f"{name}.kbt"
    path.parent.mkdir()
    LAUNCHES[name](path)
    rules = _figures_agree(path, tmp_path, capsys)
    assert ("KB111" in rules) == (name in IMBALANCED)


def _figures_agree(path: Path, tmp_path: Path, capsys) -> set[str]:
    """Every command's figures for ``path`` against the model's; the rules found."""
    replay = Replay.open(path, cache=False)
    bounds = pe_bounds(replay)
    findings = find_all(replay)
    imbalance = imbalance_of(build_model(replay.index))
    balanced_end = None if imbalance is None else imbalance.balanced_end
    launch_bound, launch_eff = launch_efficiency(bounds, balanced_end)

    # report --json: the same bound and efficiency per PE.
    assert main(["report", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(e["pe"], e["bound"], e["efficiency"]) for e in doc["efficiency"]] == [
        (b.pe, b.bound, b.efficiency) for b in bounds
    ]
    # Each PE's findings' figure is within its gap; KB111's saving is the launch's.
    moved = max((f.saving for f in findings if f.rule == "KB111"), default=0)
    gaps = {b.pe: b.achieved - b.bound for b in bounds}
    saved = {e["pe"]: e["savings"] for e in doc["efficiency"]}
    assert all(0 <= saved[pe] <= gaps[pe] for pe in gaps)
    if doc["launch"] is not None:
        assert doc["launch"]["saving"] == moved
    # report's text: each PE's efficiency as computed, its figure as --json's, and
    # KB111's saving beside the launch's bound.
    assert main(["report", str(path)]) == 0
    text = capsys.readouterr().out
    for b in bounds:
        assert f"bound {b.bound:,}" in text and f"efficiency {b.efficiency:.1%}" in text
        row = [line for line in text.splitlines() if line.startswith(f"  PE{b.pe} ")]
        if row and "findings save up to ~" in row[0]:
            assert f"findings save up to ~{saved[b.pe]:,}" in row[0]
    if moved:
        assert f"\n  KB111 saves up to ~{moved:,} " in text

    # diff of the trace against a copy of itself: each PE's efficiency, unchanged.
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    diff = diff_runs(str(path), str(copy))
    per_pe = {c.name: (c.a, c.b) for c in diff.headline if c.name.startswith("efficiency PE")}
    assert per_pe == {f"efficiency PE{b.pe}": (b.efficiency, b.efficiency) for b in bounds}
    # ... and, on several PEs, the launch's efficiency that report and the header lead with.
    launch_rows = [(c.a, c.b) for c in diff.headline if c.name == "launch efficiency"]
    assert launch_rows == ([(launch_eff, launch_eff)] if len(bounds) > 1 else [])

    # compare's headline and a sweep point's row: the launch's efficiency.
    cmp = Comparison(Replay.open(path, cache=False), Replay.open(copy, cache=False))
    headline = {c.name: (c.a, c.b) for c in cmp.headline}
    assert headline["efficiency"] == (launch_eff, launch_eff)
    row = _analyse(0, str(copy), OK, None)
    assert row.efficiency == launch_eff
    assert row.bound == min(b.start for b in bounds) + launch_bound

    # The findings agree with the bound they stand beside: a PE's own bound, or for
    # KB111 (the work moved between PEs) the launch's, with the work split evenly.
    for b in bounds:
        assert b.bound <= b.achieved
        mine = [f for f in findings if f.pe == b.pe and f.rule != "KB111"]
        if b.efficiency == 1.0:
            assert mine == []
        for f in mine:
            assert 0 < f.pe_saving <= b.achieved - b.bound
            assert b.efficiency < 1.0
    start = min((b.start for b in bounds), default=0)
    end = max((b.end for b in bounds), default=0)
    if launch_eff == 1.0:
        assert findings == []
    if findings:
        assert launch_eff is not None and launch_eff < 1.0
    late = {f.pe: f for f in findings if f.rule == "KB111"}
    if late:
        assert imbalance is not None and set(late) <= set(imbalance.late)
        assert launch_bound < max(b.start + b.bound for b in bounds) - start
    for f in late.values():
        assert 0 < f.pe_saving <= f.saving <= end - (start + launch_bound)
    return {f.rule for f in findings}
