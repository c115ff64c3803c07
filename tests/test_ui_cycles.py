"""Timeline cycles kept as narrow integers draw exactly what float64 cycles drew."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kbdebug.ui.panes import lanes as L
from kbdebug.ui.panes.cycles import count, cycle_dtype, narrow

BIG = 1 << 40  # past int32: the int64 path


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(st.integers(0, 60), max_size=30),
    queries=st.lists(st.floats(-5, 70, allow_nan=False), min_size=1, max_size=20),
    offset=st.sampled_from([0, BIG]),
    side=st.sampled_from(["left", "right"]),
)
def test_counting_into_integers_equals_searchsorted_into_floats(values, queries, offset, side):
    ordered = narrow(np.sort(np.array(values, dtype=np.int64)) + offset)[0]
    assert ordered.dtype == (np.int32 if offset == 0 else np.int64) or not values
    x = np.array(queries) + offset
    expected = np.searchsorted(ordered.astype(np.float64), x, side=side)
    assert count(ordered, x, side).tolist() == expected.tolist()


def test_bounds_past_the_dtype_count_none_or_all():
    ordered = narrow(np.array([0, 0, 5, 2**31 - 2]))[0]
    assert ordered.dtype == np.int32
    x = np.array([-1e30, -0.5, 0.0, 2.0**31, 1e30])
    assert count(ordered, x, "right").tolist() == [0, 0, 2, 4, 4]
    assert count(ordered, x, "left").tolist() == [0, 0, 0, 4, 4]


def test_cycle_dtype_widens_rather_than_wraps():
    assert cycle_dtype(0, 2**31 - 2) == np.int32
    assert cycle_dtype(0, 2**31 - 1) == np.int64
    assert cycle_dtype(-1, 5) == np.int64
    assert cycle_dtype(0, 2**63) == np.float64


@settings(max_examples=60, deadline=None)
@given(
    cuts=st.sets(st.integers(0, 300), max_size=24),
    width=st.integers(1, 40),
    start=st.floats(-20, 200, allow_nan=False),
    span=st.floats(0.5, 400, allow_nan=False),
    offset=st.sampled_from([0, BIG]),
)
def test_lanes_from_integer_cycles_draw_as_from_float_cycles(cuts, width, start, span, offset):
    cuts = sorted(cuts)
    pairs = list(zip(cuts[::2], cuts[1::2], strict=False))  # zero-length ones included
    starts = np.array([a for a, _ in pairs], dtype=np.int64) + offset
    ends = np.array([b for _, b in pairs], dtype=np.int64) + offset
    ids = np.arange(len(pairs))
    exact = L.Intervals(starts, ends, ids)
    floats = L.Intervals(starts.astype(np.float64), ends.astype(np.float64), ids)
    assert exact.starts.dtype.kind == "i" and floats.starts.dtype == np.float64
    edges = np.linspace(start, start + span, width + 1) + offset
    assert exact.fraction(edges).tolist() == floats.fraction(edges).tolist()
    assert exact.touching(edges).tolist() == floats.touching(edges).tolist()
    lane = L.ChannelLane(0, "rd0", "dma_read", 0, busy=exact)
    float_lane = L.ChannelLane(0, "rd0", "dma_read", 0, busy=floats)
    assert lane.cells(edges).tolist() == float_lane.cells(edges).tolist()
    assert lane.level(edges[0], edges[-1]) == float_lane.level(edges[0], edges[-1])
    levels = np.arange(len(starts), dtype=np.int32) * 7 % 50
    scratch = [
        L.ScratchLane(0, "s", "scratch", times=t, levels=levels, capacity=64)
        for t in (narrow(starts)[0], starts.astype(np.float64))
    ]
    assert scratch[0].cells(edges).tolist() == scratch[1].cells(edges).tolist()
    assert scratch[0].level(edges[0], edges[-1]) == scratch[1].level(edges[0], edges[-1])


def test_a_ten_thousand_interval_lane_keeps_four_bytes_a_cycle_value():
    starts = np.arange(0, 20_000, 2, dtype=np.int64)
    busy = L.Intervals(starts, starts + 1, np.arange(len(starts), dtype=np.int32))
    assert {busy.starts.dtype, busy.ends.dtype, busy.before.dtype} == {np.dtype(np.int32)}
    assert busy.fraction(np.array([0.0, 20_000.0])).tolist() == [0.5]
