"""Cycle arrays for the timeline in the narrowest exact dtype, and searches into them.

At ten million events the timeline keeps a few million cycle values; int32 holds them
exactly for any run under 2**31 cycles and halves what float64 kept. A search of float
column edges into an integer array would make numpy convert the whole array on every
call, so the edges are rounded to integers instead (exactly: for an integer v,
v < x iff v < ceil(x), and v <= x iff v <= floor(x)).
"""

from __future__ import annotations

import numpy as np

#: Values int32 keeps: 0 up to below its maximum, so a search bound clipped to -1 or
#: to the maximum still counts none or all of them.
_INT32_LIMIT = np.iinfo(np.int32).max - 1
#: Values int64 keeps: strictly inside +-2**62, a bound float64 converts exactly and a
#: search bound clips to; beyond it float64.
_INT64_LIMIT = 1 << 62
#: Gathers from the event columns go in blocks this long, so no full-length int64
#: temporary is made beside the narrow result.
BLOCK = 1 << 18


def cycle_dtype(low: int | float, high: int | float) -> np.dtype:
    """The narrowest dtype that holds integers from ``low`` to ``high`` and searches exactly."""
    if 0 <= low and high <= _INT32_LIMIT:
        return np.dtype(np.int32)
    if -_INT64_LIMIT < low and high < _INT64_LIMIT:
        return np.dtype(np.int64)
    return np.dtype(np.float64)


def narrow(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Integer ``arrays`` in the one narrowest dtype that holds them all (as
    ``cycle_dtype`` chooses); with any float among them, all in float64."""
    arrays = tuple(np.asarray(a) for a in arrays)
    if any(a.dtype.kind not in "iu" for a in arrays):
        return tuple(a.astype(np.float64, copy=False) for a in arrays)
    filled = [a for a in arrays if len(a)]
    if not filled:
        return tuple(a.astype(np.int32) for a in arrays)
    low = min(int(a.min()) for a in filled)
    high = max(int(a.max()) for a in filled)
    return tuple(a.astype(cycle_dtype(low, high), copy=False) for a in arrays)


def count(ordered: np.ndarray, x: np.ndarray | float, side: str) -> np.ndarray:
    """``np.searchsorted(ordered, x, side)`` for float ``x`` without converting ``ordered``,
    which holds values of the range ``cycle_dtype`` gave its dtype for."""
    if ordered.dtype not in (np.int32, np.int64):
        return np.searchsorted(ordered, x, side=side)
    bound = np.ceil(x) if side == "left" else np.floor(x)
    if ordered.dtype == np.int32:
        low, high = -1, _INT32_LIMIT + 1
    else:
        low, high = -_INT64_LIMIT, _INT64_LIMIT
    bound = np.clip(bound, low, high).astype(ordered.dtype)
    return np.searchsorted(ordered, bound, side=side)


def gather(column: np.ndarray, events: np.ndarray, dtype: np.dtype, missing: int | None = None):
    """``column[events]`` in ``dtype`` (which must hold its values), block by block; an
    event < 0 gives ``missing`` when that is given."""
    out = np.empty(len(events), dtype)
    for start in range(0, len(events), BLOCK):
        part = events[start : start + BLOCK]
        if missing is None:
            out[start : start + BLOCK] = column[part]
        else:
            out[start : start + BLOCK] = np.where(part >= 0, column[np.maximum(part, 0)], missing)
    return out
