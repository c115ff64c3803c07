"""Findings: each rule on a kernel written to trigger it and on one written not to;
the bundled scenarios; aggregation, stable ids and speed."""

from __future__ import annotations

import time

import kernels_for_findings as kf
import pytest

from emulator import HardwareConfig
from emulator.kernels import attention, gemm
from emulator.scenarios import SCENARIOS
from kbdebug.analysis import findings_of as analysed
from kbdebug.analysis.findings import MAX_OCCURRENCE_EVENTS, Finding, find_all, matches
from kbdebug.replay import Replay

KERNEL_FILE = "tests/kernels_for_findings.py"
ATTENTION = "emulator/kernels/attention.py"
TWO_READ_CHANNELS = HardwareConfig(dma_read_channels=2)


def findings_of(kernel, tmp_path, n: int = 8, config: HardwareConfig | None = None):
    return find_all(kf.run(kernel, tmp_path / f"{kernel.__name__}.kbt", n, config))


def with_rule(findings: list[Finding], rule: str) -> list[Finding]:
    return [f for f in findings if f.rule == rule]


def at(findings: list[Finding], rule: str, file: str, line: int) -> Finding:
    wanted = f"{rule}:{file}:{line}"
    found = [f for f in findings if f.id == wanted]
    assert found, f"no {wanted} among {[f.id for f in findings]}"
    return found[0]


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """Each bundled scenario, default parameters: (RunResult, Replay) by name."""
    root = tmp_path_factory.mktemp("bundled")
    out = {}
    for name in ("decode_blocking", "decode_prefetch", "flawed_prefetch", "prefill", "tiled_gemm"):
        result = SCENARIOS[name]().run(trace=root / f"{name}.kbt")
        out[name] = (result, Replay.open(root / f"{name}.kbt"))
    return out


# --- KB101 blocking-load --------------------------------------------------------------


def test_blocking_load_followed_by_compute_is_reported_at_its_line(tmp_path):
    found = findings_of(kf.blocking_then_compute, tmp_path)
    f = at(found, "KB101", KERNEL_FILE, kf.line_of(kf.blocking_then_compute, "load"))
    assert f.count == 8
    assert f.title == "blocking-load"
    assert "171-cycle transfer" in f.message and "1,024 cycles of compute" in f.message
    assert "tl.load_async" in f.suggestion


def test_blocking_load_with_no_compute_after_it_is_not_reported(tmp_path):
    assert not with_rule(findings_of(kf.blocking_then_store, tmp_path), "KB101")


# --- KB102 wait-right-after-issue -----------------------------------------------------


def test_load_async_waited_at_once_is_reported_except_while_the_pipeline_fills(tmp_path):
    found = findings_of(kf.wait_right_after_issue, tmp_path)
    f = at(found, "KB102", KERNEL_FILE, kf.line_of(kf.wait_right_after_issue, "load"))
    # The very first wait has nothing to overlap yet: only the 7 after it count.
    assert f.count == 7
    assert f"kernels_for_findings.py:{kf.line_of(kf.wait_right_after_issue, 'wait')}" in (f.message)
    assert f.stall == f.saving > 0


def test_load_async_with_work_before_its_wait_is_not_reported(tmp_path):
    assert not with_rule(findings_of(kf.wait_after_work, tmp_path), "KB102")
    assert not with_rule(findings_of(kf.prefetched, tmp_path), "KB102")


# --- KB103 queued-behind --------------------------------------------------------------


def test_load_queued_behind_a_load_needed_later_is_reported(tmp_path):
    found = findings_of(kf.issued_out_of_need_order, tmp_path)
    f = at(found, "KB103", KERNEL_FILE, kf.line_of(kf.issued_out_of_need_order, "a"))
    assert f.count == 8
    b_line = kf.line_of(kf.issued_out_of_need_order, "b")
    assert f"kernels_for_findings.py:{b_line}" in f.message
    assert 0 < f.saving <= f.stall
    # The same inversion seen from the wait is not reported a second time as KB104.
    assert not with_rule(found, "KB104")


def test_load_queued_behind_loads_needed_earlier_is_not_reported(tmp_path):
    found = findings_of(kf.issued_in_need_order, tmp_path)
    assert not with_rule(found, "KB103")
    assert not with_rule(found, "KB104")


# --- KB104 out-of-order-wait ----------------------------------------------------------


def test_stalled_wait_while_an_earlier_future_is_unwaited_is_reported(tmp_path):
    found = findings_of(kf.waits_out_of_order, tmp_path, config=TWO_READ_CHANNELS)
    f = at(found, "KB104", KERNEL_FILE, kf.line_of(kf.waits_out_of_order, "wait b"))
    assert f.count == 8
    assert f.stall > 0


def test_waits_in_issue_order_are_not_reported(tmp_path):
    found = findings_of(kf.waits_in_order, tmp_path, config=TWO_READ_CHANNELS)
    assert not with_rule(found, "KB104")


# --- KB105 idle-read-channel ----------------------------------------------------------


def test_read_channel_idle_under_compute_before_a_stalled_load_is_reported(tmp_path):
    found = findings_of(kf.issued_after_compute, tmp_path)
    f = at(found, "KB105", KERNEL_FILE, kf.line_of(kf.issued_after_compute, "load"))
    assert f.saving > 0
    assert not with_rule(found, "KB102")


