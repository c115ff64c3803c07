"""A receive's early wait gates a load, not the kernel nor the other loads: the bound of a
hand-off whose consumer waits the token before work that needs neither it nor the gated
load (and before a load of its own) stays at or below the end of the same program
reordered (the wait and the load moved below the work), and the early order, short of its
bound by that much, keeps a finding."""

from __future__ import annotations

import kernels_bound_reorder as kb
import pytest

from kbdebug.analysis import Analysis
from kbdebug.replay import Replay

CONSUMER = 1


@pytest.fixture(scope="module")
def analyses(tmp_path_factory):
    """The Analysis of the early and the reordered program, by name."""
    root = tmp_path_factory.mktemp("bound_reorder")
    kernels = {
        "early": kb.token_waited_early,
        "own_after": kb.token_then_own_load,
        "late": kb.token_waited_late,
    }
    return {
        name: Analysis(Replay.open(kb.run(kernel, root / f"{name}.kbt"), cache=False))
        for name, kernel in kernels.items()
    }


def _consumer(analysis: Analysis):
    (bound,) = [b for b in analysis.bounds if b.pe == CONSUMER]
    return bound


@pytest.mark.parametrize("order", ["early", "own_after"])
def test_the_bound_is_no_later_than_the_reordered_programs_end(analyses, order):
    early, late = _consumer(analyses[order]), _consumer(analyses["late"])
    # The reorder pays: the early order waits the token above the dots.
    assert late.achieved < early.achieved
    assert early.bound <= late.achieved
    launch_bound, _ = analyses[order].launch_efficiency
    late_end = max(b.end for b in analyses["late"].bounds) - analyses["late"].model.start
    assert launch_bound <= late_end
    # Each run's own bound holds for itself too.
    for analysis in analyses.values():
        for b in analysis.bounds:
            assert b.bound <= b.achieved


@pytest.mark.parametrize("order", ["early", "own_after"])
def test_the_early_order_short_of_its_bound_keeps_a_finding(analyses, order):
    analysis = analyses[order]
    early, late = _consumer(analysis), _consumer(analyses["late"])
    gap = early.achieved - late.achieved
    assert gap > 0.1 * early.achieved
    mine = [f for f in analysis.findings if f.pe == CONSUMER]
    assert mine, "a kernel a reorder makes faster is reported at its bound"
    # What the findings save together is no more than the gap to the bound.
    assert 0 < sum(f.saving for f in mine) <= early.achieved - early.bound


@pytest.mark.parametrize("order", ["early", "own_after"])
def test_kb109_moves_the_wait_and_the_load_it_gates_below_the_work(analyses, order):
    analysis = analyses[order]
    early, late = _consumer(analysis), _consumer(analyses["late"])
    kernel = kb.token_waited_early if order == "early" else kb.token_then_own_load
    wait_line = kb.line_of(kernel, "early-wait")
    (f,) = [f for f in analysis.findings if f.rule == "KB109"]
    assert f.loc.line == wait_line
    # The fix names the gated load (moved without it, the load would read before the
    # message says the bytes landed) and saves no more than the reordered run measured.
    assert f"the load at kernels_bound_reorder.py:{wait_line + 1} right below it" in f.suggestion
    assert 0 < f.saving <= early.achieved - late.achieved
    assert f.saving <= early.achieved - early.bound
