"""gdb's source-level stepping keys of both modes: n next, s step, o finish, t until, each
with its reverse (upper case), over the focused PE's tl calls (kbdebug.replay.stepping)."""

from __future__ import annotations

import re
from collections.abc import Callable

from emulator.trace.schema import Kind, SourceLoc
from kbdebug.replay import Replay, stepping
from kbdebug.replay.index import TraceIndex
from kbdebug.ui import queries

#: A tl call's place in its status text: `` at attention.py:86``.
_PLACE = re.compile(r" at [^ ]+:\d+")

#: A comment at the end of a line of code (not a # inside a string, most of the time).
_COMMENT = re.compile(r"\s+#[^'\"]*$")

#: The gdb command each move is, for the status line.
_NAMES = {
    stepping.next_stop: "next",
    stepping.step_stop: "step",
    stepping.finish_stop: "finish",
    stepping.until_stop: "until",
}


class SteppingActions:
    """DebuggerApp's n/N, s/S, o/O and t/T on the focused run (a mixin: the state is the
    app's). Where each lands is kbdebug.replay.stepping's; this says what it landed on."""

    #: The focused run's stops of one PE, with the index they are of.
    _stops: tuple[TraceIndex, int, stepping.Stops] | None = None

    #: (run, PE, position) where the PE's current stop in that run (named by its
    #: run_prefix) is seen from its kernel: the source pane bound to it shows the
    #: kernel's calling line there.
    kernel_view_at: tuple[str, int, int] = ("", -1, -1)

    def stops(self, pe: int) -> stepping.Stops:
        """The focused run's stops on ``pe``, found at the first step (not on the way to
        the first screen) and kept until another PE or trace is stepped."""
        index = self.replay.index
        if self._stops is None or self._stops[0] is not index or self._stops[1] != pe:
            self._stops = (index, pe, stepping.stops_of(index, pe))
        return self._stops[2]

    def action_next_line(self, direction: int) -> None:
        self._source_step(stepping.next_stop, direction)

    def action_step_into(self, direction: int) -> None:
        self._source_step(stepping.step_stop, direction)

    def action_finish(self, direction: int) -> None:
        self._source_step(stepping.finish_stop, direction)

    def action_until(self, direction: int) -> None:
        self._source_step(stepping.until_stop, direction)

    def _source_step(self, move: Callable[..., stepping.Place | None], direction: int) -> None:
        name = _NAMES[move] if direction > 0 else f"reverse-{_NAMES[move]}"
        pe, replay = self.focused_pe, self.replay
        stops = self.stops(pe)
        run = self.run_prefix()
        from_kernel = self.kernel_view_at == (run, pe, replay.position)
        if move is stepping.finish_stop and not stops.in_helper(replay.position, from_kernel):
            self._refuse(self.in_run(f"{name}: PE {pe} is in its kernel function, not in a helper"))
            return
        place = move(stops, replay.position, direction, from_kernel)
        if place is None:
            which = "later" if direction > 0 else "earlier"
            self._refuse(self.in_run(f"{name}: PE {pe} has no {which} place to stop"))
            return
        self.move_to(place.event + 1, f"{name}: {stop_text(replay, stops, place)}")
        self.kernel_view_at = (run, pe, place.event + 1) if place.from_kernel else ("", -1, -1)


def stop_text(replay: Replay, stops: stepping.Stops, place: stepping.Place) -> str:
    """What a source-level step landed on, and in which function: ``PE 0 tl.wait on future
    1 at k.py:12 in looped: stalls 503 cycles (event #15)``; a helper call stepped over:
    ``PE 0 at k.py:14 in looped: scaled(tl, x) ran 2 tl calls (event #26)``."""
    event = place.event
    c = replay.index.columns
    kind = int(c.kind[event])
    pe = int(c.pe[event])
    function = stops.function(place)[:80]
    k = stops.stop_of(event)
    if place.from_kernel and int(stops.frames[k]) != stepping.KERNEL_FRAME:
        loc = replay.index.loc(int(c.loc[event]))
        calling = loc.caller if loc is not None else None
        first, last = int(stops.first[k]), int(stops.last[k])
        calls = f"{last - first + 1} tl call{'s' if last > first else ''}"
        # The calling line as written (kv.next(0)), else the helper it went into.
        code = _source_line(replay, calling) or f"{stops.functions[int(stops.frames[first])]}()"
        where = queries.short_loc(calling)
        return f"PE {pe} at {where} in {function}: {code[:60]} ran {calls} (event #{event})"
    if kind == Kind.KERNEL_START:
        loc = replay.index.loc(int(c.loc[event]))
        return f"PE {pe} enters {function} at {queries.short_loc(loc)} (event #{event})"
    if kind == Kind.KERNEL_END:
        return f"PE {pe} returns from {function} (event #{event})"
    if kind == Kind.KERNEL_ERROR:
        return f"{queries.event_text(replay, event)} (event #{event})"
    text = queries.tl_call_text(replay, event)
    # The function after the call's place: one name, never markup (the status is plain).
    return _PLACE.sub(lambda m: f"{m.group(0)} in {function}", text, count=1)


def _source_line(replay: Replay, loc: SourceLoc | None) -> str:
    """The code of ``loc``'s line in the trace's embedded sources (without its comment),
    "" if it has none."""
    if loc is None:
        return ""
    lines = replay.index.sources.get(loc.file, "").splitlines()
    text = lines[loc.line - 1].strip() if 0 < loc.line <= len(lines) else ""
    return _COMMENT.sub("", text)
