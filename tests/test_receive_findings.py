"""A receive waited as soon as it is posted, before work that does not need the message:
one KB109 finding, whatever the sender's speed, whose count and stall are the wait line's
(the first iteration's wait, stalled while an older load of the PE is pending, included)
and whose saving never exceeds that stall; a load's early wait stays KB104."""

from __future__ import annotations

import kernels_receive_wait as kr
import pytest
from test_trace_v12 import without_reads

from emulator.kernel.runner import DIGESTS_ENV
from kbdebug.analysis import Analysis
from kbdebug.replay import Replay

#: Dots PE 0 does per tile: a producer about as fast as the consumer, and a slow one.
PRODUCERS = {"fast": 1, "slow": 4}


@pytest.fixture(scope="module")
def analyses(tmp_path_factory):
    """The Analysis of each recorded kernel, by name."""
    root = tmp_path_factory.mktemp("receive_wait")
    out = {}
    for name, rounds in PRODUCERS.items():
        path = kr.run(kr.recv_waited_early, root / f"recv_{name}.kbt", rounds)
        out[f"recv_{name}"] = Analysis(Replay.open(path, cache=False))
    # The slow run as a 1.2 writer wrote it (no reads recorded): recorded as format 1.4
    # (no digests), its READS dropped.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DIGESTS_ENV, "0")
        path = kr.run(kr.recv_waited_early, root / "recv_slow_1_4.kbt", PRODUCERS["slow"])
    old = root / "recv_slow_1_2.kbt"
    old.write_bytes(without_reads(path.read_bytes()))
    out["recv_slow_1_2"] = Analysis(Replay.open(old, cache=False))
    path = kr.run(kr.load_waited_early, root / "load.kbt", 2)
    out["load"] = Analysis(Replay.open(path, cache=False))
    return out


def _line_waits(analysis: Analysis, line: int) -> tuple[int, int]:
    """(waits, stall cycles) of the wait line ``line`` in the report's per-line table."""
    (row,) = [s for s in analysis.summary.stall_by_line if s.loc is not None and s.loc.line == line]
    return row.waits, row.stall_cycles


def _finding_at(analysis: Analysis, line: int):
    found = [f for f in analysis.findings if f.loc is not None and f.loc.line == line]
    assert len(found) == 1, [(f.rule, f.loc, f.message) for f in analysis.findings]
    return found[0]


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_a_receive_waited_early_is_one_kb109_with_the_lines_waits(analyses, producer):
    analysis = analyses[f"recv_{producer}"]
    line = kr.line_of(kr.recv_waited_early, "early-wait")
    use = kr.line_of(kr.recv_waited_early, "use")
    f = _finding_at(analysis, line)
    assert f.rule == "KB109" and f.title == "recv-waited-before-work"
    waits, stall = _line_waits(analysis, line)
    assert f.count == waits
    assert f.stall == stall > 0
    assert 0 < f.saving <= f.stall
    assert f"until kernels_receive_wait.py:{use}," in f.message
    assert f"just before kernels_receive_wait.py:{use}" in f.suggestion
    # Its events hold the first iteration's wait: the first wait event of the line.
    first_wait = min(int(e) for e in _wait_events(analysis, line))
    assert first_wait in f.events


def _wait_events(analysis: Analysis, line: int) -> list[int]:
    """The wait-begin events of the futures waited at ``line``."""
    index = analysis.replay.index
    futures = index.futures
    return [
        int(futures.wait_begin[i])
        for i in range(len(futures.wait_begin))
        if futures.wait_loc[i] >= 0
        and index.loc(int(futures.wait_loc[i])).line == line
        and futures.wait_begin[i] >= 0
    ]


def test_the_kb109_gate_catches_a_slow_producers_receive(analyses):
    rules = {f.rule for f in analyses["recv_slow"].findings}
    assert "KB109" in rules and "KB104" not in rules


def test_a_receive_waited_ahead_of_an_older_load_is_kb109_in_a_trace_without_reads(analyses):
    analysis = analyses["recv_slow_1_2"]
    assert not any(p.knows_reads for p in analysis.model.programs.values())
    f = _finding_at(analysis, kr.line_of(kr.recv_waited_early, "early-wait"))
    assert f.rule == "KB109" and 0 < f.saving <= f.stall


def test_a_loads_early_wait_stays_kb104(analyses):
    analysis = analyses["load"]
    line = kr.line_of(kr.load_waited_early, "early-wait")
    use = kr.line_of(kr.load_waited_early, "use")
    f = _finding_at(analysis, line)
    assert f.rule == "KB104"
    waits, stall = _line_waits(analysis, line)
    assert f.count == waits and f.stall == stall
    assert 0 < f.saving <= f.stall
    assert f"until kernels_receive_wait.py:{use}," in f.message
