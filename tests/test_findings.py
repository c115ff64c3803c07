"""Findings on the critical-path model: each rule on a kernel written to trigger it and on
one written not to; the bound against the emulator; the bundled scenarios; savings, ids."""

from __future__ import annotations

import kernels_for_findings as kf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator import HardwareConfig, Memory, run_kernel
from emulator.kernels import attention, gemm
from emulator.scenarios import SCENARIOS
from kbdebug.analysis import matches, pe_bounds
from kbdebug.analysis.findings import (
    MAX_OCCURRENCE_EVENTS,
    MIN_SHARE,
    Finding,
    find_all,
    wait_causes,
)
from kbdebug.analysis.model import launch_efficiency
from kbdebug.replay import Replay

KERNEL_FILE = "tests/kernels_for_findings.py"
ATTENTION = "emulator/kernels/attention.py"
TWO_READ_CHANNELS = HardwareConfig(dma_read_channels=2)


def findings_of(kernel, tmp_path, n: int = 8, config: HardwareConfig | None = None):
    return find_all(kf.run(kernel, tmp_path / f"{kernel.__name__}.kbt", n, config))


def rules(findings: list[Finding]) -> list[tuple[str, int]]:
    return sorted((f.rule, f.loc.line) for f in findings)


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """Each bundled scenario, default parameters: (RunResult, Replay) by name."""
    root = tmp_path_factory.mktemp("bundled")
    out = {}
    for name in (
        "decode_blocking",
        "decode_prefetch",
        "flawed_prefetch",
        "prefill",
        "tiled_gemm",
        "ring_attention",
        "gemm_pipeline",
        "gemm_composite",
    ):
        result = SCENARIOS[name]().run(trace=root / f"{name}.kbt")
        out[name] = (result, Replay.open(root / f"{name}.kbt"))
    return out


# --- one rule each ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kernel, config, expected",
    [
        (kf.blocking_then_compute, None, [("KB101", "load")]),
        # A copy loop: blocking loads serialise their latencies; issued ahead they overlap.
        (kf.blocking_then_store, None, [("KB101", "load")]),
        (kf.wait_right_after_issue, None, [("KB102", "load")]),
        # Issued after a 1024-cycle dot it could precede: KB102 names the issue.
        (kf.issued_after_compute, None, [("KB102", "load")]),
        # Issued in the same iteration as its wait: only a tile-ahead prefetch hides it.
        (kf.wait_after_work, None, [("KB107", "load")]),
        # A is waited first but issued second, within its own iteration: issuing it a
        # tile ahead saves more than reordering the two issues (KB103 in tests/corpus).
        (kf.issued_out_of_need_order, None, [("KB102", "a")]),
        # B waited first, both issued in the iteration that needs them: issuing both a
        # tile ahead is the fix (moving the wait gains a tenth of it), one finding on the
        # line of B (the load that stalls) naming A's.
        (kf.waits_out_of_order, None, [("KB102", "b")]),
        (kf.wait_before_independent_work, None, [("KB104", "wait")]),
        (kf.wait_at_first_use, None, []),
        (kf.prefetched, None, []),
        (kf.issued_before_compute, None, []),
    ],
)
def test_each_rule_names_the_line_to_change(tmp_path, kernel, config, expected):
    found = [f for f in findings_of(kernel, tmp_path, 64, config) if f.rule != "KB106"]
    assert rules(found) == sorted((rule, kf.line_of(kernel, mark)) for rule, mark in expected)
    for f in found:
        assert f.title and f.message and f.suggestion
        assert f.share >= MIN_SHARE and f.saving > 0


def test_a_prefetch_too_shallow_for_the_latency_says_how_deep_it_must_be(tmp_path):
    (f,) = findings_of(kf.wait_after_work, tmp_path, 64)
    # 171-cycle transfer + 500-cycle latency over ~292 cycles of work per tile: the
    # re-timing finds 3 tiles ahead the shallowest depth that gains the most.
    assert "(292 cycles) is shorter than its transfer + latency (671 cycles)" in f.message
    assert "3 tiles ahead" in f.suggestion


