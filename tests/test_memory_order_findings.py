"""Findings never advise a move that breaks an order through HBM bytes, nor build on a
read outside its tensor, and count the issues of the line they name.

Kernels in tests/kernels_memory_order.py; each fix a finding names is run and measured.
"""

from __future__ import annotations

from dataclasses import replace

import kernels_memory_order as kernels
import pytest

from kbdebug.analysis.across_pes import group_across_pes
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.oob import out_of_bounds
from kbdebug.analysis.results import Analysis
from kbdebug.analysis.select import matches
from kbdebug.export.review import level
from kbdebug.replay import Replay


def line_of(function, text: str) -> int:
    import inspect

    lines, first = inspect.getsourcelines(function)
    hits = [first + i for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each launch recorded once, opened lazily: name -> Analysis."""
    folder = tmp_path_factory.mktemp("memory_order")
    cache: dict[str, Analysis] = {}

    def get(name: str, **args) -> Analysis:
        key = name + "".join(f"-{k}{v}" for k, v in sorted(args.items()))
        if key not in cache:
            path = folder / f"{key}.kbt"
            getattr(kernels, f"launch_{name}")(**args).run(trace=path)
            cache[key] = Analysis(Replay.open(path))
        return cache[key]

    return get


def _end(analysis: Analysis) -> int:
    return analysis.bounds[0].achieved


def test_no_finding_moves_a_load_that_reads_back_an_unwaited_store(runs):
    racy = runs("scratch", fenced=0)
    readback = line_of(kernels.kernel_scratch_race, "back = tl.wait(tl.load_async(")
    assert [h.rule for h in racy.hazards] == ["KB201"]
    # The read-back is half of the hazard: no performance finding on it.
    assert all(f.loc.line != readback for f in racy.findings), [
        (f.rule, f.loc.line, f.message) for f in racy.findings
    ]
    # The bound takes the store's landing as a need of the read-back, as the fenced
    # twin's does: a load hoisted above its store is no placement of a correct program.
    fenced = runs("scratch", fenced=1)
    assert racy.bounds[0].bound == fenced.bounds[0].bound


def test_a_wait_on_a_read_stays_above_the_store_that_overwrites_the_bytes(runs):
    early = runs("refill", wait_at=0)
    (finding,) = [f for f in early.findings if f.rule == "KB104"]
    overwrite = line_of(kernels.kernel_refill, "tl.store(buf, first)")
    assert f"just before kernels_memory_order.py:{overwrite}," in finding.suggestion
    # Measured: the wait moved there.
    measured = _end(early) - _end(runs("refill", wait_at=1))
    assert measured > 0
    assert abs(finding.saving - measured) <= 0.1 * measured, (finding.saving, measured)
    assert runs("refill", wait_at=1).hazards == []


def test_a_store_wait_moves_to_the_next_store_of_its_bytes_not_dropped(runs):
    early = runs("rewrite", wait_at=0)
    first_wait = line_of(kernels.kernel_rewrite, "tl.wait(first)  # right after")
    second = line_of(kernels.kernel_rewrite, "tl.wait(tl.store(buf, more))")
    (finding,) = [f for f in early.findings if f.loc.line == first_wait]
    assert finding.rule == "KB108"
    assert "drop" not in finding.suggestion
    assert f"just before the store at kernels_memory_order.py:{second}" in finding.suggestion
    fixed = runs("rewrite", wait_at=1)
    measured = _end(early) - _end(fixed)
    assert abs(finding.saving - measured) <= 0.1 * measured, (finding.saving, measured)
    assert fixed.hazards == []


def test_a_load_past_its_tensor_is_a_kb204_hazard_with_line_pe_and_bytes(runs):
    run = runs("overrun")
    line = line_of(kernels.kernel_overrun, "x = tl.wait(tl.load_async(table")
    (hazard,) = run.hazards
    assert hazard.rule == "KB204" and hazard.title == "out-of-bounds"
    assert hazard.loc.line == line and hazard.pes == (0,) and hazard.count == 1
    assert "TABLE[32:40, :]" in hazard.message  # the slice it meant
    assert "1,024 bytes past the end of TABLE, in NEXT[0:8, :]" in hazard.where
    assert matches(hazard, "hazard") and matches(hazard, "any") and matches(hazard, "KB204")
    assert level("KB204") == "error"
    # Its read of NEXT's bytes is no read-back of the store to NEXT: that store's early
    # wait is dropped, not moved down to the out-of-bounds load.
    store_wait = line_of(kernels.kernel_overrun, "tl.wait(tl.store(following")
    (kb108,) = [f for f in run.findings if f.rule == "KB108"]
    assert kb108.loc.line == store_wait
    assert f":{line}" not in kb108.suggestion and kb108.suggestion.startswith("drop the wait")
    assert all(f.loc.line != line for f in run.findings)


def test_a_trace_that_names_no_tensors_has_no_kb204(runs):
    index = runs("overrun").replay.index
    header = dict(index.header)
    header.pop("tensors", None)
    nameless = replace(index, header=header)  # as a trace older than format 1.5 reads
    assert out_of_bounds(nameless) == []
    assert len(out_of_bounds(index)) == 1


def test_a_count_is_the_issues_of_the_line_named_not_of_both_lines(runs):
    run = runs("two_lines", n_tiles=6)
    (finding,) = [f for f in run.findings if f.rule in ("KB102", "KB107")]
    assert finding.count == 6  # report: "on PE 0; 6 times" (12 counted both lines' loads)


def _finding(pe: int, saving: int, count: int) -> Finding:
    return Finding(
        id="KB108:k.py::kernel::tl.wait(h)#0",
        rule="KB108",
        title="store-waited-early",
        pe=pe,
        start=0,
        end=10,
        events=(pe * 10 + count,),
        loc=None,
        message="m",
        suggestion="s",
        saving=saving,
        pe_saving=saving,
        count=count,
    )


def test_one_pe_is_listed_once_when_a_rule_found_its_line_twice_there():
    (one,) = group_across_pes([_finding(0, 506, 1), _finding(0, 1012, 3)])
    assert one.pes == (0,) and one.count == 4
    assert one.pe_savings == (1012,)
    two = group_across_pes([_finding(0, 506, 1), _finding(0, 1012, 3), _finding(1, 400, 2)])
    (both,) = two
    assert both.pes == (0, 1) and both.count == 6


def test_kb204_is_listed_with_the_hazards_and_fails_the_hazard_gate(runs, capsys):
    from kbdebug.cli import main

    path = runs("overrun").replay.path
    line = line_of(kernels.kernel_overrun, "x = tl.wait(tl.load_async(table")
    code = main(["report", str(path), "--fail-on", "hazard", "--min-saving", "100%"])
    out, err = capsys.readouterr()
    assert code == 1, err
    section = out[out.index("hazards (1:") : out.index("\nfindings (")]
    assert "KB204 out-of-bounds  on PE 0; 1 time" in section
    assert f"access: PE 0 load_async at tests/kernels_memory_order.py:{line}" in section
    assert "second:" not in section
    assert f"out-of-bounds, tests/kernels_memory_order.py:{line}, PE 0)" in err


def test_a_signal_to_another_pe_never_moves_above_the_store_it_announces(runs):
    late = runs("publish", send_at=0)
    (finding,) = [f for f in late.findings if f.rule == "KB112"]
    store_wait = line_of(kernels.kernel_publish, "tl.wait(tl.store(shared")
    # Right after the store's wait, not after the line making the flag above it (PE 1
    # would then read SHARED before it landed).
    assert (
        f"right after the line that produces its data (kernels_memory_order.py:{store_wait})"
        in (finding.suggestion)
    )
    # PE 1's bound takes the store's landing before its read, wherever PE 0 issued the
    # send: the same as with the send placed right after the wait.
    early = runs("publish", send_at=1)
    assert early.hazards == []
    assert late.bounds[1].bound == early.bounds[1].bound
    measured = _end_of_launch(late) - _end_of_launch(early)
    assert abs(finding.saving - measured) <= 0.1 * measured, (finding.saving, measured)


def _end_of_launch(analysis: Analysis) -> int:
    return max(b.end for b in analysis.bounds) - min(b.start for b in analysis.bounds)


def test_kb204_in_sarif_and_sweep_rows_is_one_access(runs):
    from kbdebug.export.sarif import to_sarif
    from kbdebug.sweep.point import hazard_outcomes

    run = runs("overrun")
    line = line_of(kernels.kernel_overrun, "x = tl.wait(tl.load_async(table")
    results = to_sarif(run, "overrun.kbt")["runs"][0]["results"]
    (kb204,) = [r for r in results if r["ruleId"] == "KB204"]
    assert kb204["level"] == "error"
    assert kb204["locations"][0]["physicalLocation"]["region"]["startLine"] == line
    assert "relatedLocations" not in kb204  # no first access, no wait to add
    ((_, label, outcome),) = hazard_outcomes(run)
    assert label == f"KB204 out-of-bounds tests/kernels_memory_order.py:{line}"
    assert outcome == "the run read 1,024 bytes outside TABLE"


def test_outside_ranges_agrees_with_a_tensor_by_tensor_search():
    """The vectorised search against one asking each range of every tensor, on random
    layouts with gaps, adjacent and nested tensors."""
    import numpy as np

    from emulator.trace.digests import TensorDef
    from kbdebug.analysis.oob import outside_ranges
    from kbdebug.replay.slices import Tensors

    rng = np.random.default_rng(11)
    for _ in range(40):
        defs, addr = [], 0
        for i in range(int(rng.integers(1, 6))):
            addr += int(rng.choice([0, 0, 64, 256]))
            rows = int(rng.integers(1, 8))
            defs.append(TensorDef(f"T{i}", addr, (rows, 16), "f32", (64, 4)))
            if rng.random() < 0.3 and rows > 1:  # a tensor named inside it
                defs.append(TensorDef(f"I{i}", addr + 64, (rows - 1, 16), "f32", (64, 4)))
            addr += rows * 64
        tensors = Tensors(defs)
        lo = rng.integers(0, addr + 128, size=64)
        hi = lo + rng.integers(1, 300, size=64)
        got = outside_ranges(tensors, lo, hi)
        for i, (a, b) in enumerate(zip(lo.tolist(), hi.tolist(), strict=True)):
            inside = any(t.addr <= a and b <= t.addr + t.nbytes for t in defs)
            touches = any(t.addr < b and a < t.addr + t.nbytes for t in defs)
            assert (i in got) == (not inside and touches), (defs, a, b, got.get(i))


def test_a_store_wait_line_read_back_in_some_steps_is_one_finding_moved_and_dropped(runs):
    early = runs("some_read_back", fixed=0)
    wait = line_of(kernels.kernel_some_read_back, "tl.wait(stored)  # the early wait")
    load = line_of(kernels.kernel_some_read_back, "back = tl.wait(tl.load_async(")
    (finding,) = [f for f in early.findings if f.rule == "KB108"]
    assert finding.loc.line == wait and finding.pes == (0,) and finding.count == 6
    assert f"just before the load at kernels_memory_order.py:{load}" in finding.suggestion
    assert "where it reads them (3 times); drop it" in finding.suggestion
    measured = _end(early) - _end(runs("some_read_back", fixed=1))
    assert abs(finding.saving - measured) <= 0.1 * measured, (finding.saving, measured)


def test_the_report_says_a_hazards_lines_get_no_performance_finding(runs, capsys):
    from kbdebug.cli import main

    main(["report", str(runs("scratch", fenced=0).replay.path)])
    out = capsys.readouterr().out
    assert "their lines get no performance finding until they are fixed" in out
