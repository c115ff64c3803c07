"""Seeded timing perturbation: the same seed the same trace, off by default, a race shows."""

from __future__ import annotations

import io

import kernels_store_load_race as race
import numpy as np
import pytest

from emulator import HardwareConfig, MemoryRecorder, run_kernel
from emulator.hardware.perturb import Jitter
from emulator.trace.reader import read_trace
from emulator.trace.schema import Kind
from emulator.trace.writer import TraceWriter


def record(launch, **config) -> tuple[bytes, bool]:
    """The trace bytes of a run of ``launch()`` with ``config`` changes, and whether its
    output passed the check."""
    scenario = launch()
    scenario.config = scenario.config.replace(**config)
    buffer = io.BytesIO()
    writer = TraceWriter(buffer)
    scenario.run(recorder=writer)
    writer.close()
    try:
        scenario.check(scenario.memory)
    except AssertionError:
        return buffer.getvalue(), False
    return buffer.getvalue(), True


def header_config(trace: bytes) -> dict:
    return read_trace(trace).header["config"]


def test_the_same_seed_gives_a_byte_identical_trace():
    first, _ = record(race.launch_race, perturb_seed=11)
    again, _ = record(race.launch_race, perturb_seed=11)
    assert first == again
    other, _ = record(race.launch_race, perturb_seed=12)
    assert other != first


def test_seed_zero_is_the_nominal_run_whatever_the_bounds():
    nominal, passed = record(race.launch_race)
    assert passed
    off, _ = record(
        race.launch_race,
        perturb_seed=0,
        perturb_latency=2.0,
        perturb_grant_delay=3.0,
        perturb_grant_window=9,
    )
    assert off == nominal
    assert not any(name.startswith("perturb") for name in header_config(nominal))


def test_a_perturbed_trace_says_so_in_its_header():
    trace, _ = record(race.launch_race, perturb_seed=5, perturb_latency=0.25)
    config = header_config(trace)
    assert (config["perturb_seed"], config["perturb_latency"]) == (5, 0.25)
    assert (config["perturb_grant_delay"], config["perturb_grant_window"]) == (1.5, 2)
    assert HardwareConfig.from_dict(config).perturb_seed == 5  # a reader rebuilds it


def test_the_store_load_race_gives_a_wrong_output_within_64_seeds():
    wrong = [seed for seed in range(1, 65) if not record(race.launch_race, perturb_seed=seed)[1]]
    assert wrong


def test_the_fenced_twin_never_differs_in_64_seeds():
    outputs = set()
    for seed in range(65):
        scenario = race.launch_fenced()
        scenario.config = scenario.config.replace(perturb_seed=seed)
        scenario.run()
        scenario.check(scenario.memory)
        outputs.add(scenario.memory.data.tobytes())
    assert len(outputs) == 1  # seed 0, the nominal run, is among them


def test_latencies_stay_within_their_bounds_and_move():
    jitter = Jitter(3, 0, 0, spread=0.5, window=1, in_order=False)
    drawn = [jitter.latency(500, now=0) for _ in range(200)]
    assert min(drawn) >= 250 and max(drawn) <= 750
    assert len(set(drawn)) > 50


def test_a_spread_past_one_only_lengthens_latencies():
    jitter = Jitter(3, 0, 0, spread=3.0, window=1, in_order=False)
    drawn = [jitter.latency(100, now=0) for _ in range(400)]
    assert min(drawn) >= 0 and max(drawn) <= 400
    assert min(drawn) < 20 and max(drawn) > 380  # the whole range 0..4x is drawn from


def test_a_link_delivers_in_order_whatever_the_draws():
    jitter = Jitter(3, 0, 0, spread=1.0, window=1, in_order=True)
    landings = [now + jitter.latency(100, now) for now in range(0, 400, 4)]
    assert landings == sorted(landings)


def test_grant_delays_stay_within_their_bound_from_a_stream_of_their_own():
    jitter = Jitter(3, 0, 0, spread=0.5, window=2, in_order=False, max_delay=750)
    delays = [jitter.grant_delay() for _ in range(300)]
    assert min(delays) >= 0 and max(delays) <= 750 and len(set(delays)) > 100
    # Drawing delays moves neither the latencies nor the grant picks of that seed.
    plain = Jitter(3, 0, 0, spread=0.5, window=2, in_order=False)
    assert [jitter.latency(500, 0) for _ in range(20)] == [plain.latency(500, 0) for _ in range(20)]
    assert [jitter.pick(3) for _ in range(20)] == [plain.pick(3) for _ in range(20)]
    assert plain.grant_delay() == 0