def test_the_saving_of_a_fix_is_what_the_fixed_kernel_gains(tmp_path):
    buggy = kf.run(kf.wait_right_after_issue, tmp_path / "bug.kbt", 32)
    fixed = kf.run(kf.prefetched, tmp_path / "fixed.kbt", 32)
    measured = pe_bounds(buggy)[0].achieved - pe_bounds(fixed)[0].achieved
    (f,) = find_all(buggy)
    assert abs(f.saving - measured) <= 0.05 * measured
    assert f.share == pytest.approx(f.saving / pe_bounds(buggy)[0].achieved)


# --- the bound ------------------------------------------------------------------------


def pipelined(tl, a_ptr, n, ahead, work):
    """Loads issued ``ahead`` tiles before their wait, ``work`` dots per tile on the tile
    (its first use comes right after its wait: nothing else could run before it)."""
    q = tl.zeros((32, 64), "f16")
    futures = [
        tl.load_async(a_ptr + j * kf.TILE_BYTES, kf.TILE, "f16") for j in range(min(ahead, n))
    ]
    for j in range(n):
        with tl.scope():
            x = tl.wait(futures.pop(0))
            if j + ahead < n:
                futures.append(tl.load_async(a_ptr + (j + ahead) * kf.TILE_BYTES, kf.TILE, "f16"))
            for _ in range(work):
                tl.dot(q, tl.trans(x))
            tl.exp(x)


def run_pipelined(path, n, ahead, work, config=None) -> Replay:
    memory = Memory(size_bytes=n * kf.TILE_BYTES + 4096)
    a_ptr = memory.put(np.ones((n * 64, 64), np.float16))
    run_kernel(pipelined, (a_ptr, n, ahead, work), (1,), memory, config, trace=path)
    return Replay.open(path)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 12),
    ahead=st.integers(0, 4),
    work=st.integers(0, 3),
    latency=st.integers(0, 1500),
    channels=st.integers(1, 3),
    issue=st.integers(0, 40),
    bandwidth=st.sampled_from([8, 48, 256]),
)
def test_the_bound_never_exceeds_what_the_emulator_achieved(
    tmp_path, n, ahead, work, latency, channels, issue, bandwidth
):
    config = HardwareConfig(
        hbm_latency=latency,
        dma_read_channels=channels,
        issue_cycles=issue,
        hbm_bytes_per_cycle=bandwidth,
    )
    replay = run_pipelined(tmp_path / "p.kbt", n, max(ahead, 0) or 1, work, config)
    for b in pe_bounds(replay):
        assert 0 < b.bound <= b.achieved


@pytest.mark.parametrize("n", [2, 8, 64])
@pytest.mark.parametrize("work", [1, 3])
def test_a_well_pipelined_kernel_is_within_5_percent_of_its_bound(tmp_path, n, work):
    # Deep enough for the latency: 671 cycles of transfer + latency over >= 290 of work.
    replay = run_pipelined(tmp_path / "p.kbt", n, 3, work)
    (b,) = pe_bounds(replay)
    assert b.achieved <= 1.05 * b.bound
    assert find_all(replay) == []


# --- the bundled scenarios ------------------------------------------------------------


@pytest.mark.parametrize("name", ["decode_prefetch", "prefill", "gemm_pipeline", "gemm_composite"])
def test_pipelined_scenarios_have_no_finding(bundled, name):
    replay = bundled[name][1]
    assert find_all(replay) == []
    assert all(b.efficiency > 0.9 for b in pe_bounds(replay))


def test_ring_attention_is_told_only_of_its_blocking_prologue_loads(bundled):
    """Its IPCQ ring hides the transfers; the three blocking loads before it serialise
    their latencies, on every PE."""
    found = find_all(bundled["ring_attention"][1])
    prologue = {
        kf.line_containing(attention.ring_attention, f"{name} = tl.load(") for name in "qkv"
    }
    assert found and {f.rule for f in found} == {"KB101"}
    assert {f.loc.line for f in found} <= prologue
    assert {f.pe for f in found} == {0, 1, 2, 3}


def test_decode_blocking_is_explained_by_blocking_loads_at_the_k_and_v_lines(bundled):
    found = find_all(bundled["decode_blocking"][1])
    k_line = kf.line_containing(attention.decode_blocking, "k = tl.load(")
    v_line = kf.line_containing(attention.decode_blocking, "v = tl.load(")
    assert rules(found) == [("KB101", k_line), ("KB101", v_line)]
    assert all(f.count == 32 and f.line_id.startswith(f"KB101:{ATTENTION}:") for f in found)


