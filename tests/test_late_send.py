"""KB112 send-issued-late and the bound's sends: a send issued after work its data does
not need holds back the PE that receives it. The bound lets every send leave once its
data is ready, so the fixed twin never ends below the late run's raw bound; the finding
names the send line, its saving is the fixed twin's measured gain, and the twin gets none."""

from __future__ import annotations

import kernels_late_send as kl
import pytest

from kbdebug.analysis import Analysis
from kbdebug.analysis.model import build_model, launch_efficiency
from kbdebug.cli import main
from kbdebug.replay import Replay

PAIRS = {
    "ring": (kl.ring_late, kl.ring_early, kl.run_ring),
    "pipeline": (kl.pipe_late, kl.pipe_early, kl.run_pipe),
}


@pytest.fixture(scope="module", params=sorted(PAIRS))
def pair(request, tmp_path_factory):
    """(late kernel, late run's Replay, fixed twin's Replay) of a ring of 4 PEs or a
    pipeline of 4 stages."""
    late, early, run = PAIRS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    bug = Replay.open(run(late, root / "late.kbt"), cache=False)
    fixed = Replay.open(run(early, root / "early.kbt"), cache=False)
    return late, bug, fixed


def _span(replay: Replay) -> int:
    """The launch's recorded length: its first PE's start to its last PE's end."""
    model = build_model(replay.index)
    return model.end - model.start


def _launch_bound(replay: Replay) -> int:
    """The raw launch bound (never clamped to what was achieved)."""
    bound, _ = launch_efficiency(build_model(replay.index).bounds())
    return bound


def test_the_fixed_twin_never_ends_below_the_late_runs_bound(pair):
    _, bug, fixed = pair
    assert _span(fixed) < _span(bug)  # the fix pays
    assert _launch_bound(bug) <= _span(fixed)
    # Per PE as well: the twin is a placement of the same program's issues and waits.
    fixed_pe = {b.pe: b.achieved for b in build_model(fixed.index).bounds()}
    for b in build_model(bug.index).bounds():
        assert b.bound <= fixed_pe[b.pe], b


def test_one_finding_names_the_send_line_with_the_measured_saving(pair):
    late, bug, fixed = pair
    found = [f for f in Analysis(bug).findings if f.rule == "KB112"]
    assert len(found) == 1, found
    (f,) = found
    assert f.title == "send-issued-late"
    assert f.loc.line == kl.line_of(late, "late")
    # One finding for the line on every PE that sends.
    assert f.pes == tuple(sorted(set(build_model(bug.index).sender.values())))
    measured = _span(bug) - _span(fixed)
    assert abs(f.saving - measured) <= 0.2 * measured, (f.saving, measured)
    assert "issue the send right after the line that produces its data" in f.suggestion
    # Each PE's own gain is the one it gets with the line fixed on every PE (a sender
    # alone gains nothing from its send; its receivers, down the line, do).
    bug_pe = {b.pe: b.end for b in build_model(bug.index).bounds()}
    fixed_pe = {b.pe: b.end for b in build_model(fixed.index).bounds()}
    for pe, own in zip(f.pes, f.pe_savings, strict=True):
        gained = bug_pe[pe] - fixed_pe[pe]
        assert abs(own - gained) <= max(0.2 * gained, 0.03 * _span(bug)), (pe, own, gained)
    assert f.saving <= _span(bug) - _launch_bound(bug)


def test_the_fixed_twin_has_no_late_send(pair):
    _, _, fixed = pair
    assert not [f for f in Analysis(fixed).findings if f.rule == "KB112"]


def test_fail_on_any_fails_the_late_run(pair, capsys):
    _, bug, _ = pair
    assert main(["report", str(bug.path), "--fail-on", "KB112"]) != 0
    capsys.readouterr()
