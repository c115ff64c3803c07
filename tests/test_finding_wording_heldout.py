"""Stream findings' words against the trace: KB107 on a two-stream ring names each load
line's own wait line and that line's stall; KB102 names where the first tile goes when its
saving was re-timed with it there, and that edit reaches the saving."""

from __future__ import annotations

import kernels_finding_wording as kw
import kernels_for_findings as kf
import pytest

from kbdebug.analysis import pe_bounds
from kbdebug.analysis.findings import find_all
from kbdebug.analysis.summary import stall_by_pe_line

FILE = "tests/kernels_finding_wording.py"
NAME = "kernels_finding_wording.py"


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Each kernel's trace, recorded once."""
    root = tmp_path_factory.mktemp("wording")
    return {
        "ring": kw.run_ring(kw.ring_one_ahead, root / "ring.kbt"),
        "fetch": kw.run_fetch(kw.fetched_below_blocking, root / "fetch.kbt"),
        "above": kw.run_fetch(kw.first_above_blocking, root / "above.kbt"),
        "below": kw.run_fetch(kw.first_below_blocking, root / "below.kbt"),
    }


def only(replay, rule: str):
    found = [f for f in find_all(replay) if f.rule == rule]
    assert len(found) == 1, [(f.rule, f.message) for f in find_all(replay)]
    return found[0]


def end(replay) -> int:
    (bound,) = pe_bounds(replay)
    return bound.achieved


def test_kb107_on_two_streams_names_each_lines_wait_line_and_its_stall(traces):
    replay = traces["ring"]
    finding = only(replay, "KB107")
    line = lambda mark: kf.line_of(kw.ring_one_ahead, mark)  # noqa: E731
    assert finding.loc.line == line("y_next")
    assert [loc.line for loc in finding.also] == [line("x_next")]
    stalls = stall_by_pe_line(replay.index)[0]
    y_stall, x_stall = stalls[(FILE, line("y_wait"))], stalls[(FILE, line("x_wait"))]
    assert x_stall > 0 and y_stall > 0
    # The named load's futures are waited at y_wait: that line and its stall, the primed
    # first tile's wait among them; the other stream's figure is its own.
    assert (
        f"its waits at {NAME}:{line('y_wait')} still stalled {y_stall:,} cycles "
        f"(the wait of the load at {NAME}:{line('y_first')} among them)"
    ) in finding.message, finding.message
    assert (
        f"their waits at {NAME}:{line('x_wait')} stalled {x_stall:,} cycles"
    ) in finding.message, finding.message
    assert f"{x_stall + y_stall:,}" not in finding.message
    assert "the saving is of both fixed together" in finding.message
    # The saving removes no more than the stall the message names.
    assert 0 < finding.saving <= x_stall + y_stall


def test_kb102_names_the_first_issue_above_the_blocking_load_and_that_edit_saves_it(traces):
    finding = only(traces["fetch"], "KB102")
    q_line = kf.line_of(kw.fetched_below_blocking, "q")
    assert "right after the previous tile's tl.wait" in finding.suggestion
    assert f"the first tile before {NAME}:{q_line}," in finding.suggestion, finding.suggestion
    # The edit described (tile 0 above the blocking load) gains the saving stated.
    gain = end(traces["fetch"]) - end(traces["above"])
    assert abs(finding.saving - gain) <= 0.01 * gain, (finding.saving, gain)
    # Tile 0 issued just before the loop instead gains clearly less: the words matter.
    short = end(traces["fetch"]) - end(traces["below"])
    assert finding.saving - short > 0.01 * finding.saving, (finding.saving, short)


def test_kb102_names_no_first_line_when_the_first_load_stays_put(tmp_path):
    finding = only(kf.run(kf.wait_right_after_issue, tmp_path / "first.kbt"), "KB102")
    assert "the first tile" not in finding.suggestion, finding.suggestion
    assert "right after the previous tile's tl.wait, so the work" in finding.suggestion
