"""Timeline lanes: what each column shows, checked against a cycle-by-cycle count."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ui_traces import fresh

from emulator.trace.schema import Kind
from kbdebug.ui.panes import lanes as L


@st.composite
def intervals(draw):
    """Non-overlapping [start, end) intervals in 0..200, in random order."""
    cuts = sorted(draw(st.sets(st.integers(0, 200), min_size=0, max_size=20)))
    pairs = [(a, b) for a, b in zip(cuts[::2], cuts[1::2], strict=False) if b > a]
    draw(st.randoms()).shuffle(pairs)
    return pairs


@settings(max_examples=60, deadline=None)
@given(pairs=intervals(), width=st.integers(1, 50), start=st.integers(0, 50))
def test_busy_fraction_of_a_column_is_the_share_of_its_cycles_covered(pairs, width, start):
    busy = L.Intervals(
        np.array([a for a, _ in pairs], dtype=np.int64),
        np.array([b for _, b in pairs], dtype=np.int64),
        np.arange(len(pairs)),
    )
    edges = np.linspace(start, start + 150, width + 1)
    covered = np.zeros(400, dtype=bool)
    for a, b in pairs:
        covered[a:b] = True
    fine = np.arange(0, 400, 0.25)  # four samples per cycle
    on = covered[np.floor(fine).astype(int)]
    for k in range(width):
        inside = (fine >= edges[k]) & (fine < edges[k + 1])
        if inside.sum() >= 8:
            assert abs(busy.fraction(edges)[k] - on[inside].mean()) < 0.2


def test_an_interval_inside_one_column_still_shows():
    busy = L.Intervals(np.array([10]), np.array([11]), np.array([0]))
    cells = L.ChannelLane(0, "rd0", "dma_read", 0, busy=busy).cells(np.array([0.0, 100.0, 200.0]))
    assert cells.tolist() == [L.LEVEL + 1, L.LEVEL]


def test_channel_bar_height_is_the_busy_share_in_eighths():
    busy = L.Intervals(np.array([0, 100]), np.array([50, 200]), np.array([0, 1]))
    lane = L.ChannelLane(0, "rd0", "dma_read", 0, busy=busy)
    cells = lane.cells(np.array([0.0, 100.0, 200.0, 300.0]))
    assert cells.tolist() == [L.LEVEL + 4, L.LEVEL + 8, L.LEVEL]
    assert lane.level(0.0, 300.0) == "50%"
    assert lane.level(0.0, 100_000.0) == "<1%"


def test_flawed_prefetch_has_kernel_read_write_gemm_math_and_scratch_lanes():
    data = L.build_timeline(fresh("flawed_prefetch"))
    assert [(lane.kind, lane.label.strip()) for lane in data.lanes] == [
        ("kernel", "PE0 kernel"),
        ("dma_read", "rd0"),
        ("dma_write", "wr0"),
        ("gemm", "gemm"),
        ("math", "math"),
        ("scratch", "scratch"),
    ]


def test_kernel_lane_is_stalled_exactly_during_stalled_waits():
    replay = fresh("flawed_prefetch")
    data = L.build_timeline(replay)
    kernel = data.lanes[0]
    c, f = replay.index.columns, replay.index.futures
    future = int(np.flatnonzero(f.stall > 500)[0])
    begin, end = int(c.time[f.wait_begin[future]]), int(c.time[f.wait_end[future]])
    edges = np.arange(begin, end + 1, dtype=np.float64)  # one cycle per column
    assert set(kernel.cells(edges).tolist()) == {L.STALLED}
    assert kernel.cells(np.array([end, end + 1.0])).tolist() != [L.STALLED]


def test_read_channel_is_full_while_a_load_holds_it():
    replay = fresh("flawed_prefetch")
    data = L.build_timeline(replay)
    k, time = replay.index.commands, replay.index.columns.time
    load = int(np.flatnonzero(k.grant >= 0)[0])
    grant, release = int(time[k.grant[load]]), int(time[k.release[load]])
    lane = next(lane for lane in data.lanes if lane.channel == int(k.channel[load]))
    cells = lane.cells(np.arange(grant, release + 1, dtype=np.float64))
    assert set(cells.tolist()) == {L.LEVEL + 8}
    assert lane.level(grant, release) == "100%"


def test_scratch_lane_is_scaled_to_capacity_and_labelled_with_peak_over_capacity():
    replay = fresh("flawed_prefetch")
    lane = L.build_timeline(replay).lanes[-1]
    c = replay.index.columns
    scratch = np.flatnonzero((c.kind == Kind.SCRATCH_ALLOC) | (c.kind == Kind.SCRATCH_FREE))
    peak = int(c.val[scratch].max())
    capacity = replay.index.header["config"]["scratch_bytes"]
    assert lane.capacity == capacity == 1 << 20
    whole = lane.cells(np.array([0.0, float(replay.end_time + 1)]))
    # 34 KiB of 1 MiB is the lowest bar, not a full one.
    assert whole.tolist() == [L.LEVEL + int(np.ceil(8 * peak / capacity))] == [L.LEVEL + 1]
    before = lane.cells(np.array([0.0, float(c.time[scratch[0]])]))
    assert before.tolist() == [L.LEVEL]
    assert lane.level(0.0, float(replay.end_time)) == f"{L.size_text(peak)}/1M"
    assert L.size_text(peak) == f"{round(peak / 1024)}K"


def test_kernel_label_gives_the_share_it_ran_without_stalling():
    replay = fresh("flawed_prefetch")
    kernel = L.build_timeline(replay).lanes[0]
    f = replay.index.futures
    stalled = int(f.stall[f.stall > 0].sum())
    share = kernel.share(0.0, float(replay.end_time))
    assert abs(share - (1 - stalled / (kernel.end - kernel.start))) < 0.01
    assert kernel.level(0.0, float(replay.end_time)) == f"{share:.0%}"


def test_future_span_runs_from_issue_to_resolution_on_its_pe_and_channel():
    replay = fresh("flawed_prefetch")
    f, k, time = replay.index.futures, replay.index.commands, replay.index.columns.time
    cmd = int(f.cmd[1])
    pe, issue, resolve, grant, release, channel = L.future_span(replay, 1)
    assert (pe, channel) == (int(k.pe[cmd]), int(k.channel[cmd]))
    assert issue == time[k.issue[cmd]] and resolve == time[f.wait_end[1]]
    assert issue <= grant <= release <= resolve
    assert L.future_span(replay, -1) is None