def test_load_issued_before_the_compute_that_hides_it_is_not_reported(tmp_path):
    assert not findings_of(kf.issued_before_compute, tmp_path)


# --- KB106 overlap-efficiency ---------------------------------------------------------


def test_serialised_kernel_gets_an_overlap_efficiency_finding_at_its_definition(tmp_path):
    found = findings_of(kf.blocking_then_compute, tmp_path)
    def_line = kf.line_containing(kf.blocking_then_compute, "def blocking_then_compute")
    f = at(found, "KB106", KERNEL_FILE, def_line)
    assert "overlap efficiency" in f.message
    assert f.saving > 0


def test_prefetched_kernel_has_no_finding(tmp_path):
    assert findings_of(kf.prefetched, tmp_path) == []


# --- the bundled scenarios ------------------------------------------------------------


def test_decode_prefetch_has_no_finding(bundled):
    assert analysed(bundled["decode_prefetch"][1]) == []


def test_prefill_pipeline_has_no_finding(bundled):
    assert analysed(bundled["prefill"][1]) == []


def test_decode_blocking_is_explained_by_blocking_loads_at_the_k_and_v_lines(bundled):
    found = analysed(bundled["decode_blocking"][1])
    k_line = kf.line_containing(attention.decode_blocking, "k = tl.load(")
    v_line = kf.line_containing(attention.decode_blocking, "v = tl.load(")
    for line in (k_line, v_line):
        f = at(found, "KB101", ATTENTION, line)
        assert f.count == 32
        assert f.pe == 0 and f.loc.line == line
    assert {f.loc.line for f in with_rule(found, "KB101")} == {k_line, v_line}
    at(found, "KB106", ATTENTION, kf.line_containing(attention.decode_blocking, "def "))
    assert not with_rule(found, "KB102")


def test_flawed_prefetch_is_explained_by_waits_right_after_issue(bundled):
    found = analysed(bundled["flawed_prefetch"][1])
    fn = attention.decode_flawed_prefetch
    for issue, wait in (("fk = tl.load_async(", "k = tl.wait(fk)"), ("fv = ", "v = tl.wait(fv)")):
        f = at(found, "KB102", ATTENTION, kf.line_containing(fn, issue))
        assert f"attention.py:{kf.line_containing(fn, wait)}" in f.message
    at(found, "KB106", ATTENTION, kf.line_containing(fn, "def "))
    assert not with_rule(found, "KB101")


def test_tiled_gemm_blocking_loads_are_reported_on_every_pe(bundled):
    found = analysed(bundled["tiled_gemm"][1])
    line = kf.line_containing(gemm.tiled_gemm, "b = tl.load(")
    assert at(found, "KB101", "emulator/kernels/gemm.py", line).pe == 0
    assert f"KB101:emulator/kernels/gemm.py:{line}:pe1" in {f.id for f in found}


def test_findings_are_ordered_by_first_event(bundled):
    found = analysed(bundled["decode_blocking"][1])
    firsts = [f.events[0] for f in found]
    assert firsts == sorted(firsts)


# --- aggregation, ids, speed ----------------------------------------------------------


def test_occurrences_aggregate_into_one_finding_per_line_with_capped_events(tmp_path):
    found = findings_of(kf.blocking_then_compute, tmp_path, n=80)
    (f,) = with_rule(found, "KB101")
    assert f.count == 80
    # issue, wait begin and wait end of the first MAX_OCCURRENCE_EVENTS loads.
    assert len(f.events) == 3 * MAX_OCCURRENCE_EVENTS
    assert list(f.events) == sorted(f.events)
    assert f.start < f.end


def test_finding_ids_are_stable_across_runs(tmp_path):
    first = findings_of(kf.issued_out_of_need_order, tmp_path)
    again = find_all(kf.run(kf.issued_out_of_need_order, tmp_path / "again.kbt"))
    assert [f.id for f in first] == [f.id for f in again]
    assert [f.message for f in first] == [f.message for f in again]


def test_selector_matches_id_rule_any_and_every_pe_of_a_line():
    def finding(id_: str) -> Finding:
        rule = id_.split(":")[0]
        return Finding(id_, rule, "t", 0, 0, 1, (0,), None, "m", "s")

    pe0, pe1 = finding("KB101:k.py:42"), finding("KB101:k.py:42:pe1")
    assert matches(pe0, "KB101:k.py:42") and matches(pe1, "KB101:k.py:42")
    assert matches(pe1, "KB101:k.py:42:pe1") and not matches(pe0, "KB101:k.py:42:pe1")
    assert matches(pe0, "KB101") and matches(pe0, "any")
    assert not matches(pe0, "KB10") and not matches(pe0, "KB101:k.py:4")
    assert not matches(pe0, "KB102")


def test_find_all_on_a_large_trace_is_fast(tmp_path):
    path = tmp_path / "big.kbt"
    SCENARIOS["flawed_prefetch"](n_tiles=1500).run(trace=path)
    replay = Replay.open(path)
    start = time.perf_counter()
    found = find_all(replay)
    elapsed = time.perf_counter() - start
    assert len(found) == 5  # KB102 and KB105 at both loads, KB106: not one per tile
    assert elapsed < 0.25, f"find_all took {elapsed:.3f}s on {replay.n_events:,} events"
