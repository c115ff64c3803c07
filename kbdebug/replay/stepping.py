"""Where gdb's next, step, finish and until land on one PE: pure functions over the index.

The trace records, for every tl call, the line and function it was made in and, inside a
helper, the kernel's line that called the helper (``SourceLoc.caller``). So a PE's
*stops* are its tl calls and its kernel's start and end, each in a *frame*: the kernel
function (frame 0) or one helper function called from one kernel line. The stops a
helper makes from one call of the kernel are one *invocation* of it.

A place is a stop and how it is seen: from its own function, or from the kernel (a
helper's stop seen from the kernel is its kernel line, the call, done). Stepping over a
helper lands on its invocation's last stop seen from the kernel: the kernel's line that
called it, with the call complete, as gdb shows the line it stepped over. Lines without
a tl call leave nothing in the trace, so a step lands on the next line that made one.

Each function takes the current position (events applied) and whether the current
stop is seen from the kernel, and returns the Place to go to (the app applies its event
and shows it), or None when there is none.
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
class Place:
    """Where a step lands: the event of a stop, and whether it is seen from the kernel."""

    event: int
    from_kernel: bool


@dataclass(frozen=True)
class Stops:
    """One PE's stops in event order: frame, lines and helper invocation of each."""

    #: Event indices, sorted.
    events: np.ndarray
    #: KERNEL_FRAME, or one id per (helper file, helper function, calling kernel line).
    frames: np.ndarray
    #: The line in the stop's own function (END_LINE at the kernel's end).
    lines: np.ndarray
    #: The kernel's line: its own for a kernel stop, the calling line for a helper's.
    kernel_lines: np.ndarray
    #: Per stop, the index of the first and of the last stop of its helper invocation
    #: (its own index for a kernel stop).
    first: np.ndarray
    last: np.ndarray
    #: The function each frame is, by frame id.
    functions: tuple[str, ...]

    def current(self, position: int) -> int:
        """The index of the last stop at or before the current event (``position - 1``),
        -1 before the first."""
        return int(np.searchsorted(self.events, position - 1, side="right")) - 1

    def stop_of(self, event: int) -> int:
        """The index of the stop at ``event`` (which must be one)."""
        return int(np.searchsorted(self.events, event))

    def in_helper(self, position: int, from_kernel: bool = False) -> bool:
        """Whether the current place is inside a helper function (seen from it)."""
        k = self.current(position)
        return k >= 0 and int(self.frames[k]) != KERNEL_FRAME and not from_kernel

    def function(self, place: Place) -> str:
        """The function ``place`` is in: the kernel's when seen from it."""
        frame = int(self.frames[self.stop_of(place.event)])
        return self.functions[KERNEL_FRAME if place.from_kernel else frame]


def stops_of(index: TraceIndex, pe: int) -> Stops:
    """The stops of ``pe`` in ``index``."""
    c = index.columns
    mask = np.isin(c.kind, np.array(STOP_KINDS, dtype=c.kind.dtype)) & (c.pe == pe)
    events = np.flatnonzero(mask)
    # One look-up per distinct call site, not per call: a loop's calls share a few locs.
    loc_ids, inverse = np.unique(c.loc[events], return_inverse=True)
    frame_of: dict[tuple[str, str, str, int], int] = {}
    caller_of: dict[tuple[str, int], int] = {}
    functions = ["?"]
    site_frames = np.zeros(len(loc_ids), dtype=np.int32)
    site_lines = np.zeros(len(loc_ids), dtype=np.int64)
    site_kernel_lines = np.zeros(len(loc_ids), dtype=np.int64)
    site_callers = np.zeros(len(loc_ids), dtype=np.int32)
    for k, loc_id in enumerate(loc_ids.tolist()):
        loc = index.loc(loc_id)
        if loc is None:
            continue
        site_lines[k] = site_kernel_lines[k] = loc.line
        if loc.caller is None:
            if functions[KERNEL_FRAME] == "?":
                functions[KERNEL_FRAME] = loc.function
            continue
        key = (loc.file, loc.function, loc.caller.file, loc.caller.line)
        if key not in frame_of:
            frame_of[key] = len(functions)
            functions.append(loc.function)
        site_frames[k] = frame_of[key]
        site_kernel_lines[k] = loc.caller.line
        site_callers[k] = caller_of.setdefault(
            (loc.caller.file, loc.caller.line), len(caller_of) + 1
        )
    frames = site_frames[inverse]
    lines = site_lines[inverse]
    kernel_lines = site_kernel_lines[inverse]
    ends = c.kind[events] == Kind.KERNEL_END
    frames[ends], lines[ends], kernel_lines[ends] = KERNEL_FRAME, END_LINE, END_LINE
    first, last = _invocations(frames != KERNEL_FRAME, site_callers[inverse], inverse)
    return Stops(events, frames, lines, kernel_lines, first, last, tuple(functions))


