"""Timeline lanes gather their arrays when first drawn, and then show what eager ones did."""

from __future__ import annotations

import numpy as np

from emulator.scenarios import SCENARIOS
from kbdebug.replay import Replay
from kbdebug.ui.panes import lanes as L

DEFERRED = ("stalls", "busy", "times")


def test_lanes_gather_their_arrays_on_first_use_only(tmp_path):
    path = tmp_path / "ring.kbt"
    SCENARIOS["ring_attention"]().run(trace=path)
    replay = Replay.open(path)
    data = L.build_timeline(replay)
    assert {lane.pe for lane in data.lanes} == set(range(replay.index.n_pes))
    assert not any(name in vars(lane) for lane in data.lanes for name in DEFERRED)
    edges = np.linspace(0, data.end_time, 81)
    first = data.lanes_of(0)
    drawn = [data.lanes[row].cells(edges) for row in first]
    loaded = {row for row, lane in enumerate(data.lanes) if set(DEFERRED) & set(vars(lane))}
    assert loaded == set(first)
    # Once gathered, a lane draws as one built with its arrays given.
    for row, cells in zip(first, drawn, strict=True):
        lane = data.lanes[row]
        eager = {name: vars(lane)[name] for name in DEFERRED if name in vars(lane)}
        base = type(lane).__mro__[1]
        fields = {k: v for k, v in vars(lane).items() if k not in ("make", *DEFERRED)}
        assert np.array_equal(base(**fields, **eager).cells(edges), cells)
