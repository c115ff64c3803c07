"""The wait chain keys of both modes: u follows a stalled receive to its cause across PEs,
d comes back along it."""

from __future__ import annotations

from emulator.trace.schema import Kind
from kbdebug.analysis import Analysis
from kbdebug.replay import Replay
from kbdebug.replay.index import TraceIndex
from kbdebug.ui.app.chain_walk import Stop, chain_stops, root_text


class ChainActions:
    """DebuggerApp's u and d on the focused run (a mixin: the state is the app's).

    ``u`` at a stalled receive wait goes to the send it waited for (focusing the
    sender's PE), again to what that PE was stalled on, and so on to the root cause;
    ``d`` goes back one stop. The status line names each stop: PE, line, cycle and why
    it was late.
    """

    #: The chain being walked: the index it is of, its stops, the stop the cursor is at.
    _walk: tuple[TraceIndex, list[Stop], int] | None = None

    def _chain_analysis(self) -> Analysis:
        """An Analysis of the focused run for its wait chains, over a private Replay
        (nothing moves it), kept per trace."""
        index = self.replay.index
        cache = self.__dict__.setdefault("_chain_analyses", {})
        entry = cache.get(id(index))
        if entry is None or entry[0] is not index:
            entry = cache[id(index)] = (index, Analysis(Replay(index, self.replay.path)))
        return entry[1]

    def _walk_here(self) -> tuple[TraceIndex, list[Stop], int] | None:
        """The walk under way, if the cursor is still on one of its stops."""
        walk = self._walk
        if walk is None:
            return None
        index, stops, k = walk
        if index is not self.replay.index or self.replay.position != stops[k].event + 1:
            return None
        return walk

    def action_chain(self, direction: int) -> None:
        walk = self._walk_here()
        if direction < 0:
            if walk is None:
                self._refuse(self.in_run("no wait chain to go back along: u at a stalled wait"))
            elif walk[2] == 0:
                self._refuse(self.in_run(f"at the start of the chain: {walk[1][0].text}"))
            else:
                self._to_stop(walk[0], walk[1], walk[2] - 1)
            return
        if walk is None:
            walk = self._start_walk()
            if walk is None:
                return
        index, stops, k = walk
        if k + 1 >= len(stops):
            self._refuse(self.in_run(f"the chain ends here: {stops[k].text}"))
            return
        self._to_stop(index, stops, k + 1)

    def _start_walk(self) -> tuple[TraceIndex, list[Stop], int] | None:
        """The chain of the wait at the cursor, or None (and why not said)."""
        replay = self.replay
        index = replay.index
        event = replay.position - 1
        if event < 0 or int(index.columns.kind[event]) != Kind.WAIT_BEGIN:
            self._refuse(
                self.in_run("u follows a stalled wait to its cause: stop at one first (w, c)")
            )
            return None
        chain = self._chain_analysis().wait_chain(event)
        if chain is None:
            self._refuse(self.in_run("this wait has no chain to follow"))
            return None
        if not chain.links:
            self._refuse(self.in_run(f"no other PE to follow: {root_text(chain.root)}"))
            return None
        time = index.columns.time
        return index, chain_stops(chain, lambda i: int(time[i])), 0

    def _to_stop(self, index: TraceIndex, stops: list[Stop], k: int) -> None:
        self._walk = (index, stops, k)
        stop = stops[k]
        more = "u: on, d: back" if k + 1 < len(stops) else "d: back"
        self.move_to(stop.event + 1, f"{stop.text} ({more})", focus_event=True)