def test_flawed_prefetch_is_explained_by_waits_right_after_issue(bundled):
    found = find_all(bundled["flawed_prefetch"][1])
    fn = attention.decode_flawed_prefetch
    issues = [kf.line_containing(fn, "fk = tl.load_async("), kf.line_containing(fn, "fv = ")]
    assert rules(found) == [("KB102", line) for line in issues]
    waits = [kf.line_containing(fn, "k = tl.wait(fk)"), kf.line_containing(fn, "v = tl.wait(fv)")]
    for f, wait in zip(sorted(found, key=lambda f: f.loc.line), waits, strict=True):
        assert f"attention.py:{wait}" in f.message


def test_flawed_prefetch_saving_matches_the_fixed_pipeline(bundled):
    """Fixing both loads together gives what decode_prefetch (the fixed twin) gains."""
    flawed, fixed = bundled["flawed_prefetch"][0], bundled["decode_prefetch"][0]
    measured = flawed.end_time - fixed.end_time
    total = sum(f.saving for f in find_all(bundled["flawed_prefetch"][1]))
    assert abs(total - measured) <= 0.2 * measured


def test_tiled_gemm_blocking_loads_are_reported_on_every_pe(bundled):
    # The A and B tiles of one K step are both blocking: one finding per PE on A's line
    # naming B's, with the saving of fixing both.
    found = find_all(bundled["tiled_gemm"][1])
    a_line = kf.line_containing(gemm.tiled_gemm, "a = tl.load(")
    b_line = kf.line_containing(gemm.tiled_gemm, "b = tl.load(")
    hits = [f for f in found if f.rule == "KB101" and f.loc.line == a_line]
    assert {f.pe for f in hits} == {0, 1}
    assert all([x.line for x in f.also] == [b_line] for f in hits)
    assert f"KB101:emulator/kernels/gemm.py:{a_line}:pe1" in {f.line_id for f in found}


def test_every_stalled_wait_is_charged_to_at_most_one_rule(bundled):
    replay = bundled["flawed_prefetch"][1]
    causes = wait_causes(replay)
    assert causes and len({c.future for c in causes}) == len(causes)
    assert all(0 <= c.avoidable <= c.stall for c in causes)
    assert {c.rule for c in causes if c.avoidable} == {"KB102"}
    assert all(
        c.rule is None for c in wait_causes(bundled["decode_prefetch"][1]) if c.avoidable == 0
    )


def test_findings_are_ordered_by_first_event(bundled):
    found = find_all(bundled["decode_blocking"][1])
    firsts = [f.events[0] for f in found]
    assert firsts == sorted(firsts)


# --- aggregation, ids -----------------------------------------------------------------


def test_occurrences_aggregate_into_one_finding_per_line_with_capped_events(tmp_path):
    found = findings_of(kf.blocking_then_compute, tmp_path, n=80)
    (f,) = [f for f in found if f.rule == "KB101"]
    assert f.count == 80
    # issue, wait begin and wait end of the first MAX_OCCURRENCE_EVENTS loads.
    assert len(f.events) == 3 * MAX_OCCURRENCE_EVENTS
    assert list(f.events) == sorted(f.events)
    assert f.start < f.end


def test_finding_ids_are_stable_across_runs(tmp_path):
    first = findings_of(kf.wait_right_after_issue, tmp_path)
    again = find_all(kf.run(kf.wait_right_after_issue, tmp_path / "again.kbt"))
    assert [f.id for f in first] == [f.id for f in again]
    assert [f.message for f in first] == [f.message for f in again]


def test_selector_matches_id_line_id_rule_any_and_every_pe_of_a_line():
    def finding(line_id: str, pe: int = 0) -> Finding:
        rule = line_id.split(":")[0]
        return Finding("X" + line_id, rule, "t", pe, 0, 1, (0,), None, "m", "s", line_id=line_id)

    pe0, pe1 = finding("KB101:k.py:42"), finding("KB101:k.py:42:pe1", pe=1)
    assert matches(pe0, "KB101:k.py:42") and matches(pe1, "KB101:k.py:42")
    assert matches(pe1, "KB101:k.py:42:pe1") and not matches(pe0, "KB101:k.py:42:pe1")
    assert matches(pe0, "KB101") and matches(pe0, "kb101") and matches(pe0, "any")
    assert not matches(pe0, "KB10") and not matches(pe0, "KB101:k.py:4")
    assert not matches(pe0, "KB102")
    assert matches(pe0, "XKB101:k.py:42")
    # What --fail-on accepts, the one matches accepts: a rule code in any case inside a
    # line id, and selectors with the spaces a comma list leaves.
    assert matches(pe0, "kb101:k.py:42") and matches(pe0, " any") and matches(pe0, " KB101 ")


