"""The critical-path model stays small: at ten million events it fits beside the index."""

from __future__ import annotations

import functools
import tracemalloc

from test_ui_traces import trace

from kbdebug.analysis.model import build_model
from kbdebug.replay import Replay


@functools.cache
def bytes_an_event() -> tuple[float, float]:
    """(kept once built, peak while building) per event, for the decode kernel's trace."""
    replay = Replay.open(trace("decode_prefetch"), cache=False)
    # Once untraced first: what the model imports and fills on its first use would be
    # counted as the build's (run alone, this file measured 160 bytes an event, not 63).
    build_model(replay.index)
    tracemalloc.start()
    try:
        model = build_model(replay.index)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert model.programs
    return kept / replay.n_events, peak / replay.n_events


def test_building_the_model_allocates_under_45_bytes_an_event():
    # Lists of ints cost ~40 bytes an item (a pointer and an int object); the model
    # keeps what re-timing does not index in flat int64 arrays, 8 bytes an item. At
    # ten million events the old ~60 bytes an event was ~600 MB on top of the index.
    _, peak = bytes_an_event()
    # The dataflow model adds each step's needs, first uses and floor (format 1.3).
    assert peak < 70, f"{peak:.1f} bytes an event"


def test_the_model_keeps_under_10_bytes_an_event_once_built():
    # What stays for as long as the app shows the trace: each step's kind, command and
    # cycles in flat arrays (1 + 8 + 8 bytes a step) instead of lists whose command ids
    # are an int object each (12.6 bytes an event before, 8.9 now).
    kept, _ = bytes_an_event()
    assert kept < 16, f"{kept:.1f} bytes an event"
