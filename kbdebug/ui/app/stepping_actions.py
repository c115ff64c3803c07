"""gdb's source-level stepping keys of both modes: n next, s step, o finish, t until, each
with its reverse (upper case), over the focused PE's tl calls (kbdebug.replay.stepping)."""

from __future__ import annotations

import re
from collections.abc import Callable

from emulator.trace.schema import Kind
from kbdebug.replay import Replay, stepping
from kbdebug.replay.index import TraceIndex
from kbdebug.ui import queries

#: A tl call's place in its status text: `` at attention.py:86``.
_PLACE = re.compile(r" at [^ ]+:\d+")

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

    def _source_step(self, move: Callable[..., int | None], direction: int) -> None:
        name = _NAMES[move] if direction > 0 else f"reverse-{_NAMES[move]}"
        pe, replay = self.focused_pe, self.replay
        stops = self.stops(pe)
        if move is stepping.finish_stop and not stops.in_helper(replay.position):
            self._refuse(self.in_run(f"{name}: PE {pe} is in its kernel function, not in a helper"))
            return
        found = move(stops, replay.position, direction)
        if found is None:
            which = "later" if direction > 0 else "earlier"
            self._refuse(self.in_run(f"{name}: PE {pe} has no {which} place to stop"))
            return
        self.move_to(found + 1, f"{name}: {stop_text(replay, found, stops.function(found))}")


def stop_text(replay: Replay, event: int, function: str) -> str:
    """What a source-level step landed on, and in which function: ``PE 0 tl.wait on future
    1 at k.py:12 in looped: stalls 503 cycles (event #15)``."""
    c = replay.index.columns
    kind = int(c.kind[event])
    pe = int(c.pe[event])
    if kind == Kind.KERNEL_START:
        loc = replay.index.loc(int(c.loc[event]))
        return f"PE {pe} enters {function} at {queries.short_loc(loc)} (event #{event})"
    if kind == Kind.KERNEL_END:
        return f"PE {pe} returns from {function} (event #{event})"
    if kind == Kind.KERNEL_ERROR:
        return f"{queries.event_text(replay, event)} (event #{event})"
    text = queries.tl_call_text(replay, event)
    # The function after the call's place: one name, never markup (the status is plain).
    return _PLACE.sub(lambda m: f"{m.group(0)} in {function[:80]}", text, count=1)