def _invocations(
    helper: np.ndarray, callers: np.ndarray, sites: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per stop, the first and last stop of its helper invocation: helper stops in a row
    called from one kernel line, split again where the run comes back to its first call
    site from another (the same line calling the helper again, with no kernel tl call
    between: ``for j: helper(j)``; a loop inside a helper over several call sites is
    split the same way, the trace having no mark of a call's return)."""
    n = len(helper)
    index = np.arange(n)
    if not helper.any():
        return index, index
    before = np.concatenate(([False], helper[:-1]))
    same_caller = np.concatenate(([False], callers[1:] == callers[:-1]))
    starts = helper & ~(before & same_caller)
    run = np.cumsum(starts) - 1
    entry = sites[np.flatnonzero(starts)][np.maximum(run, 0)]
    # Back at the run's first call site from another one (several calls on one line,
    # trans and dot, stay one invocation).
    left = np.concatenate(([True], sites[:-1] != entry[1:] if n > 1 else []))
    starts |= helper & (sites == entry) & left & (run >= 0)
    starts |= ~helper
    first = np.maximum.accumulate(np.where(starts, index, 0))
    ends = np.concatenate((starts[1:], [True]))
    last = np.minimum.accumulate(np.where(ends, index, n - 1)[::-1])[::-1]
    return np.where(helper, first, index), np.where(helper, last, index)


def _kernel_steps(stops: Stops) -> np.ndarray:
    """Whether each stop is a step of the kernel function: its own tl calls, start and
    end, and the last stop of each helper invocation (the kernel's calling line, done)."""
    return (stops.frames == KERNEL_FRAME) | (stops.last == np.arange(len(stops.events)))


def _place(stops: Stops, k: int | None, from_kernel: bool) -> Place | None:
    if k is None:
        return None
    return Place(int(stops.events[k]), from_kernel or int(stops.frames[k]) == KERNEL_FRAME)


def _after(mask: np.ndarray, k: int) -> int | None:
    hits = np.flatnonzero(mask[k + 1 :])
    return int(hits[0]) + k + 1 if len(hits) else None


def _before(mask: np.ndarray, k: int) -> int | None:
    hits = np.flatnonzero(mask[: max(k, 0)])
    return int(hits[-1]) if len(hits) else None


def _seen_from_kernel(stops: Stops, k: int, from_kernel: bool) -> bool:
    return k < 0 or int(stops.frames[k]) == KERNEL_FRAME or from_kernel


def _kernel_step(stops: Stops, k: int, direction: int, wanted: np.ndarray) -> Place | None:
    """The kernel's next (previous) step from stop ``k`` seen from the kernel, among
    those ``wanted``; backward, from before ``k``'s invocation."""
    steps = _kernel_steps(stops) & wanted
    if direction > 0:
        return _place(stops, _after(steps, k), True)
    return _place(stops, _before(steps, int(stops.first[k]) if k >= 0 else k), True)


def next_stop(
    stops: Stops, position: int, direction: int = 1, from_kernel: bool = False
) -> Place | None:
    """gdb's next (``direction`` < 0: reverse-next): the next tl call of the current
    function, a helper it calls being one step; out of a helper, its caller's line."""
    k = stops.current(position)
    everything = np.ones(len(stops.events), dtype=bool)
    if _seen_from_kernel(stops, k, from_kernel):
        return _kernel_step(stops, k, direction, everything)
    return _in_helper(stops, k, direction, everything)


def _in_helper(stops: Stops, k: int, direction: int, wanted: np.ndarray) -> Place | None:
    """From stop ``k`` inside a helper: the next (previous) stop of its frame in its
    invocation among those ``wanted``; none left: back in the caller (forward: the
    call's line, done; backward: the kernel's step before the call)."""
    first, last = int(stops.first[k]), int(stops.last[k])
    mine = np.zeros(len(stops.events), dtype=bool)
    mine[first : last + 1] = stops.frames[first : last + 1] == stops.frames[k]
    mine &= wanted
    found = _after(mine, k) if direction > 0 else _before(mine, k)
    if found is not None:
        return _place(stops, found, False)
    if direction > 0:
        return Place(int(stops.events[last]), True)
    return _kernel_step(stops, k, -1, np.ones(len(stops.events), dtype=bool))


def step_stop(
    stops: Stops, position: int, direction: int = 1, from_kernel: bool = False
) -> Place | None:
    """gdb's step: the next tl call of the PE wherever it is, into helpers."""
    k = stops.current(position) + (1 if direction > 0 else -1)
    return _place(stops, k, False) if 0 <= k < len(stops.events) else None


def finish_stop(
    stops: Stops, position: int, direction: int = 1, from_kernel: bool = False
) -> Place | None:
    """gdb's finish: out of the current helper to its caller, the calling line done;
    reverse: back to the caller's step before the helper was entered. None in the
    kernel function (the outermost frame: nothing to finish)."""
    if not stops.in_helper(position, from_kernel):
        return None
    k = stops.current(position)
    if direction > 0:
        return Place(int(stops.events[int(stops.last[k])]), True)
    return _kernel_step(stops, k, -1, np.ones(len(stops.events), dtype=bool))


def until_stop(
    stops: Stops, position: int, direction: int = 1, from_kernel: bool = False
) -> Place | None:
    """gdb's until: the next step of the current function on a later line (out of a
    loop, not round it again), or its caller's once the function returns; reverse: the
    previous one on an earlier line."""
    k = stops.current(position)
    if _seen_from_kernel(stops, k, from_kernel):
        line = int(stops.kernel_lines[k]) if k >= 0 else -1
        further = stops.kernel_lines > line if direction > 0 else stops.kernel_lines < line
        return _kernel_step(stops, k, direction, further)
    line = int(stops.lines[k])
    further = stops.lines > line if direction > 0 else stops.lines < line
    return _in_helper(stops, k, direction, further)
