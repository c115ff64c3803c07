"""KB111 imbalance: PEs with more work than the rest are named, with what an even split saves.

The kernels are in kernels_across_pes: 8 PEs copy their tiles, PE 3 three times as
many; a GEMM over row tiles whose last PE takes the remainder (and its twin that
spreads it); a pipeline whose stages do the same work; a reduction tree.
"""

from __future__ import annotations

import math
import re

import pytest
from corpus._harness import entries, record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernels_across_pes import (
    copy_rows,
    copy_rows_prefetched,
    gemm_rows,
    run_copy,
    run_gemm_rows,
    run_pipeline,
    run_tree,
)
from kernels_for_findings import line_of

from emulator import HardwareConfig
from kbdebug.analysis import Analysis, find_all
from kbdebug.analysis.imbalance import LATE_SHARE
from kbdebug.cli import main
from kbdebug.replay import Replay

PES, N, HEAVY = 8, 8, 3
#: gemm_rows: 20 tiles of 32x128 @ 128x64 on 8 PEs: 2 each and 6 on the last, or 3,3,3,3,2,...
TILES = 20


def analysed(kernel, directory, heavy):
    path = directory / f"{kernel.__name__}-{heavy}.kbt"
    config = run_copy(kernel, path, heavy, pes=PES, n=N)
    replay = Replay.open(path, cache=False)
    return path, config, find_all(replay), Analysis(replay)


def opened(path):
    replay = Replay.open(path, cache=False)
    return find_all(replay), Analysis(replay)


def launch_end(analysis):
    return max(b.end for b in analysis.bounds)


def balanced_end(analysis):
    """The launch's bound as an end cycle: what its efficiency is taken against."""
    return min(b.start for b in analysis.bounds) + analysis.launch_efficiency[0]


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    return analysed(copy_rows, tmp_path_factory.mktemp("uneven"), HEAVY)


@pytest.fixture(scope="module")
def gemm_twins(tmp_path_factory):
    """(the remainder on the last PE, spread one per PE): paths and configs."""
    directory = tmp_path_factory.mktemp("gemm")
    out = []
    for spread in (False, True):
        path = directory / f"gemm-{spread}.kbt"
        out.append((path, run_gemm_rows(path, TILES, spread, pes=PES)))
    return out