def test_there_is_one_matches_and_the_gate_uses_it():
    import kbdebug.analysis as analysis
    import kbdebug.analysis.finding as finding_module
    from kbdebug.analysis import select

    assert analysis.matches is select.matches
    assert not hasattr(finding_module, "matches")


def test_no_crash_when_every_earlier_issue_loses_time(tmp_path):
    """A short, latency-bound pipeline where no earlier issue pays: report still answers."""
    from kbdebug.cli import main

    out = tmp_path / "late.kbt"
    argv = [
        "run",
        "decode_prefetch",
        "--set",
        "n_tiles=8",
        "--set",
        "depth=2",
        "--set",
        "hbm_latency=800",
        "-q",
        "-o",
        str(out),
    ]
    assert main(argv) == 0
    assert main(["report", str(out), "--json"]) in (0, 1)


def test_depth_one_pipeline_in_a_helper_gets_prefetch_deeper_with_a_true_saving(tmp_path):
    """TilePipeline primes K0 and V0 from one call and issues every load from one helper
    line: the finding still splits the streams by the line that waits on them, names the
    issue line and a depth whose run saves what the finding says."""

    def run(depth):
        scenario = SCENARIOS["decode_prefetch"](n_tiles=16, depth=depth)
        scenario.config = HardwareConfig(hbm_latency=2000)
        path = tmp_path / f"depth{depth}.kbt"
        scenario.run(trace=path)
        return Replay.open(path)

    shallow = run(1)
    # KB106 may stand beside it (deeper than the scratch allows would gain more still), and
    # at this latency q's blocking load too: its wait belongs below the pipeline's priming.
    found = [f for f in find_all(shallow) if f.rule not in ("KB106", "KB101")]
    assert all(f.loc.file == ATTENTION for f in find_all(shallow) if f.rule == "KB101")
    assert [f.rule for f in found] == ["KB107"]
    (f,) = found
    assert f.loc.file == "emulator/kernels/pipeline.py"
    depth = int(f.suggestion.split(" tiles ahead")[0].rsplit(" ", 1)[1])
    assert depth > 1
    saved = shallow.end_time - run(depth).end_time
    assert abs(f.saving - saved) <= 0.1 * saved


class _PairStream:
    """A user's own pipeline helper: both loads of a tile issued from one line."""

    def __init__(self, tl, ptrs, n):
        self.tl, self.ptrs, self.n, self.q, self.j = tl, ptrs, n, [], 0

    def take(self):
        if not self.q and self.j < self.n:
            self.q.append(
                [self.tl.load_async(p + self.j * 4096, (32, 64), "f16") for p in self.ptrs]
            )
            self.j += 1
        fa, fb = self.q.pop(0)
        a = self.tl.wait(fa)
        b = self.tl.wait(fb)
        if self.j < self.n:
            self.q.append(
                [self.tl.load_async(p + self.j * 4096, (32, 64), "f16") for p in self.ptrs]
            )
            self.j += 1
        return a, b


def _pair_kernel(tl, a_ptr, b_ptr, n):
    stream = _PairStream(tl, (a_ptr, b_ptr), n)
    acc = tl.zeros((32, 32))
    for _ in range(n):
        a, b = stream.take()
        acc = acc + tl.exp(tl.dot(a, tl.trans(b)) * 0.01)


def test_two_streams_issued_from_one_line_are_one_finding_with_one_id(tmp_path):
    from emulator.scenarios import Scenario

    n = 12
    mem = Memory(size_bytes=1 << 21)
    a = mem.put(np.ones((n * 32, 64), np.float16))
    b = mem.put(np.ones((n * 32, 64), np.float16))
    scenario = Scenario(
        kernel=_pair_kernel,
        args=(a, b, n),
        grid=(1,),
        memory=mem,
        config=HardwareConfig(hbm_latency=2000),
    )
    path = tmp_path / "pair.kbt"
    scenario.run(trace=path)
    found = find_all(Replay.open(path))
    ids = [f.id for f in found]
    assert len(ids) == len(set(ids))
    (f,) = [f for f in found if f.rule == "KB107"]
    assert f.count == 2 * (n - 1) or f.count == 2 * n


