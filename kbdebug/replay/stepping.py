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
a tl call leave nothing in the trace, so a step lands on the next line that made one,
once per run of that line (on its last tl call). A helper called from a helper shares
its caller's kernel line; which function calls which is read from the embedded source,
so leaving the inner one lands on its caller's next step, not on its next call.

Each function takes the current position (events applied) and whether the current
stop is seen from the kernel, and returns the Place to go to (the app applies its event
and shows it), or None when there is none.
"""

from __future__ import annotations

import ast
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
    #: Per stop, what tl call it is (kind and op): a line runs again where its first
    #: call comes back.
    signatures: np.ndarray
    #: The same seen from the kernel: a helper invocation's last stop is its call.
    kernel_signatures: np.ndarray
    #: Per frame, the frames of its kernel line whose function calls its own (directly
    #: or not): a nested helper's stops share the kernel's line with its caller's.
    callers: tuple[frozenset[int], ...]

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
    callers = _frame_callers(frame_of, index.sources)
    # Only a helper the kernel calls itself starts an invocation again at its first call
    # site: a nested one's calls are all inside one call of its caller.
    called_by_kernel = np.array([not c for c in callers], dtype=bool)[frames]
    first, last = _invocations(
        frames != KERNEL_FRAME, site_callers[inverse], inverse, called_by_kernel
    )
    ops = c.op[events].astype(np.int64)
    signatures = (c.kind[events].astype(np.int64) << 32) | (ops + 1)
    helper = frames != KERNEL_FRAME
    kernel_signatures = np.where(helper, (1 << 62) + inverse[first], signatures)
    return Stops(
        events,
        frames,
        lines,
        kernel_lines,
        first,
        last,
        tuple(functions),
        signatures,
        kernel_signatures,
        callers,
    )


def _frame_callers(
    frame_of: dict[tuple[str, str, str, int], int], sources: dict[str, str]
) -> tuple[frozenset[int], ...]:
    """Per frame id, the frames of the same kernel line whose function calls its own,
    directly or through others, as the trace's embedded sources say (none known: the
    kernel calls it)."""
    calls: dict[str, dict[str, set[str]]] = {}
    for file in {key[0] for key in frame_of}:
        calls[file] = _calls_by_function(sources.get(file, ""))
    direct: dict[int, set[int]] = {frame: set() for frame in frame_of.values()}
    for (_, function, caller_file, line), frame in frame_of.items():
        for (other_file, other, o_caller_file, o_line), other_frame in frame_of.items():
            same_call = (o_caller_file, o_line) == (caller_file, line)
            if same_call and other_frame != frame and function in calls[other_file].get(other, ()):
                direct[frame].add(other_frame)
    closed: list[frozenset[int]] = [frozenset()] * (len(direct) + 1)
    for frame in direct:
        seen, todo = set(), list(direct[frame])
        while todo:
            other = todo.pop()
            if other not in seen and other != frame:
                seen.add(other)
                todo.extend(direct[other])
        closed[frame] = frozenset(seen)
    return tuple(closed)


def _calls_by_function(source: str) -> dict[str, set[str]]:
    """The names each function of ``source`` calls (``f(...)``, ``x.f(...)``), {} when it
    does not parse (the trace's sources are untrusted: parsed, never run)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    calls: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = calls.setdefault(node.name, set())
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call):
                    func = inner.func
                    if isinstance(func, ast.Name):
                        names.add(func.id)
                    elif isinstance(func, ast.Attribute):
                        names.add(func.attr)
    return calls


