"""A finding group below the reporting floor claims no waits: a later rule's group that
is reported still fixes them all. In a trace without reads, the last step's early receive
wait is also an out-of-order wait whose group (that one wait) gains less than the floor;
the KB109 of the line must still count every wait the line makes, and its stall."""

from __future__ import annotations

import kernels_below_floor as kb
import pytest
from test_trace_v12 import without_reads

from emulator.kernel.runner import DIGESTS_ENV
from kbdebug.analysis import Analysis, wait_edits
from kbdebug.analysis.findings import _Diagnosis
from kbdebug.replay import Replay

#: A producer slower than the consumer's work, and dots after the loop that lift the
#: consumer's floor above what fixing the last step's wait alone gains.
ROUNDS, WORK, FINISH, STEPS = 6, 4, 40, 5


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    """The Analysis of the kernel's run as a 1.2 writer wrote it (no reads recorded)."""
    root = tmp_path_factory.mktemp("below_floor")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DIGESTS_ENV, "0")
        path = kb.run(root / "recorded.kbt", ROUNDS, WORK, FINISH, STEPS)
    old = root / "without_reads.kbt"
    old.write_bytes(without_reads(path.read_bytes()))
    return Analysis(Replay.open(old, cache=False))


def test_the_out_of_order_group_is_below_the_floor(analysis):
    """The case holds: the one-wait out-of-order group gains something, less than the floor."""
    model = analysis.model
    assert not model.programs[1].knows_reads
    d = _Diagnosis(model, model.programs[1])
    (group,) = wait_edits.out_of_order_groups(d)
    assert 0 < d.gain(group) < d.floor()


def test_the_kb109_keeps_the_wait_a_below_floor_group_held(analysis):
    line = kb.line_of("early-wait")
    (row,) = [s for s in analysis.summary.stall_by_line if s.loc is not None and s.loc.line == line]
    found = [f for f in analysis.findings if f.loc is not None and f.loc.line == line]
    assert [f.rule for f in found] == ["KB109"], [(f.rule, f.loc, f.message) for f in found]
    (f,) = found
    assert row.waits == STEPS
    assert f.count == row.waits
    assert f.stall == row.stall_cycles > 0