# --- the bound is raw and the tests see it ----------------------------------------------


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(2, 10),
    ahead=st.integers(1, 2),
    work=st.integers(0, 2),
    latency=st.integers(0, 1500),
    channels=st.integers(1, 2),
    issue=st.integers(0, 20),
)
def test_no_fix_a_finding_suggests_beats_the_bound(
    tmp_path, n, ahead, work, latency, channels, issue
):
    """The raw bound against the emulator: the kernel as recorded, and the kernel with the
    depth a prefetch finding suggests really applied, both take at least the bound; each
    finding's saving stays within achieved - bound, and no finding stands at 100 %."""
    config = HardwareConfig(hbm_latency=latency, dma_read_channels=channels, issue_cycles=issue)
    replay = run_pipelined(tmp_path / "bug.kbt", n, ahead, work, config)
    (b,) = pe_bounds(replay)
    assert b.bound <= b.achieved
    found = find_all(replay)
    for f in found:
        assert f.saving <= b.achieved - b.bound
        assert b.efficiency < 1.0
    for f in found:
        if f.rule in ("KB102", "KB107") and " tiles ahead" in f.suggestion:
            depth = int(f.suggestion.split(" tiles ahead")[0].rsplit(" ", 1)[1])
        elif f.rule in ("KB102", "KB107"):
            depth = ahead + 1
        else:
            continue
        fixed = run_pipelined(tmp_path / "fix.kbt", n, depth, work, config)
        assert b.bound <= pe_bounds(fixed)[0].achieved


def _bound_checks(tmp_path):
    """Two checks the analysis tests make: the bound never above what the emulator
    achieved, and a kernel deep enough for its latency within 5 % of its bound."""
    for name in ("flawed_prefetch", "decode_prefetch", "prefill"):
        for b in pe_bounds(Replay.open(f"traces/{name}.kbt", cache=False)):
            assert b.bound <= b.achieved, name
    replay = run_pipelined(tmp_path / "p.kbt", 16, 3, 1)
    (b,) = pe_bounds(replay)
    assert b.achieved <= 1.05 * b.bound


