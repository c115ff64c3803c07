"""Hazards (KB201-KB203): every unordered pair of accesses to overlapping bytes is found,
on one PE and across PEs, naming both lines; fenced twins never are; the fix is the
latest point that orders the pair; the breakpoint stops at the second access."""

from __future__ import annotations

import kernels_hazards as kh
import numpy as np
import pytest

from kbdebug.analysis import Analysis
from kbdebug.analysis.hazards import find_hazards
from kbdebug.replay import Replay
from kbdebug.replay.breakpoints import HazardHit

#: kernel -> (PEs, rule, line mark of the first access, of the second)
BUGS = {
    "raw_bug": (1, "KB201", "first", "second"),
    "raw_lucky": (1, "KB201", "first", "second"),
    "raw_late_wait": (1, "KB201", "first", "second"),
    "war_bug": (1, "KB202", "first", "second"),
    "waw_bug": (1, "KB203", "first", "second"),
    "composite_bug": (1, "KB201", "first", "second"),
    "raw_across_bug": (2, "KB201", "first", "second"),
    "raw_across_unsent": (2, "KB201", "first", "second"),
    "war_across_bug": (2, "KB202", "first", "second"),
    "waw_across_bug": (2, "KB203", "both", "both"),
    "chain_bug": (3, "KB201", "first", "second"),
    "composite_across_bug": (2, "KB201", "first", "second"),
}
FENCED = {
    "raw_fenced": 1,
    "war_fenced": 1,
    "waw_fenced": 1,
    "adjacent_fenced": 1,
    "composite_fenced": 1,
    "raw_across_fenced": 2,
    "war_across_fenced": 2,
    "chain_fenced": 3,
    "composite_across_fenced": 2,
}


@pytest.fixture(scope="module")
def analyses(tmp_path_factory):
    """Every kernel of kernels_hazards recorded once: name -> Analysis."""
    root = tmp_path_factory.mktemp("hazards")
    out = {}
    for name, pes in {**{k: v[0] for k, v in BUGS.items()}, **FENCED}.items():
        path = kh.record(getattr(kh, name), root / f"{name}.kbt", pes)
        out[name] = Analysis(Replay.open(path, cache=False))
    return out


@pytest.mark.parametrize("name", sorted(BUGS))
def test_each_hazard_is_found_once_naming_both_lines(analyses, name):
    pes, rule, first, second = BUGS[name]
    (hazard,) = analyses[name].hazards
    kernel = getattr(kh, name)
    assert hazard.rule == rule
    assert hazard.first.loc.line == kh.line_of(kernel, first)
    assert hazard.second.loc.line == kh.line_of(kernel, second)
    assert hazard.across_pes == (pes > 1)
    assert f":{kh.line_of(kernel, first)}" in hazard.message
    assert f":{kh.line_of(kernel, second)}" in hazard.message
    assert hazard.hi - hazard.lo > 0 and hazard.saving == 0
    # The bytes named as a slice of the named tensor (tests/kernels_hazards.record).
    rows = (hazard.hi - hazard.lo) // 64
    assert hazard.where in (f"buf[0:{rows}, :]", f"out[0:{rows}, :]")
    assert hazard.where in hazard.message


@pytest.mark.parametrize("name", sorted(FENCED))
def test_a_fenced_twin_has_no_hazard(analyses, name):
    assert analyses[name].hazards == []


def test_an_old_unwaited_store_is_found_behind_many_ordered_ones(tmp_path):
    kernel = kh.raw_behind_fenced_stores
    replay = Replay.open(kh.record(kernel, tmp_path / "behind.kbt"), cache=False)
    found = {(h.rule, h.first.loc.line, h.second.loc.line) for h in find_hazards(replay.index)}
    first, loop, second = (kh.line_of(kernel, m) for m in ("first", "loop", "second"))
    assert found == {("KB203", first, loop), ("KB201", first, second)}


def test_a_fix_for_a_helper_goes_above_the_kernel_line_calling_it(tmp_path):
    replay = Replay.open(kh.record(kh.helpers_bug, tmp_path / "helpers.kbt"), cache=False)
    (hazard,) = find_hazards(replay.index)
    assert hazard.first.loc.line == kh.line_of(kh._put, "first")
    assert hazard.second.loc.line == kh.line_of(kh._get, "second")
    # The kernel holds the store's handle: the wait goes above its call of _get.
    assert hazard.fix_loc.line == kh.line_of(kh.helpers_bug, "get")
    assert "(the call into the helper holding" in hazard.suggestion


def test_pes_are_named_on_both_sides(analyses):
    assert analyses["raw_across_bug"].hazards[0].pes == (0, 1)
    hazard = analyses["chain_bug"].hazards[0]
    assert (hazard.first.pe, hazard.second.pe, hazard.pes) == (0, 2, (0, 2))


def test_what_this_run_read_follows_the_cycles(analyses):
    # The read-back granted before the store landed read the old bytes...
    raw = analyses["raw_bug"].hazards[0]
    assert raw.first.cycle > raw.second.cycle and "read the old bytes" in raw.outcome
    # ... and one granted after it the new ones: still a hazard, nothing orders them.
    lucky = analyses["raw_lucky"].hazards[0]
    assert lucky.first.cycle < lucky.second.cycle and "read the new bytes" in lucky.outcome
    assert "landed last (as issued)" in analyses["waw_bug"].hazards[0].outcome


def test_the_fix_is_the_latest_point_that_orders_the_pair(analyses):
    late = analyses["raw_late_wait"].hazards[0]
    kernel = kh.raw_late_wait
    assert late.fix_loc.line == kh.line_of(kernel, "second") and late.fix_pe == 0
    assert f":{kh.line_of(kernel, 'late')} comes after: move it up" in late.suggestion
    # Across PEs: the wait goes before the send PE 1 already waits for.
    across = analyses["raw_across_bug"].hazards[0]
    assert across.fix_pe == 0
    assert across.fix_loc.line == kh.line_of(kh.raw_across_bug, "send")
    assert "before its send at" in across.suggestion
    # No message from the store's PE after it: one must be added, and waited on PE 1.
    unsent = analyses["raw_across_unsent"].hazards[0]
    assert "tl.send PE 1 a message" in unsent.suggestion
    assert (unsent.fix_pe, unsent.fix_loc) == (1, unsent.second.loc)
    # A composite is over when it returns: the message goes after it.
    composite = analyses["composite_across_bug"].hazards[0]
    assert composite.first.op == "composite.store"
    assert "on PE 0, once the composite at" in composite.suggestion


def test_the_breakpoint_stops_at_the_second_access(analyses):
    analysis = analyses["raw_bug"]
    (hazard,) = analysis.hazards
    replay = analysis.replay
    hits = HazardHit(hazards=tuple(analysis.hazards)).find(replay)
    c = replay.index.columns
    # The later of the load's grant and the store's landing.
    assert list(hits) == [max(hazard.first.happen, hazard.second.happen)]
    assert int(c.time[hits[0]]) == max(hazard.first.cycle, hazard.second.cycle)
    assert HazardHit(hazards=None).find(replay).size == 0
    assert HazardHit(hazards=tuple(analysis.hazards), rule="KB203").find(replay).size == 0


def test_a_forged_range_past_the_int64_addresses_is_no_access(analyses):
    replay = Replay.open(analyses["raw_bug"].replay.path, cache=False)
    replay.index.commands.addr[:] = np.iinfo(np.int64).max - 10
    assert find_hazards(replay.index) == []
