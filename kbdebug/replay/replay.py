"""Replay: open a trace, move through it both ways, stop at breakpoints."""

from __future__ import annotations

import os
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from emulator.trace.reader import open_trace_file, read_trace_tables
from emulator.trace.schema import FIELDS, Kind, SourceLoc
from kbdebug.replay import cache as index_cache
from kbdebug.replay.index import COLUMN_OF_FIELD, NONE, IndexBuilder, TraceIndex
from kbdebug.replay.state import PHASES, State, apply_events, future_phases, state_at
from kbdebug.replay.values import Values

if TYPE_CHECKING:
    from kbdebug.replay.breakpoints import Breakpoint

#: Events between two checkpoints: the most any seek has to apply one by one.
CHECKPOINT_EVERY = 256
#: Checkpoints kept (the least recently used go first); each is recomputed on demand.
CHECKPOINTS_KEPT = 4096


@dataclass(frozen=True)
class Hit:
    """Where ``continue_`` stopped: the event index and the breakpoint that matched."""

    index: int
    breakpoint: Breakpoint

    def describe(self, replay: Replay) -> str:
        return f"{self.breakpoint.describe(replay)}: {replay.describe(self.index)}"


class Replay:
    """A trace opened for debugging: a position, the state there, and ways to move.

    The position counts the events applied: 0 is before the first event,
    ``n_events`` after the last; the current event is ``position - 1``. Any
    position is reached by restoring the checkpoint at or below it (a state
    every ``CHECKPOINT_EVERY`` events, computed from the index the first time it
    is needed) and applying at most ``CHECKPOINT_EVERY - 1`` events, so stepping
    backward costs what stepping forward does. Each move makes a new State:
    one returned earlier keeps describing its own position.
    """

    def __init__(self, index: TraceIndex, path: str | None = None):
        self.index = index
        self.path = path
        self._checkpoints: OrderedDict[int, State] = OrderedDict()
        self._state = self._checkpoint(0).copy()
        # Per breakpoint: the key it was searched with and its hits.
        self._hits: weakref.WeakKeyDictionary[Breakpoint, tuple[tuple, np.ndarray]] = (
            weakref.WeakKeyDictionary()
        )
        #: Breakpoints ``continue_`` stops at (those enabled).
        self.breakpoints: list[Breakpoint] = []

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        progress: Callable[[float], None] | None = None,
        *,
        cache: bool = True,
    ) -> Replay:
        """Read, validate and index the trace at ``path``, or read its index from the cache.

        Events go from the reader to the index a block at a time, as arrays, so the
        whole trace is never held as Python objects; each block is added to the index as it
        comes, on the reading thread (another thread for it cost more in GIL hand-overs
        than it overlapped: see benchmarks/replay_speed.py). The index is then kept in the
        cache directory (see kbdebug.replay.cache), keyed by the file's identity,
        size, times and a hash of all its bytes (written by a background thread:
        ``kbdebug.replay.cache.wait()`` waits for it), and read from there, checked, the
        next time the same file is opened; ``cache=False`` (or ``KBDEBUG_NO_CACHE=1``, or an empty
        ``KBDEBUG_CACHE_DIR``) reads the trace every time and writes nothing.

        ``progress(fraction)`` is called as the file is read and indexed (0..0.95)
        and once the tables are built (1.0); an exception it raises cancels the
        open. Raises TraceFormatError (a ValueError) for a bad file, OSError when it
        cannot be read.
        """
        directory = index_cache.cache_dir() if cache else None
        key = None
        if directory is not None:
            # The key is taken from the file opened (and refused) as the reader opens it.
            fd, _ = open_trace_file(path)
            try:
                index, key = index_cache.lookup(directory, fd, os.fspath(path))
            finally:
                os.close(fd)
            if index is not None:
                if progress is not None:
                    progress(1.0)
                return cls(index, os.fspath(path))
        on_read = None
        if progress is not None:

            def on_read(done: int, total: int) -> None:
                progress(0.95 * done / max(total, 1))

        builder = IndexBuilder(IndexBuilder.capacity_for(os.path.getsize(path)))
        trace = read_trace_tables(path, builder.add_tables, progress=on_read)
        index = builder.build(trace)
        if directory is not None and key is not None:
            # Kept only if the file is still the one whose key was taken before reading
            # it (the writer checks): a trace written to, or replaced, meanwhile is not.
            try:
                fd, _ = open_trace_file(path)
            except (OSError, ValueError):
                fd = None  # gone meanwhile: nothing to cache
            if fd is not None:
                try:
                    index_cache.keep(index, trace, directory, key, fd)
                finally:
                    os.close(fd)
        if progress is not None:
            progress(1.0)
        return cls(index, os.fspath(path))

    # --- where we are -------------------------------------------------------------------

    @property
    def n_events(self) -> int:
        return self.index.n_events

    @property
    def n_futures(self) -> int:
        """Futures in the trace; their ids are 0..n_futures-1."""
        return len(self.index.futures.cmd)

    @property
    def position(self) -> int:
        return self._state.position

    @property
    def state(self) -> State:
        """The state at the current position (do not modify it)."""
        return self._state

    @property
    def time(self) -> int:
        return self._state.time

    @property
    def end_time(self) -> int:
        return self.index.end_time

    @property
    def status(self) -> str:
        """How the run ended: ok, error, deadlock, or truncated (no footer)."""
        if self.index.footer is None:
            return "truncated"
        return str(self.index.footer.get("status", "ok"))

    # --- moving -------------------------------------------------------------------------

    def seek(self, position: int) -> State:
        """Go to ``position`` (clamped to 0..n_events) and return the state there."""
        position = max(0, min(int(position), self.n_events))
        here = self._state.position
        if position == here:
            return self._state
        if 0 < position - here < CHECKPOINT_EVERY:
            state = self._state.copy()
        else:
            state = self._checkpoint(position - position % CHECKPOINT_EVERY).copy()
        apply_events(self.index, state, position)
        self._state = state
        return state

    def seek_time(self, cycle: int) -> State:
        """Go to just after the last event at or before ``cycle``."""
        return self.seek(int(np.searchsorted(self.index.columns.time, cycle, side="right")))

    def step(self, n: int = 1) -> State:
        """Move ``n`` events forward (backward when negative), stopping at either end."""
        return self.seek(self.position + n)

    def _checkpoint(self, position: int) -> State:
        checkpoints = self._checkpoints
        state = checkpoints.get(position)
        if state is None:
            state = checkpoints[position] = state_at(self.index, position)
            if len(checkpoints) > CHECKPOINTS_KEPT:
                checkpoints.popitem(last=False)
        else:
            checkpoints.move_to_end(position)
        return state

    # --- breakpoints --------------------------------------------------------------------

    def hits(self, breakpoint: Breakpoint) -> np.ndarray:
        """The sorted event indices where ``breakpoint`` stops, searched once per setting."""
        key = breakpoint.key()
        cached = self._hits.get(breakpoint)
        if cached is None or cached[0] != key:
            cached = (key, np.asarray(breakpoint.find(self), dtype=np.int64))
            self._hits[breakpoint] = cached
        return cached[1]

    def continue_(
        self, reverse: bool = False, breakpoints: Iterable[Breakpoint] | None = None
    ) -> Hit | None:
        """Run to the next (or previous) breakpoint hit and stop just after its event.

        Returns the Hit, or None when no breakpoint matches before the end (start)
        of the trace, where the position is then left.
        """
        hit = self.next_hit(reverse, breakpoints)
        if hit is None:
            self.seek(0 if reverse else self.n_events)
            return None
        self.seek(hit.index + 1)
        return hit

    def next_hit(
        self, reverse: bool = False, breakpoints: Iterable[Breakpoint] | None = None
    ) -> Hit | None:
        """The hit ``continue_`` would stop at, without moving.

        Forward, the first hit on an event not applied yet (index >= position);
        backward, the last one before the current event (index < position - 1).
        Of hits on the same event, the first enabled breakpoint listed wins.
        """
        candidates = self.breakpoints if breakpoints is None else list(breakpoints)
        best: Hit | None = None
        for bp in candidates:
            if not bp.enabled:
                continue
            hits = self.hits(bp)
            if reverse:
                k = int(np.searchsorted(hits, self.position - 1, side="left"))
                if k and (best is None or hits[k - 1] > best.index):
                    best = Hit(int(hits[k - 1]), bp)
            else:
                k = int(np.searchsorted(hits, self.position, side="left"))
                if k < len(hits) and (best is None or hits[k] < best.index):
                    best = Hit(int(hits[k]), bp)
        return best

    # --- what is where ------------------------------------------------------------------

    def event(self, i: int) -> tuple[Any, ...]:
        """Event ``i`` as ``(Kind, time, pe, *fields)`` with strings and locations resolved."""
        c, index = self.index.columns, self.index
        kind = Kind(int(c.kind[i]))
        out: list[Any] = [kind, int(c.time[i]), int(c.pe[i])]
        if kind == Kind.ISSUE:
            cmd = int(c.cmd[i])
            k = index.commands
            return (
                *out,
                cmd,
                index.string(int(k.op[cmd])),
                int(k.future[cmd]),
                int(k.addr[cmd]),
                int(k.nbytes[cmd]),
                index.shapes[int(k.shape[cmd])],
                index.string(int(k.dtype[cmd])),
                bool(k.blocking[cmd]),
                index.loc(int(k.loc[cmd])),
            )
        for name, tag in FIELDS[kind]:
            value = int(getattr(c, COLUMN_OF_FIELD[name])[i])
            if tag == "str":
                out.append(index.string(value))
            elif tag == "loc":
                out.append(index.loc(value))
            else:
                out.append(value)
        return tuple(out)

    def describe(self, i: int) -> str:
        """One line for event ``i``: index, cycle, PE, kind and what it is about."""
        e = self.event(i)
        kind, time, pe = e[0], e[1], e[2]
        names = [name for name, _ in FIELDS[kind]]
        values = dict(zip(names, e[3:], strict=True))
        parts: list[str] = []
        if kind == Kind.ISSUE:
            parts.append(f"{values['op']} cmd {values['cmd']}")
            if values["future"] >= 0:
                parts.append(f"future {values['future']}")
            if values["addr"] >= 0:
                # The slice of a named tensor it moves (format 1.5), else its address.
                found = Values.of(self).tensors.slice_of(values["addr"], values["nbytes"])
                parts.append(str(found) if found is not None else f"addr {values['addr']:#x}")
            shape = "x".join(str(d) for d in values["shape"])
            parts.append(f"{shape} {values['dtype']} ({values['nbytes']} B)")
        elif kind == Kind.HOST_READ:
            # The kernel read tensor values on the host: what it issues next may depend on them.
            future = values["future"]
            parts.append(f"of future {future}" if future >= 0 else "of a computed tensor")
        else:
            for name, value in values.items():
                if name == "channel":
                    parts.append(self.channel_name(value))
                elif isinstance(value, SourceLoc) or value is None:
                    continue
                else:
                    parts.append(f"{name} {value}")
        loc = values.get("loc")
        where = f" at {loc}" if isinstance(loc, SourceLoc) else ""
        name = "host read" if kind == Kind.HOST_READ else kind.name.lower()
        return f"#{i} t={time} PE{pe} {name} {' '.join(parts)}{where}"

    def channel_name(self, channel: int) -> str:
        channels = self.index.channels
        return str(channels[channel]["name"]) if 0 <= channel < len(channels) else f"ch{channel}"

    def future_phase(self, future: int) -> str:
        """The phase name of ``future`` at the current position ("not issued" before)."""
        code = int(future_phases(self.index, self.position, np.array([future]))[0])
        return PHASES[code] if code >= 0 else "not issued"

    def future_phases(self) -> np.ndarray:
        """The phase code (an index into PHASES, -1 if not issued) of every future here."""
        return future_phases(self.index, self.position)

    def future_events(self, future: int) -> list[int]:
        """The event indices of ``future``'s lifecycle, in order ([] for an unknown id)."""
        f = self.index.futures
        if not 0 <= future < len(f.cmd):
            return []
        tables = (f.issue, f.request, f.grant, f.release, f.complete, f.wait_begin, f.wait_end)
        return sorted(int(t[future]) for t in tables if t[future] != NONE)