@pytest.mark.parametrize("wrong", ["inflated", "deflated"])
def test_a_wrong_bound_is_noticed(tmp_path, monkeypatch, wrong):
    from kbdebug.analysis import model, retime

    _bound_checks(tmp_path)  # the real bound passes both
    real = retime.bound_launch

    def skewed(m):
        out = real(m)
        if wrong == "inflated":
            return {pe: 10 * v + 12_345 for pe, v in out.items()}
        return {pe: v // 10 for pe, v in out.items()}

    monkeypatch.setattr(retime, "bound_launch", skewed)
    monkeypatch.setattr(model.Model, "bound_lengths", property(lambda m: skewed(m)))
    with pytest.raises(AssertionError):
        _bound_checks(tmp_path)


def _chain(tl, x_ptr, out_ptr, n, recv_first, side=0, late=False):
    """A reduction down a 1 x P chain: each PE sums its n tiles, adds its left
    neighbour's partial, passes the sum right; the last PE stores it. ``side`` probes of
    the partial sum (work the send does not need) run after the send, or before it
    when ``late`` (a send issued late: the other is its fixed twin)."""
    pe, pes = tl.program_id(0), tl.num_programs(0)
    fin = tl.recv_async("left", (64, 64), "f32") if pe > 0 else None
    if fin is not None and recv_first:
        acc = tl.wait(fin) * 1.0
    else:
        acc = tl.zeros((64, 64), "f32")
    futures = [
        tl.load_async(x_ptr + (pe * n + j) * kf.TILE_BYTES, kf.TILE, "f16") for j in range(n)
    ]
    for f in futures:
        acc = acc + tl.exp(tl.wait(f))
    if fin is not None and not recv_first:
        acc = acc + tl.wait(fin)
    probes = [0] * side if late or pe + 1 == pes else []
    for _ in probes:
        tl.dot(acc[:32, :], acc)
    if pe + 1 < pes:
        tl.wait(tl.send("right", acc))
    else:
        tl.store(out_ptr, acc)
    for _ in range(side - len(probes)):
        tl.dot(acc[:32, :], acc)


def _run_chain(path, pes, n, recv_first, config, side=0, late=False):
    memory = Memory(size_bytes=pes * n * kf.TILE_BYTES + (1 << 16))
    x_ptr = memory.put(np.ones((pes * n * 64, 64), np.float16))
    out_ptr = memory.alloc(64 * 64 * 4)
    args = (x_ptr, out_ptr, n, recv_first, side, late)
    run_kernel(_chain, args, (pes,), memory, config, trace=path)
    return Replay.open(path, cache=False)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pes=st.integers(2, 5),
    n=st.integers(1, 4),
    recv_first=st.booleans(),
    latency=st.integers(0, 1200),
    ipcq_latency=st.integers(0, 800),
    issue=st.integers(0, 20),
    side=st.integers(0, 3),
    late=st.booleans(),
)
def test_the_raw_bound_holds_on_every_pe_of_an_ipcq_chain(
    tmp_path, pes, n, recv_first, latency, ipcq_latency, issue, side, late
):
    """The raw bound against the emulator, on the chain as recorded and, for a send
    issued late, on its fixed twin (the send above the probes: the same program's issues
    re-placed) too: neither takes less than the bound, on any PE or on the launch."""
    config = HardwareConfig(
        mesh_rows=1,
        mesh_cols=pes,
        mesh_wrap=False,
        hbm_latency=latency,
        ipcq_latency=ipcq_latency,
        issue_cycles=issue,
    )
    replay = _run_chain(tmp_path / "chain.kbt", pes, n, recv_first, config, side, late)
    bounds = {b.pe: b for b in pe_bounds(replay)}
    assert len(bounds) == pes
    for b in bounds.values():
        assert b.bound <= b.achieved, b
    launch_bound, _ = launch_efficiency(list(bounds.values()))
    span = max(b.end for b in bounds.values()) - min(b.start for b in bounds.values())
    for f in find_all(replay):
        b = bounds[f.pe]
        assert f.saving <= span - launch_bound
        if f.rule != "KB112":  # a late send's gain is its receivers', not its own PE's
            assert 0 < f.pe_saving <= b.achieved - b.bound
    if late:
        twin = _run_chain(tmp_path / "twin.kbt", pes, n, recv_first, config, side, False)
        twin_bounds = pe_bounds(twin)
        for b in twin_bounds:
            assert bounds[b.pe].bound <= b.achieved, (bounds[b.pe], b)
        start = min(b.start for b in twin_bounds)
        assert launch_bound <= max(b.end for b in twin_bounds) - start


def test_below_bound_reports_the_gap_the_other_findings_leave(tmp_path):
    """KB106 fires when the kernel is under 90 % of its bound and the other findings'
    fixes, applied together, leave at least a tenth of it unexplained; its saving is that
    remainder exactly. Here scratch holds no deeper prefetch (KB107 has no depth to
    offer), while the bound knows no scratch. Its twin, with room to prefetch, gets none."""
    from kbdebug.analysis.findings import _Diagnosis
    from kbdebug.analysis.model import build_model

    def run(scratch):
        scenario = SCENARIOS["decode_prefetch"](n_tiles=16, depth=1)
        scenario.config = HardwareConfig(hbm_latency=2000, scratch_bytes=scratch)
        path = tmp_path / f"s{scratch}.kbt"
        scenario.run(trace=path)
        return Replay.open(path, cache=False)

    tight = run(70_000)
    (b,) = pe_bounds(tight)
    found = find_all(tight)
    (below,) = [f for f in found if f.rule == "KB106"]
    assert "KB107" not in {f.rule for f in found}
    model = build_model(tight.index)
    diagnosis = _Diagnosis(model, model.programs[0])
    explained = diagnosis.gain(*(g for g, _ in diagnosis.groups()))
    assert below.saving == b.achieved - b.bound - explained
    assert b.efficiency < 0.9 and below.saving >= 0.1 * b.achieved
    assert below.loc.function == "decode_prefetch"
    roomy = find_all(run(1 << 20))
    assert "KB107" in {f.rule for f in roomy}
    assert "KB106" not in {f.rule for f in roomy}
