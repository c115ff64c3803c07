"""The analysis of launches whose PEs share an HBM stack's bandwidth (issue 25 item 6).

The scenario: prefill on 8 PEs sharing one stack of 64 bytes a cycle, where each PE's
own channel moves 48, so the PEs ask 6x what the stack gives and the launch lasts the
stack's slots end to end. Each PE reads its Q block (32x64 f16) and 16 K and 16 V tiles
(64x64 f16) and writes its O block; a transfer of n bytes takes a slot of ceil(n / 64)
cycles. The figures below come from those rates, not from a run.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
from kernels_across_pes import run_gemm_rows

from emulator import HardwareConfig, Memory, run_kernel
from emulator import scenarios as scenario_of
from emulator.scenarios import prefill
from emulator.trace.schema import Kind
from kbdebug.analysis.findings import wait_causes
from kbdebug.analysis.model import LOAD
from kbdebug.analysis.results import Analysis
from kbdebug.analysis.retime import simulate_launch
from kbdebug.cli import main
from kbdebug.replay import Replay
from kbdebug.sweep.point import OK, _analyse

PES = 8
CFG = HardwareConfig(hbm_stack_pes=PES, hbm_stack_bytes_per_cycle=64)
RATE = CFG.hbm_stack_bytes_per_cycle
PER_PE = [32 * 64 * 2] + [64 * 64 * 2] * 32 + [32 * 64 * 2]
SLOTS = PES * sum(math.ceil(n / RATE) for n in PER_PE)  # 33,792
#: The first transfer is granted after its issue; the last slot's transfer lands
#: hbm_latency after it.
STACK_END = CFG.issue_cycles + SLOTS + CFG.hbm_latency
#: One PE alone: its own channels at 48 bytes a cycle, faster than its slots.
OWN = [math.ceil(n / CFG.hbm_bytes_per_cycle) for n in PER_PE]


def analyse(path) -> Analysis:
    return Analysis(Replay.open(path, cache=False))


def record(tmp_path_factory, name, scenario) -> str:
    path = str(tmp_path_factory.mktemp("contention") / f"{name}.kbt")
    scenario.run(trace=path)
    return path


@pytest.fixture(scope="module")
def shared_path(tmp_path_factory) -> str:
    return record(tmp_path_factory, "shared", prefill(pes=PES, config=CFG))


@pytest.fixture(scope="module")
def shared(shared_path) -> Analysis:
    return analyse(shared_path)


@pytest.fixture(scope="module")
def alone(tmp_path_factory) -> Analysis:
    """The same launch with nothing shared."""
    return analyse(record(tmp_path_factory, "alone", prefill(pes=PES)))


def test_the_scenario_is_stack_bound(shared, alone):
    assert CFG.hbm_bytes_per_cycle < RATE < PES * CFG.hbm_bytes_per_cycle
    assert SLOTS == 33_792
    assert all(o > math.ceil(n / RATE) for o, n in zip(OWN, PER_PE, strict=True))
    assert shared.summary.end_time > 1.5 * alone.summary.end_time


# --- the model: the stack as a resource -------------------------------------------------


def test_re_timing_with_no_edit_reproduces_the_recorded_schedule_exactly(shared):
    model = shared.model
    assert model.shared is not None and len(model.shared.share) == PES * len(PER_PE)
    assert {pe: model.recorded[pe] for pe in model.programs} == {
        pe: p.achieved for pe, p in model.programs.items()
    }


def composite_beside_loads(tl, a_ptr, b_ptr, c_ptr, x_ptr):
    """PE 0 runs a composite GEMM (its transfers are its own, no steps of the program);
    PE 1, on the same stack, loads tiles one after another."""
    if tl.program_id(0) == 0:
        tl.composite(a_ptr, (256, 64), b_ptr, (64, 16), c_ptr, tile=32, dtype="f32")
    else:
        for i in range(12):
            tl.wait(tl.load_async(x_ptr + i * 4096, (32, 32), "f32"))


def bursts(tl, x_ptr):
    """Each PE issues loads of three sizes back to back, then waits them all: on two
    read channels each load takes the one that frees first, as the stack left it."""
    base = x_ptr + tl.program_id(0) * 16 * 8192
    futures = [tl.load_async(base + i * 8192, ((1 + i % 3) * 16, 64), "f32") for i in range(16)]
    for f in futures:
        tl.wait(f)


def run_composite_beside_loads(path) -> None:
    memory = Memory(1 << 20)
    a = memory.put(np.ones((256, 64), np.float32))
    b = memory.put(np.ones((64, 16), np.float32))
    c = memory.alloc(256 * 16 * 4)
    x = memory.put(np.ones((12 * 1024,), np.float32))
    config = STACKED.replace(mesh_rows=1, mesh_cols=2)
    run_kernel(composite_beside_loads, (a, b, c, x), (2,), memory, config, trace=path)


def run_bursts(path) -> None:
    memory = Memory(1 << 20)
    x = memory.alloc(2 * 16 * 8192)
    config = STACKED.replace(mesh_rows=1, mesh_cols=2, dma_read_channels=2)
    run_kernel(bursts, (x,), (2,), memory, config, trace=path)


def test_one_pe_re_timed_beside_the_others_as_recorded_reproduces_its_run(shared):
    """A fix on one PE re-times that PE alone, the other PEs' transfers taking the stack's
    slots at their recorded grants: with nothing changed, its recorded run comes back."""
    model = shared.model
    for pe in (0, 3, PES - 1):
        prog = model.programs[pe]
        lengths, _ = simulate_launch(model, {pe: (range(len(prog)), None, None)}, model.recorded)
        assert lengths[pe] == prog.achieved


#: Stacks of two PEs (64 bytes a cycle) under other launches: sends between PEs, two
#: channels a side (picked as the emulator picks, by the holds known at the issue), a
#: composite's own transfers (taken as recorded), work split unevenly (KB111).
STACKED = HardwareConfig(hbm_stack_pes=2, hbm_stack_bytes_per_cycle=64)
LAUNCHES = {
    "ring_attention": lambda path: scenario_of.ring_attention(pes=4, config=STACKED).run(
        trace=path
    ),
    "prefill_two_channels": lambda path: prefill(
        pes=4, config=STACKED.replace(dma_read_channels=2, dma_write_channels=2)
    ).run(trace=path),
    "tiled_gemm": lambda path: scenario_of.tiled_gemm(config=STACKED).run(trace=path),
    "gemm_composite": lambda path: scenario_of.gemm_composite(config=STACKED).run(trace=path),
    "gemm_uneven": lambda path: run_gemm_rows(path, 20, spread=False, config=STACKED),
    "composite_beside_loads": run_composite_beside_loads,
    "bursts_on_two_channels": run_bursts,
}


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_re_timing_reproduces_other_launches_on_shared_stacks(tmp_path, name):
    path = tmp_path / f"{name}.kbt"
    LAUNCHES[name](path)
    analysis = analyse(path)
    model = analysis.model
    assert sum(stalled for _, stalled, _, _ in model.shared.share.values()) > 0
    assert {pe: model.recorded[pe] for pe in model.programs} == {
        pe: p.achieved for pe, p in model.programs.items()
    }
    _figures_agree(analysis)


def test_the_launch_bound_is_the_stack_s_slots_end_to_end(shared, alone):
    (stack,) = shared.stack_bounds
    assert (stack.stack, stack.pes, stack.slots, stack.end) == (
        0,
        tuple(range(PES)),
        SLOTS,
        STACK_END,
    )
    bound, efficiency = shared.launch_efficiency
    end = shared.summary.end_time
    assert bound == STACK_END and bound <= end
    assert SLOTS <= bound < 1.03 * SLOTS
    assert 0.95 < efficiency <= 1.0
    # Each PE's own bound is its program's alone on the stack: as with nothing shared.
    assert [b.bound for b in shared.bounds] == [b.bound for b in alone.bounds]
    assert all(b.bound <= b.achieved for b in shared.bounds)


def test_an_edit_goes_no_faster_than_the_stack(shared, alone):
    """Every load issued first (the deepest prefetch there is) on every PE: the stack
    still serves every slot, so the launch ends no sooner than its slots allow."""

    def loads_first(model):
        edits = {}
        for pe, prog in model.programs.items():
            kinds = np.frombuffer(prog.kind, dtype=np.int8)
            order = np.concatenate([np.flatnonzero(kinds == LOAD), np.flatnonzero(kinds != LOAD)])
            edits[pe] = (order, None, None)
        lengths, _ = simulate_launch(model, edits, model.recorded)
        return max(model.programs[pe].start + n for pe, n in lengths.items())

    assert loads_first(shared.model) >= STACK_END
    # Nothing shared, the same edit ends well before the stack's bound: the stack, not
    # the edit, is what holds the shared launch.
    assert loads_first(alone.model) < 0.7 * STACK_END


# --- findings and charges ---------------------------------------------------------------


def test_no_finding_blames_a_kernel_line_for_the_stack(shared):
    assert shared.findings == []
    per_pe = [b.efficiency for b in shared.bounds]
    assert max(per_pe) < 0.6  # each PE far from its own bound: the stack's time, not its


TILE_BYTES = 64 * 64 * 2


def waited_at_once(tl, a_ptr, n):
    """Each PE streams its own n tiles, every load waited right after its issue (KB102),
    each tile then a 64x64x64 dot."""
    base = a_ptr + tl.program_id(0) * n * TILE_BYTES
    for j in range(n):
        with tl.scope():
            x = tl.wait(tl.load_async(base + j * TILE_BYTES, (64, 64), "f16"))
            tl.dot(x, x)


def run_waited_at_once(path, stack_rate: int | None, n: int = 16) -> Analysis:
    shared = {} if stack_rate is None else {"hbm_stack_pes": PES}
    config = HardwareConfig(mesh_rows=1, mesh_cols=PES, **shared)
    if stack_rate is not None:
        config = config.replace(hbm_stack_bytes_per_cycle=stack_rate)
    memory = Memory(1 << 22)
    a = memory.put(np.ones((PES * n * 64, 64), np.float16))
    run_kernel(waited_at_once, (a, n), (PES,), memory, config, trace=path)
    return analyse(path)


def test_a_deeper_prefetch_cannot_fix_a_saturated_stack(tmp_path):
    """Nothing shared, KB102 names the wait on every PE. On a stack of 32 bytes a cycle
    the PEs' tiles take 8 x 16 slots of 256 cycles, more than the PEs need on their
    own: issuing a tile ahead gains nothing the stack allows, so no finding names the
    line (nor KB106 the kernel), and the stack's slots are the launch's bound. On a stack
    of 64 bytes a cycle (16,384 cycles of slots, under the PEs' own bound) KB102 is
    back, its saving re-timed under the stack."""
    alone = run_waited_at_once(tmp_path / "alone.kbt", None)
    assert {f.rule for f in alone.findings} == {"KB102"}
    saturated = run_waited_at_once(tmp_path / "saturated.kbt", 32)
    slots = PES * 16 * (TILE_BYTES // 32)
    assert saturated.findings == []
    (kb113,) = saturated.contention
    assert (kb113.slots, kb113.limits) == (slots, True)
    bound, efficiency = saturated.launch_efficiency
    assert bound == CFG.issue_cycles + slots + CFG.hbm_latency and efficiency > 0.95
    roomy = run_waited_at_once(tmp_path / "roomy.kbt", 64)
    assert [f.rule for f in roomy.findings] == ["KB102"]
    assert not roomy.contention[0].limits
    _figures_agree(roomy)


def test_the_stalls_for_the_stack_are_charged_to_contention(shared):
    causes = [w for w in wait_causes(shared.replay, shared.model) if w.avoidable > 0]
    charged = Counter()
    for w in causes:
        charged[w.rule] += w.avoidable
    assert charged["KB113"] >= 0.95 * sum(charged.values())
    assert not {"KB102", "KB107", "KB101"} & set(charged)


def test_the_contention_rule_says_what_limits_the_launch(shared, shared_path, alone):
    (kb113,) = shared.contention
    c = shared.replay.index.columns
    stalls = int(c.val[c.kind == Kind.HBM_SHARE].sum())
    assert (kb113.rule, kb113.title, kb113.stack, kb113.pes) == (
        "KB113",
        "hbm-contention",
        0,
        tuple(range(PES)),
    )
    assert (kb113.slots, kb113.bound_end, kb113.queued, kb113.limits) == (
        SLOTS,
        STACK_END,
        stalls,
        True,
    )
    # Alone on the stack each transfer holds its channel its own time (longer than its
    # slot): what sharing costs is the shared end against the run with nothing shared.
    assert kb113.cost == shared.summary.end_time - alone.summary.end_time
    assert "PEs 0\u20137" in kb113.message and "HBM stack 0" in kb113.message
    assert f"{stalls:,}" in kb113.message and "launch's bound" in kb113.message
    assert "fewer bytes" in kb113.suggestion


def test_the_same_kernel_on_one_pe_is_unchanged(tmp_path_factory):
    one = analyse(
        record(tmp_path_factory, "one", prefill(pes=1, config=CFG.replace(hbm_stack_pes=1)))
    )
    off = analyse(record(tmp_path_factory, "off", prefill(pes=1)))
    assert one.model.shared is not None and off.model.shared is None
    assert one.summary.end_time == off.summary.end_time
    assert one.bounds == off.bounds
    assert one.launch_efficiency == off.launch_efficiency
    assert [(f.rule, f.saving, f.pe_saving) for f in one.findings] == [
        (f.rule, f.saving, f.pe_saving) for f in off.findings
    ]
    assert one.contention == []


def test_sixty_four_pes_on_one_stack_sit_at_its_bound(tmp_path_factory):
    """The emulator's scenario: 64 PEs on the default 192-byte stack."""
    config = HardwareConfig(hbm_stack_pes=64)
    analysis = analyse(record(tmp_path_factory, "p64", prefill(pes=64, config=config)))
    slots = 64 * sum(math.ceil(n / config.hbm_stack_bytes_per_cycle) for n in PER_PE)
    bound, efficiency = analysis.launch_efficiency
    assert bound == config.issue_cycles + slots + config.hbm_latency
    assert efficiency == 1.0 and analysis.findings == []
    assert analysis.contention[0].limits


def test_every_command_shows_the_launch_s_bound(shared, shared_path, tmp_path, capsys):
    _figures_agree(shared)
    bound, efficiency = shared.launch_efficiency
    assert main(["report", shared_path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["launch"] == {"bound": bound, "efficiency": efficiency, "saving": 0}
    row = _analyse(0, shared_path, OK, None)
    start = min(b.start for b in shared.bounds)
    assert (row.bound, row.efficiency) == (start + bound, efficiency)


def _figures_agree(analysis: Analysis) -> None:
    """As tests/test_figures_agree.py: a PE's findings against its own bound, KB111 (work
    moved between PEs) against the launch's; a launch at its bound has no finding, and
    a finding means the launch is below it. The launch's bound is the stacks' here."""
    bound, efficiency = analysis.launch_efficiency
    start = min(b.start for b in analysis.bounds)
    end = max(b.end for b in analysis.bounds)
    assert max(b.start + b.bound for b in analysis.bounds) <= end
    assert start + bound <= end
    for b in analysis.bounds:
        assert b.bound <= b.achieved
        for f in analysis.findings:
            if f.pe == b.pe and f.rule != "KB111":
                assert 0 < f.pe_saving <= b.achieved - b.bound
    for f in analysis.findings:
        assert 0 < f.saving <= end - (start + bound)
        if f.rule == "KB111":
            assert 0 < f.pe_saving <= f.saving
    if efficiency == 1.0:
        assert analysis.findings == []
    if analysis.findings:
        assert efficiency < 1.0