def _invocations(
    helper: np.ndarray, callers: np.ndarray, sites: np.ndarray, called_by_kernel: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per stop, the first and last stop of its helper invocation: helper stops in a row
    called from one kernel line, split again where the run comes back to its first call
    site from another (the same line calling the helper again, with no kernel tl call
    between: ``for j: helper(j)``; a loop inside a helper over several call sites is
    split the same way, the trace having no mark of a call's return). Only a first call
    site in a helper the kernel calls itself (``called_by_kernel``) splits."""
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
    starts |= helper & (sites == entry) & left & (run >= 0) & called_by_kernel
    starts |= ~helper
    first = np.maximum.accumulate(np.where(starts, index, 0))
    ends = np.concatenate((starts[1:], [True]))
    last = np.minimum.accumulate(np.where(ends, index, n - 1)[::-1])[::-1]
    return np.where(helper, first, index), np.where(helper, last, index)


def _line_ends(lines: np.ndarray, signatures: np.ndarray) -> np.ndarray:
    """Of one function's stops in order, those that end a run of its line: the line
    changes next, or the line runs again (as in a loop: its tl calls repeat whole, each
    run starting with the same call); several tl calls of one line run are one step.
    The kernel's start and end are steps of their own (a one-line kernel's def holds
    its calls)."""
    n = len(lines)
    kinds = signatures >> 32
    alone = np.isin(kinds, [Kind.KERNEL_START, Kind.KERNEL_END, Kind.KERNEL_ERROR])
    starts = np.ones(n, dtype=bool)
    starts[1:] = (lines[1:] != lines[:-1]) | alone[1:] | alone[:-1]
    begins = np.flatnonzero(starts)
    begin = begins[np.cumsum(starts) - 1]
    again = (signatures == signatures[begin]) & (np.arange(n) > begin)
    # A line's calls that repeat whole (period: where its first call comes back) are the
    # line run again; a first call merely recurring (a * b + c * d) is not.
    for b in np.unique(begin[again]).tolist():
        end = int(begins[np.searchsorted(begins, b, side="right")]) if b < begins[-1] else n
        calls = signatures[b:end]
        period = int(np.flatnonzero(calls[1:] == calls[0])[0]) + 1
        whole = len(calls) % period == 0
        if whole and np.array_equal(calls, np.tile(calls[:period], len(calls) // period)):
            starts[b:end:period] = True
    return np.concatenate((starts[1:], [True])) if n else starts


def _kernel_steps(stops: Stops) -> np.ndarray:
    """Whether each stop is a step of the kernel function: the last stop of each run of
    one of its lines, a helper invocation counting as a tl call of its calling line
    (the line, done)."""
    seen = (stops.frames == KERNEL_FRAME) | (stops.last == np.arange(len(stops.events)))
    at = np.flatnonzero(seen)
    steps = np.zeros(len(stops.events), dtype=bool)
    steps[at] = _line_ends(stops.kernel_lines[at], stops.kernel_signatures[at])
    return steps


def _call_span(stops: Stops, k: int) -> tuple[int, int]:
    """The first and last stop of the call of helper stop ``k``'s function that made
    it: its invocation, cut where a function that calls it makes a stop (the trace
    records only the kernel's line for a helper called from a helper)."""
    first, last = int(stops.first[k]), int(stops.last[k])
    callers = stops.callers[int(stops.frames[k])]
    if not callers:
        return first, last
    span = stops.frames[first : last + 1]
    outer = np.flatnonzero(np.isin(span, np.array(sorted(callers), dtype=span.dtype))) + first
    cut = int(np.searchsorted(outer, k))
    start = int(outer[cut - 1]) + 1 if cut > 0 else first
    end = int(outer[cut]) - 1 if cut < len(outer) else last
    return start, end


def _helper_steps(stops: Stops, k: int) -> np.ndarray:
    """Whether each stop is a step of helper stop ``k``'s function in its call: the
    last stop of each run of one of its lines (what ``next`` lands on in it)."""
    start, end = _call_span(stops, k)
    at = np.flatnonzero(stops.frames[start : end + 1] == stops.frames[k]) + start
    steps = np.zeros(len(stops.events), dtype=bool)
    steps[at] = _line_ends(stops.lines[at], stops.signatures[at])
    return steps


def _returned(stops: Stops, k: int, direction: int) -> Place | None:
    """Out of helper stop ``k``'s call: forward, its caller's step that follows (the
    kernel's calling line, done, when the kernel is the caller); backward, the
    caller's stop before the call (the kernel's step before it)."""
    start, end = _call_span(stops, k)
    first, last = int(stops.first[k]), int(stops.last[k])
    if direction > 0:
        if end == last:
            return Place(int(stops.events[last]), True)
        return _place(stops, _after(_helper_steps(stops, end + 1), end), False)
    if start > first:
        return _place(stops, start - 1, False)
    return _kernel_step(stops, k, -1, np.ones(len(stops.events), dtype=bool))


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
    """From stop ``k`` inside a helper: the next (previous) step of its function in its
    call among those ``wanted``; none left: back in the caller (forward: its next step,
    the kernel's calling line done; backward: the caller's step before the call)."""
    mine = _helper_steps(stops, k) & wanted
    found = _after(mine, k) if direction > 0 else _before(mine, k)
    if found is not None:
        return _place(stops, found, False)
    return _returned(stops, k, direction)


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
    return _returned(stops, stops.current(position), direction)


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
