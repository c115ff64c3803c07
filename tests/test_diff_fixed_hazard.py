"""`kbdebug diff --fail-on-regression`: a B that fixes A's hazard (and adds none) is no
regression though its fence costs cycles; the other way round still is."""

from __future__ import annotations

import pytest
from kernels_hazards import raw_bug, raw_fenced, record

from kbdebug.cli import main


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("diff_fixed_hazard")
    return {
        "bug": str(record(raw_bug, root / "bug.kbt")),
        "fenced": str(record(raw_fenced, root / "fenced.kbt")),
    }


def test_fixing_a_hazard_at_the_cost_of_cycles_is_no_regression(runs, capsys):
    status = main(["diff", runs["bug"], runs["fenced"], "--fail-on-regression"])
    out = capsys.readouterr()
    assert "worse" in out.out  # the fence makes B end later ...
    assert "1 fixed in B" in out.out
    assert status == 0, out.err  # ... which is the fix's cost, not a regression
    assert "REGRESSION" not in out.out and "regression" not in out.err


def test_a_new_hazard_is_still_a_regression(runs, capsys):
    status = main(["diff", runs["fenced"], runs["bug"], "--fail-on-regression"])
    assert status == 1
    assert "REGRESSION: B adds 1 hazard" in capsys.readouterr().out
