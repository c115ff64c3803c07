"""One trace, one set of figures: report, diff, compare, sweep and the model agree on each
bundled trace, and the findings never contradict the efficiency beside them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kbdebug.analysis import find_all, pe_bounds
from kbdebug.analysis.compare import Comparison
from kbdebug.analysis.model import launch_efficiency
from kbdebug.cli import main
from kbdebug.commands.diff import diff_runs
from kbdebug.replay import Replay
from kbdebug.sweep.point import OK, _analyse

TRACES = sorted(Path(__file__).resolve().parents[1].glob("traces/*.kbt"))


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_every_command_shows_the_same_figures(path, tmp_path, capsys):
    replay = Replay.open(path, cache=False)
    bounds = pe_bounds(replay)
    findings = find_all(replay)
    launch_bound, launch_eff = launch_efficiency(bounds)

    # report --json: the same bound and efficiency per PE.
    assert main(["report", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(e["pe"], e["bound"], e["efficiency"]) for e in doc["efficiency"]] == [
        (b.pe, b.bound, b.efficiency) for b in bounds
    ]
    # report's text: each PE's efficiency as computed.
    assert main(["report", str(path)]) == 0
    text = capsys.readouterr().out
    for b in bounds:
        assert f"bound {b.bound:,}" in text and f"efficiency {b.efficiency:.1%}" in text

    # diff of the trace against a copy of itself: each PE's efficiency, unchanged.
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    diff = diff_runs(str(path), str(copy))
    per_pe = {c.name: (c.a, c.b) for c in diff.headline if c.name.startswith("efficiency PE")}
    assert per_pe == {f"efficiency PE{b.pe}": (b.efficiency, b.efficiency) for b in bounds}

    # compare's headline and a sweep point's row: the launch's efficiency.
    cmp = Comparison(Replay.open(path, cache=False), Replay.open(copy, cache=False))
    headline = {c.name: (c.a, c.b) for c in cmp.headline}
    assert headline["efficiency"] == (launch_eff, launch_eff)
    row = _analyse(0, str(copy), OK, None)
    assert row.efficiency == launch_eff
    assert row.bound == min(b.start for b in bounds) + launch_bound

    # The findings agree with the bound they stand beside.
    for b in bounds:
        assert b.bound <= b.achieved
        mine = [f for f in findings if f.pe == b.pe]
        if b.efficiency == 1.0:
            assert mine == []
        for f in mine:
            assert 0 < f.pe_saving <= b.achieved - b.bound
            assert b.efficiency < 1.0