def test_a_load_delayed_past_a_later_store_reads_its_bytes():
    """A WAR the latencies alone never show: the load is granted first on an idle channel,
    and only a grant delay lets the store issued after it land before it reads."""

    def memory_after(**fields) -> bytes:
        scenario = race.launch_war()
        scenario.config = scenario.config.replace(**fields)
        scenario.run()
        return scenario.memory.data.tobytes()

    nominal = memory_after()
    seeds = range(1, 33)
    assert {memory_after(perturb_seed=s, perturb_grant_delay=0.0) for s in seeds} == {nominal}
    assert len({memory_after(perturb_seed=s, perturb_grant_delay=3.0) for s in seeds}) > 1


def test_a_window_of_one_always_grants_the_oldest():
    jitter = Jitter(3, 0, 0, spread=0.0, window=1, in_order=False)
    assert {jitter.pick(5) for _ in range(50)} == {0}
    wide = Jitter(3, 0, 0, spread=0.0, window=3, in_order=False)
    assert {wide.pick(5) for _ in range(200)} == {0, 1, 2}
    assert wide.latency(500, now=0) == 500


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_perturbed_messages_are_received_in_the_order_sent(seed):
    """Messages of different sizes on one link, latencies +/-100 %: each receive gets its
    own send's data (a link never lets a message overtake another)."""
    sizes = [256, 8, 64, 2, 512, 16]
    messages = [np.full(n, i, dtype=np.float16) for i, n in enumerate(sizes)]
    got = []

    def kernel(tl):
        if tl.program_id(0) == 0:
            for m in messages:
                tl.send("right", m)
        else:
            futures = [tl.recv_async("left", m.shape, "f16") for m in messages]
            got.extend(np.asarray(tl.wait(f)) for f in futures)

    config = HardwareConfig(mesh_rows=1, mesh_cols=2, perturb_seed=seed, perturb_latency=1.0)
    recorder = MemoryRecorder()
    run_kernel(kernel, (), (2,), None, config, recorder=recorder)
    assert [g.tolist() for g in got] == [m.tolist() for m in messages]
    arrivals = [e[1] for e in recorder.events if e[0] is Kind.IPCQ_RECV]
    assert arrivals == sorted(arrivals)


def grants_on(recorder: MemoryRecorder, kind: str) -> list[int]:
    """The commands granted the PE's ``kind`` channel, in grant order."""
    (cid,) = [c["id"] for c in recorder.header["channels"] if c["kind"] == kind]
    return [e[4] for e in recorder.events if e[0] is Kind.CHAN_GRANT and e[3] == cid]


def test_one_write_channel_lands_its_stores_in_issue_order_whatever_the_seed():
    """Stores of different sizes in flight on the one write channel: whatever the seed,
    they are granted and land in the order issued, so the last one's bytes stay."""
    from emulator import Memory

    sizes = [64, 2, 32, 1, 16]
    memory = Memory(size_bytes=1 << 16)
    buf = memory.alloc(64 * 16 * 4)

    def kernel(tl):
        handles = [
            tl.store(buf, tl.full((rows, 16), float(i), "f32")) for i, rows in enumerate(sizes)
        ]
        for h in handles:
            tl.wait(h)

    for seed in range(1, 17):
        memory.data[:] = 0
        config = HardwareConfig(perturb_seed=seed, perturb_grant_window=4)
        recorder = MemoryRecorder()
        run_kernel(kernel, (), (1,), memory, config, recorder=recorder)
        stores = grants_on(recorder, "dma_write")
        landed = [e[3] for e in recorder.events if e[0] is Kind.COMPLETE and e[3] in stores]
        assert stores == sorted(stores) and landed == stores, seed
        assert memory.get(buf, (1, 16), np.float32)[0, 0] == len(sizes) - 1


def test_a_load_issued_during_a_grant_delay_may_be_granted_before_the_older_one():
    """The grant is picked when the delayed channel starts, among the loads waiting then:
    with a window of 2 the second of two loads issued back to back on the idle read
    channel goes first under some seeds, with a window of 1 never."""
    from emulator import Memory

    memory = Memory(size_bytes=1 << 16)
    a, b = memory.alloc(512), memory.alloc(512)

    def kernel(tl):
        first = tl.load_async(a, (8, 16), "f32")
        second = tl.load_async(b, (8, 16), "f32")
        tl.wait(first)
        tl.wait(second)

    def second_granted_first(seed: int, window: int) -> bool:
        config = HardwareConfig(perturb_seed=seed, perturb_grant_window=window)
        recorder = MemoryRecorder()
        run_kernel(kernel, (), (1,), memory, config, recorder=recorder)
        grants = grants_on(recorder, "dma_read")
        return grants != sorted(grants)

    seeds = range(1, 33)
    assert any(second_granted_first(s, window=2) for s in seeds)
    assert not any(second_granted_first(s, window=1) for s in seeds)
