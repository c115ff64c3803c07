"""KB111 imbalance: a PE that ends well after the rest is named, with its cost and what differs.

The kernels are in kernels_across_pes: 8 PEs copy their tiles, PE 3 three times as many.
"""

from __future__ import annotations

import math
import re

import pytest
from corpus._harness import entries, record
from kernels_across_pes import copy_rows, copy_rows_prefetched, run_copy
from kernels_for_findings import line_of

from kbdebug.analysis import Analysis, find_all
from kbdebug.analysis.imbalance import LATE_SHARE
from kbdebug.cli import main
from kbdebug.replay import Replay

PES, N, HEAVY = 8, 8, 3


def analysed(kernel, directory, heavy):
    path = directory / f"{kernel.__name__}-{heavy}.kbt"
    config = run_copy(kernel, path, heavy, pes=PES, n=N)
    replay = Replay.open(path, cache=False)
    return path, config, find_all(replay), Analysis(replay)


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    return analysed(copy_rows, tmp_path_factory.mktemp("uneven"), HEAVY)


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
    assert "(3.0x)" in kb111.message
    load = line_of(copy_rows, "load")
    assert f"steps match PE 4's for {4 * N} steps, then it goes on at " in kb111.message
    assert kb111.message.split("goes on at ")[1].startswith(f"kernels_across_pes.py:{load};")
    # The debugger stops where PE 3 goes on past the others: its first load beyond n tiles.
    c = analysis.replay.index.columns
    assert int(c.pe[kb111.events[0]]) == HEAVY
    assert analysis.replay.index.loc(int(c.loc[kb111.events[0]])).line == load
    # Never beyond the bound, nor the cost, nor the cycles the other findings explain:
    # what KB108 (the store waits) gains on PE 3 and what KB111 claims fit in the gap,
    # and KB106 names no cycle KB111 took.
    gap = bounds[HEAVY].achieved - bounds[HEAVY].bound
    others = [f for f in findings if f.pe == HEAVY and f.rule != "KB111"]
    assert [f.rule for f in others] == ["KB108"]
    assert 0 < kb111.pe_saving <= kb111.saving <= cost
    assert kb111.pe_saving + sum(f.pe_saving for f in others) <= gap
    # The other PEs keep their unexplained gap as KB106; PE 3's is all KB111's.
    kb106 = {f.pe: f.saving for f in findings if f.rule == "KB106"}
    assert HEAVY not in kb106 and sorted(kb106) == [p for p in range(PES) if p != HEAVY]


def test_report_names_the_late_pe_once(uneven, capsys):
    path, *_ = uneven
    assert main(["report", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.count("KB111 kernels_across_pes.py:") == 1
    assert "imbalance" in text and re.search(rf"^      on PE {HEAVY}\b", text, re.M)


def test_balanced_and_at_bound_launches_get_none(tmp_path):
    _, _, balanced, _ = analysed(copy_rows, tmp_path, -1)
    assert [f for f in balanced if f.rule == "KB111"] == []
    assert {f.rule for f in balanced} == {"KB106", "KB108"}
    # Three times the tiles, each hidden under a GEMM: late, but at its bound.
    _, _, pipelined, analysis = analysed(copy_rows_prefetched, tmp_path, HEAVY)
    ends = {b.pe: b.end for b in analysis.bounds}
    assert ends[HEAVY] - ends[0] > LATE_SHARE * ends[0]
    assert pipelined == []


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