def test_the_pe_with_three_times_the_tiles_is_named_with_its_cost(uneven):
    _, config, findings, analysis = uneven
    (kb111,) = [f for f in findings if f.rule == "KB111"]
    assert kb111.pe == HEAVY and kb111.title == "imbalance"
    # A tile: a blocking load (issue, transfer, latency), then a store waited likewise.
    transfer = math.ceil(64 * 64 * 2 / config.hbm_bytes_per_cycle)
    tile = 2 * (config.issue_cycles + transfer + config.hbm_latency)
    bounds = {b.pe: b for b in analysis.bounds}
    assert bounds[0].achieved == N * tile and bounds[HEAVY].achieved == 3 * N * tile
    cost = 2 * N * tile
    assert kb111.message.startswith(f"PE {HEAVY} ends {cost:,} cycles after the other PEs")
    # Its work: a load and a store a tile, each an issue slot and its transfer.
    work = 2 * (config.issue_cycles + transfer)
    assert f"for {3 * N * work:,} cycles against the median PE's {N * work:,} (3.0x)" in (
        kb111.message
    )
    load = line_of(copy_rows, "load")
    assert f"it runs kernels_across_pes.py:{load} {3 * N} times against {N}" in kb111.message
    assert f"steps match PE 4's for {4 * N} steps, then it goes on at " in kb111.message
    assert kb111.message.split("goes on at ")[1].startswith(f"kernels_across_pes.py:{load};")
    # (PES + 2) * N tiles in all: N each and 3N on PE 3; split evenly, 10 each.
    total = (PES + 2) * N
    assert f"the {total} runs of kernels_across_pes.py:{load} over {PES} PEs, at most " in (
        kb111.message
    )
    assert kb111.message.endswith(
        f"at most {math.ceil(total / PES)} on each), the launch "
        f"would end {kb111.saving:,} cycles sooner"
    )
    # The debugger stops where PE 3 goes on past the others: its first load beyond n tiles.
    c = analysis.replay.index.columns
    assert int(c.pe[kb111.events[0]]) == HEAVY
    assert analysis.replay.index.loc(int(c.loc[kb111.events[0]])).line == load
    # KB108 (the store waits, on every PE) and KB111 together never go past the launch's
    # balanced bound; KB111 alone never past the cost, nor what the even split gains as
    # the kernel runs today (24 tiles down to 10).
    (kb108,) = [f for f in findings if f.rule == "KB108" and f.pe == HEAVY]
    assert 0 < kb111.pe_saving <= kb111.saving <= min(cost, (3 * N - total // PES) * tile)
    assert kb111.saving + kb108.saving <= launch_end(analysis) - balanced_end(analysis)
    # The other PEs keep their unexplained gap as KB106; PE 3's is KB111's story.
    kb106 = {f.pe: f.saving for f in findings if f.rule == "KB106"}
    assert HEAVY not in kb106 and sorted(kb106) == [p for p in range(PES) if p != HEAVY]


def test_an_uneven_split_at_its_bounds_gets_what_the_even_split_saves(gemm_twins):
    (bad_path, config), (good_path, _) = gemm_twins
    findings, analysis = opened(bad_path)
    fixed_findings, fixed = opened(good_path)
    # Every PE at its own bound, to a share of a percent: only the split is wrong.
    assert all(b.efficiency > 0.99 for b in analysis.bounds)
    (kb111,) = [f for f in findings if f.rule == "KB111"]
    assert kb111.pe == PES - 1 and [f.rule for f in findings] == ["KB111"]
    assert [f for f in fixed_findings if f.rule == "KB111"] == []
    # A tile is a GEMM of 32x128 @ 128x64 plus the issues of its load and store (the
    # next tile's load hides under it): the last PE does 6 tiles, the even split at most 3.
    gemm = math.ceil(32 * 128 * 64 / config.gemm_macs_per_cycle)
    tile = gemm + 2 * config.issue_cycles
    measured = launch_end(analysis) - launch_end(fixed)
    assert measured == pytest.approx(3 * tile, rel=0.01)
    assert kb111.saving == pytest.approx(measured, rel=0.2)
    assert kb111.message.startswith(f"PE {PES - 1} ends {4 * tile:,} cycles after the other PEs")
    dot = line_of(gemm_rows, "dot")
    assert f"it runs kernels_across_pes.py:{dot} 6 times against 2" in kb111.message
    assert f"the {TILES} runs of kernels_across_pes.py:{dot} over {PES} PEs, at most 3" in (
        kb111.message
    )
    # The launch reads below 100 % beside it, against the bound of the even split.
    bound, efficiency = analysis.launch_efficiency
    assert efficiency < 1.0
    assert balanced_end(analysis) == pytest.approx(balanced_end(fixed), rel=0.01)
    assert kb111.saving <= launch_end(analysis) - balanced_end(analysis)
    assert bound < max(b.start + b.bound for b in analysis.bounds)


def test_report_names_the_late_pe_once(uneven, capsys):
    path, *_ = uneven
    assert main(["report", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.count("KB111 kernels_across_pes.py:") == 1
    assert "imbalance" in text and re.search(rf"^      on PE {HEAVY}\b", text, re.M)


def test_balanced_launches_get_none(tmp_path, gemm_twins):
    _, _, balanced, _ = analysed(copy_rows, tmp_path, -1)
    assert [f for f in balanced if f.rule == "KB111"] == []
    assert {f.rule for f in balanced} == {"KB106", "KB108"}
    # Three times the tiles, each hidden under a GEMM: every PE at its bound, but the
    # launch is not: the even split is what it misses.
    _, _, pipelined, analysis = analysed(copy_rows_prefetched, tmp_path, HEAVY)
    assert [(f.rule, f.pe) for f in pipelined] == [("KB111", HEAVY)]
    # The remainder spread one per PE: four PEs end a tile after the others, no imbalance.
    findings, analysis = opened(gemm_twins[1][0])
    assert findings == [] and analysis.imbalance is None
    assert analysis.launch_efficiency[1] > 0.99


@pytest.mark.parametrize("run", [run_pipeline, run_tree], ids=["pipeline", "tree"])
def test_pes_late_by_a_chain_with_the_same_work_get_none(run, tmp_path):
    """A pipeline's last stages and a tree's root and relays end after the others by the
    chain's shape, not by more work: no KB111, and the launch's bound is its last PE's."""
    path = tmp_path / "chain.kbt"
    run(path, pes=PES)
    findings, analysis = opened(path)
    ends = sorted(b.end for b in analysis.bounds)
    median_end = ends[(len(ends) - 1) // 2]
    achieved = sorted(b.achieved for b in analysis.bounds)[(len(ends) - 1) // 2]
    late = [b for b in analysis.bounds if b.end - median_end >= LATE_SHARE * achieved]
    assert 0 < 2 * len(late) < PES  # a few PEs end well after the rest ...
    assert analysis.imbalance is None  # ... with no more work than the median PE
    assert [f for f in findings if f.rule == "KB111"] == []
    bound, _ = analysis.launch_efficiency
    start = min(b.start for b in analysis.bounds)
    assert start + bound == max(b.start + b.bound for b in analysis.bounds)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pes=st.integers(3, 6),
    per=st.integers(1, 4),
    remainder=st.integers(0, 5),
    latency=st.integers(0, 1500),
    issue=st.integers(0, 20),
    macs=st.sampled_from([64, 256, 1024]),
)
def test_no_even_split_beats_the_balanced_bound(
    tmp_path, pes, per, remainder, latency, issue, macs
):
    """The last PE takes the remainder of the tiles: the balanced bound is never beaten by
    the twin that spreads it (the emulator's end, not the model's), KB111's saving stays
    within the recorded end minus that bound, and the launch reads below 100 % exactly
    when a finding stands beside it."""
    config = HardwareConfig(hbm_latency=latency, issue_cycles=issue, gemm_macs_per_cycle=macs)
    n_tiles = per * pes + min(remainder, pes - 1)
    runs = []
    for spread in (False, True):
        path = tmp_path / f"g-{spread}.kbt"
        run_gemm_rows(path, n_tiles, spread, pes=pes, config=config)
        runs.append(opened(path))
    (findings, analysis), (_, twin) = runs
    assert balanced_end(analysis) <= launch_end(twin)
    _, efficiency = analysis.launch_efficiency
    if efficiency == 1.0:
        assert findings == []
    if findings:
        assert efficiency < 1.0
    for f in findings:
        if f.rule == "KB111":
            assert 0 < f.pe_saving <= f.saving <= launch_end(analysis) - balanced_end(analysis)


@pytest.mark.parametrize("name", ["ipcq_chain_root_waits_recv_first", "prefill_tail_pe_serialised"])
def test_a_late_pe_whose_own_bug_explains_it_gets_that_finding_only(name, tmp_path):
    (entry,) = [e for e in entries() if e.name == name and e.size in ("large", "default")]
    trace, _ = record(entry, "bug", tmp_path)
    replay = Replay.open(trace, cache=False)
    findings = find_all(replay)
    bounds = Analysis(replay).bounds
    ends = sorted(b.end for b in bounds)
    (late,) = entry.pes
    assert max(ends) == bounds[late].end > ends[len(ends) // 2] * (1 + LATE_SHARE)
    assert {f.rule for f in findings if f.pe == late} == {entry.rule}
