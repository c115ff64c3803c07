"""Where gdb's next, step, finish and until land on one PE: pure functions over the index.

The trace records, for every tl call, the line and function it was made in and, inside a
helper, the kernel's line that called the helper (``SourceLoc.caller``). So a PE's
*stops* are its tl calls and its kernel's start and end, each in a *frame*: the kernel
function (frame 0) or one helper function called from one kernel line. Lines without a
tl call leave nothing in the trace, so a step lands on the next tl call of the line it
goes to. Each function takes the current position (events applied) and returns the
event to land on (the app moves to it applied), or None when there is none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.replay.tables import TraceIndex

#: The frame of the kernel function itself.
KERNEL_FRAME = 0

#: Kinds of the events a source-level step can stop at.
STOP_KINDS = (Kind.ISSUE, Kind.WAIT_BEGIN, Kind.KERNEL_START, Kind.KERNEL_END, Kind.KERNEL_ERROR)

#: The line given to a kernel's end: after every line, so until always reaches it.
END_LINE = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Stops:
    """One PE's stops in event order, each with its frame and its line in that frame."""

    #: Event indices, sorted.
    events: np.ndarray
    #: KERNEL_FRAME, or one id per (helper file, helper function, calling kernel line).
    frames: np.ndarray
    #: The line in the stop's own function (END_LINE at the kernel's end).
    lines: np.ndarray
    #: The function each stop is in, by frame id.
    functions: tuple[str, ...]

    def current(self, position: int) -> int:
        """The index of the last stop at or before the current event (``position - 1``),
        -1 before the first."""
        return int(np.searchsorted(self.events, position - 1, side="right")) - 1

    def in_helper(self, position: int) -> bool:
        """Whether the PE is inside a helper function at ``position``."""
        k = self.current(position)
        return k >= 0 and int(self.frames[k]) != KERNEL_FRAME

    def function(self, event: int) -> str:
        """The function the stop at ``event`` is in."""
        k = int(np.searchsorted(self.events, event))
        return self.functions[int(self.frames[k])]


def stops_of(index: TraceIndex, pe: int) -> Stops:
    """The stops of ``pe`` in ``index``."""
    c = index.columns
    mask = np.isin(c.kind, np.array(STOP_KINDS, dtype=c.kind.dtype)) & (c.pe == pe)
    events = np.flatnonzero(mask)
    # One look-up per distinct call site, not per call: a loop's calls share a few locs.
    loc_ids, inverse = np.unique(c.loc[events], return_inverse=True)
    frame_of: dict[tuple[str, str, str, int], int] = {}
    functions = ["?"]
    site_frames = np.zeros(len(loc_ids), dtype=np.int32)
    site_lines = np.zeros(len(loc_ids), dtype=np.int64)
    for k, loc_id in enumerate(loc_ids.tolist()):
        loc = index.loc(loc_id)
        if loc is None:
            continue
        site_lines[k] = loc.line
        if loc.caller is None:
            if functions[KERNEL_FRAME] == "?":
                functions[KERNEL_FRAME] = loc.function
            continue
        key = (loc.file, loc.function, loc.caller.file, loc.caller.line)
        if key not in frame_of:
            frame_of[key] = len(functions)
            functions.append(loc.function)
        site_frames[k] = frame_of[key]
    frames = site_frames[inverse]
    lines = site_lines[inverse]
    ends = c.kind[events] == Kind.KERNEL_END
    frames[ends], lines[ends] = KERNEL_FRAME, END_LINE
    return Stops(events, frames, lines, tuple(functions))


def _first(candidates: np.ndarray, offset: int) -> int | None:
    hits = np.flatnonzero(candidates)
    return None if not len(hits) else int(hits[0]) + offset


def _last(candidates: np.ndarray) -> int | None:
    hits = np.flatnonzero(candidates)
    return None if not len(hits) else int(hits[-1])


def _frame_and_line(stops: Stops, k: int) -> tuple[int, int]:
    # Before the first stop the PE is about to enter its kernel, above its first line.
    if k < 0:
        return KERNEL_FRAME, -1
    return int(stops.frames[k]), int(stops.lines[k])


def _land(stops: Stops, position: int, direction: int, wanted) -> int | None:
    """The event of the first stop after the current one (before it when ``direction``
    < 0) for which ``wanted(frames, lines)`` holds."""
    k = stops.current(position)
    if direction > 0:
        after = slice(k + 1, None)
        found = _first(wanted(stops.frames[after], stops.lines[after]), k + 1)
    else:
        if k <= 0:
            return None
        found = _last(wanted(stops.frames[:k], stops.lines[:k]))
    return None if found is None else int(stops.events[found])


def next_stop(stops: Stops, position: int, direction: int = 1) -> int | None:
    """gdb's next (``direction`` < 0: reverse-next): the next tl call of the current
    function, over the helpers it calls; out of a helper, its caller's next one."""
    frame, _ = _frame_and_line(stops, stops.current(position))
    return _land(stops, position, direction, lambda f, _: (f == frame) | (f == KERNEL_FRAME))


def step_stop(stops: Stops, position: int, direction: int = 1) -> int | None:
    """gdb's step: the next tl call of the PE wherever it is, into helpers."""
    return _land(stops, position, direction, lambda f, _: np.ones(len(f), dtype=bool))


def finish_stop(stops: Stops, position: int, direction: int = 1) -> int | None:
    """gdb's finish: out of the current helper to its caller's next tl call;
    reverse: back to the caller's last tl call before the helper was entered.
    None in the kernel function (the outermost frame: nothing to finish)."""
    if not stops.in_helper(position):
        return None
    return _land(stops, position, direction, lambda f, _: f == KERNEL_FRAME)


def until_stop(stops: Stops, position: int, direction: int = 1) -> int | None:
    """gdb's until: the next tl call of the current function on a later line (out of
    a loop, not round it again), or its caller's once the function returns;
    reverse: the previous one on an earlier line."""
    frame, line = _frame_and_line(stops, stops.current(position))

    def wanted(f: np.ndarray, lines: np.ndarray) -> np.ndarray:
        further = lines > line if direction > 0 else lines < line
        same = (f == frame) & further
        return same | (f == KERNEL_FRAME) if frame != KERNEL_FRAME else same

    return _land(stops, position, direction, wanted)
