"""Breakpoints: predicates over the trace columns, each giving the sorted event indices it hits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.replay.state import PHASES

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay

_EMPTY = np.empty(0, dtype=np.int64)


@dataclass(eq=False)
class Breakpoint:
    """Base class: ``hits(replay)`` is every event index where execution should stop."""

    enabled: bool = field(default=True, kw_only=True)

    def hits(self, replay: Replay) -> np.ndarray:
        cache = replay.__dict__.setdefault("_breakpoint_hits", {})
        key = (id(self), self._key())
        found = cache.get(key)
        if found is None:
            found = cache[key] = np.asarray(self._find(replay), dtype=np.int64)
        return found

    def _key(self) -> tuple:
        return tuple(sorted(vars(self).items()))

    def _find(self, replay: Replay) -> np.ndarray:
        raise NotImplementedError

    def describe(self, replay: Replay) -> str:
        raise NotImplementedError


def _line_mask(replay: Replay, loc_ids: np.ndarray, file: str | None, line: int | None):
    """Which loc ids are at ``file``:``line`` (file matched by suffix; any if None)."""
    locs = replay.index.locs
    wanted = np.array(
        [
            (line is None or loc.line == line)
            and (file is None or loc.file == file or loc.file.endswith("/" + file))
            for loc in locs
        ]
        + [False],
        dtype=bool,
    )
    # loc id -1 maps to the trailing False.
    return wanted[np.where(loc_ids >= 0, loc_ids, len(locs))]


@dataclass(eq=False)
class StalledWait(Breakpoint):
    """A tl.wait that stalls the kernel for at least ``min_stall`` cycles.

    Stops at the wait's start, with the future not yet arrived.
    """

    min_stall: int = 1
    pe: int | None = None
    file: str | None = None
    line: int | None = None

    def _find(self, replay: Replay) -> np.ndarray:
        index = replay.index
        c, f = index.columns, index.futures
        begins = np.flatnonzero(c.kind == Kind.WAIT_BEGIN)
        fut = c.fut[begins]
        ok = (fut >= 0) & (fut < len(f.stall))
        stall = np.zeros(len(begins), dtype=np.int64)
        stall[ok] = f.stall[fut[ok]]
        keep = ok & (stall >= max(self.min_stall, 1))
        if self.pe is not None:
            keep &= c.pe[begins] == self.pe
        if self.file is not None or self.line is not None:
            keep &= _line_mask(replay, c.loc[begins], self.file, self.line)
        return begins[keep]

    def describe(self, replay: Replay) -> str:
        parts = [f"stalled wait >= {self.min_stall} cycles"]
        if self.pe is not None:
            parts.append(f"on PE {self.pe}")
        if self.line is not None:
            parts.append(f"at {self.file or '*'}:{self.line}")
        return " ".join(parts)


@dataclass(eq=False)
class SourceLine(Breakpoint):
    """Any tl call (a command issued, a wait begun) at ``file``:``line``."""

    file: str | None = None
    line: int = 0
    pe: int | None = None

    def _find(self, replay: Replay) -> np.ndarray:
        c = replay.index.columns
        calls = np.flatnonzero((c.kind == Kind.ISSUE) | (c.kind == Kind.WAIT_BEGIN))
        keep = _line_mask(replay, c.loc[calls], self.file, self.line)
        if self.pe is not None:
            keep &= c.pe[calls] == self.pe
        return calls[keep]

    def describe(self, replay: Replay) -> str:
        return f"line {self.file or '*'}:{self.line}"


@dataclass(eq=False)
class FuturePhase(Breakpoint):
    """Future ``future`` entering ``phase`` (issued, queued, transferring, ready, waited,
    resolved)."""

    future: int = 0
    phase: str = "resolved"

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"unknown phase {self.phase!r} (one of {', '.join(PHASES)})")

    def _find(self, replay: Replay) -> np.ndarray:
        f, k = replay.index.futures, replay.index.commands
        if not 0 <= self.future < len(f.cmd):
            return _EMPTY
        cmd = int(f.cmd[self.future])
        event = {
            "issued": k.issue[cmd],
            "queued": k.request[cmd],
            "transferring": k.grant[cmd],
            "ready": k.complete[cmd],
            "waited": f.wait_begin[self.future],
            "resolved": f.wait_end[self.future],
        }[self.phase]
        return np.array([event] if event >= 0 else [], dtype=np.int64)

    def describe(self, replay: Replay) -> str:
        return f"future {self.future} {self.phase}"


@dataclass(eq=False)
class EventKind(Breakpoint):
    """Every event of ``kind`` (optionally on one PE)."""

    kind: Kind = Kind.ISSUE
    pe: int | None = None

    def _find(self, replay: Replay) -> np.ndarray:
        c = replay.index.columns
        keep = c.kind == int(self.kind)
        if self.pe is not None:
            keep &= c.pe == self.pe
        return np.flatnonzero(keep)

    def describe(self, replay: Replay) -> str:
        return f"event {Kind(self.kind).name.lower()}"


@dataclass(eq=False)
class Cycle(Breakpoint):
    """The first event at or after ``cycle``."""

    cycle: int = 0

    def _find(self, replay: Replay) -> np.ndarray:
        times = replay.index.columns.time
        i = int(np.searchsorted(times, self.cycle, side="left"))
        return np.array([i] if i < len(times) else [], dtype=np.int64)

    def describe(self, replay: Replay) -> str:
        return f"cycle {self.cycle}"


@dataclass(eq=False)
class FindingHit(Breakpoint):
    """The events of findings (all, or those whose id or rule starts with ``prefix``)."""

    prefix: str = ""

    def _find(self, replay: Replay) -> np.ndarray:
        events: list[int] = []
        for finding in replay.findings:
            if finding.id.startswith(self.prefix) or finding.rule.startswith(self.prefix):
                events.extend(finding.events)
        return np.unique(np.array(events, dtype=np.int64))

    def describe(self, replay: Replay) -> str:
        return f"finding {self.prefix or '*'}"
