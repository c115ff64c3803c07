"""Cycles from the index: event times, the run's end, channel holds, kernel spans, exact sums."""

from __future__ import annotations

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.replay.index import NONE, TraceIndex


def event_times(index: TraceIndex, events: np.ndarray) -> np.ndarray:
    """The cycle of each event index, -1 where the index is -1."""
    events = np.asarray(events, dtype=np.int64)
    out = np.full(len(events), NONE, dtype=np.int64)
    has = events >= 0
    out[has] = index.columns.time[events[has]]
    return out


def end_time(index: TraceIndex) -> int:
    """The run's end cycle: the footer's, else the last event's."""
    footer = index.footer
    if footer and footer.get("end_time") is not None:
        return int(footer["end_time"])
    return int(index.columns.time[-1]) if index.n_events else 0


def hold_cycles(index: TraceIndex) -> np.ndarray:
    """Per command id: cycles it held its channel (to the end of the run if never released)."""
    cmds = index.commands
    granted = event_times(index, cmds.grant)
    released = event_times(index, cmds.release)
    released = np.where((granted >= 0) & (released < 0), end_time(index), released)
    return np.where(granted >= 0, released - granted, 0)


def channel_busy_cycles(index: TraceIndex) -> list[int]:
    """Per channel id: the sum of its commands' grant-to-release cycles (exact ints)."""
    cmds = index.commands
    held = cmds.channel >= 0
    return exact_sums(cmds.channel[held], hold_cycles(index)[held], len(index.channels))


def kernel_spans(index: TraceIndex) -> tuple[np.ndarray, np.ndarray]:
    """Per PE: the cycle its kernel started and ended (-1 if it never started).

    A kernel that errors or deadlocks ends at that event; one the trace cuts off
    ends at the run's end.
    """
    c = index.columns
    n = index.n_pes
    start = np.full(n, NONE, dtype=np.int64)
    end = np.full(n, NONE, dtype=np.int64)
    starts = np.flatnonzero(c.kind == Kind.KERNEL_START)
    start[c.pe[starts]] = c.time[starts]
    ends = np.flatnonzero(np.isin(c.kind, [Kind.KERNEL_END, Kind.KERNEL_ERROR, Kind.DEADLOCK]))
    # The first end event of a PE wins (reversed assignment keeps the first).
    end[c.pe[ends][::-1]] = c.time[ends][::-1]
    end = np.where((start >= 0) & (end < 0), end_time(index), end)
    return start, end


def exact_sums(keys: np.ndarray, values: np.ndarray, n: int) -> list[int]:
    """Per key 0..n-1, the sum of its ``values`` as a Python int, exact whatever the sum.

    The reader refuses cycle values past 2**53 (wire.MAX_CYCLES), but a sum of many can
    pass 2**63 and wrap an int64, or 2**53 and lose digits as a float64 (bincount's
    weights). Each value (0..2**54) is split into 27-bit halves summed apart, each
    sum exact in a float64 for up to 2**26 values.
    """
    values = np.asarray(values, dtype=np.int64)
    low = np.bincount(keys, weights=values & ((1 << 27) - 1), minlength=n)
    high = np.bincount(keys, weights=values >> 27, minlength=n)
    return [(int(h) << 27) + int(lo) for h, lo in zip(high.tolist(), low.tolist(), strict=True)]
