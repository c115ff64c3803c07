"""Breakpoints: predicates over the trace columns, each giving the sorted event indices it hits.

A breakpoint's ``find(replay)`` searches the whole trace at once with numpy
and returns every event index where execution should stop; ``Replay`` caches
the result per breakpoint (until one of its settings changes) and bisects it
to find the next or previous hit, so ``continue_`` never steps event by event.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.replay.state import PHASES

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay

_EMPTY = np.empty(0, dtype=np.int64)


@dataclass(eq=False)
class Breakpoint:
    """Base class: ``find(replay)`` gives every event index where execution should stop."""

    enabled: bool = field(default=True, kw_only=True)

    def hits(self, replay: Replay) -> np.ndarray:
        """The sorted event indices this breakpoint stops at (cached by ``replay``)."""
        return replay.hits(self)

    def key(self) -> tuple:
        """The settings the hits depend on (everything but ``enabled``)."""
        return tuple(getattr(self, f.name) for f in fields(self) if f.name != "enabled")

    def find(self, replay: Replay) -> np.ndarray:
        """Search the trace: every event index where this breakpoint stops, sorted."""
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
    """A tl.wait that stalls the kernel for at least ``min_stall`` cycles (optionally on
    one PE, or at ``file``:``line``).

    A wait that never ends (a deadlock, a truncated trace) while its data has not
    arrived stalls forever and matches any ``min_stall``. Stops at the wait's
    start, with the future not yet arrived.
    """

    min_stall: int = 1
    pe: int | None = None
    file: str | None = None
    line: int | None = None

    def find(self, replay: Replay) -> np.ndarray:
        index = replay.index
        c, f = index.columns, index.futures
        begins = np.flatnonzero(c.kind == Kind.WAIT_BEGIN)
        fut = c.fut[begins]
        ok = (fut >= 0) & (fut < len(f.stall))
        fut = np.where(ok, fut, 0)
        if len(f.stall):
            ended = f.wait_end[fut] >= 0
            long_enough = f.stall[fut] >= max(self.min_stall, 1)
            keep = ok & np.where(ended, long_enough, f.blocks[fut])
        else:
            keep = np.zeros(len(begins), dtype=bool)
        if self.pe is not None:
            keep &= c.pe[begins] == self.pe
        if self.file is not None or self.line is not None:
            keep &= _line_mask(replay, c.loc[begins], self.file, self.line)
        return begins[keep]

    def describe(self, replay: Replay) -> str:
        parts = [f"stalled wait >= {self.min_stall} cycles"]
        if self.pe is not None:
            parts.append(f"on PE {self.pe}")
        if self.line is not None or self.file is not None:
            parts.append(f"at {self.file or '*'}:{self.line if self.line is not None else '*'}")
        return " ".join(parts)


#: The events at which a kernel reaches a source line: its start, a tl call, an error.
_LINE_KINDS = np.array(
    [Kind.KERNEL_START, Kind.ISSUE, Kind.WAIT_BEGIN, Kind.KERNEL_ERROR], dtype=np.int8
)


@dataclass(eq=False)
class SourceLine(Breakpoint):
    """The kernel reaching ``file``:``line`` (any file if None): a tl call there (a command
    issued, a wait begun), the kernel's start at its ``def`` line, or an error raised there."""

    file: str | None = None
    line: int = 0
    pe: int | None = None

    def find(self, replay: Replay) -> np.ndarray:
        c = replay.index.columns
        calls = np.flatnonzero(np.isin(c.kind, _LINE_KINDS) & (c.loc >= 0))
        keep = _line_mask(replay, c.loc[calls], self.file, self.line)
        if self.pe is not None:
            keep &= c.pe[calls] == self.pe
        return calls[keep]

    def describe(self, replay: Replay) -> str:
        where = f"line {self.file or '*'}:{self.line}"
        return where if self.pe is None else f"{where} on PE {self.pe}"


#: Phase names of earlier versions, still understood in a breakpoint.
_OLD_PHASE_NAMES = {"waited": "waiting"}


@dataclass(eq=False)
class FuturePhase(Breakpoint):
    """Future ``future`` entering ``phase``: the event that marks it (issued: its ISSUE,
    queued: CHAN_REQUEST, transferring: CHAN_GRANT, ready: COMPLETE, waiting:
    WAIT_BEGIN, resolved: WAIT_END), if the trace has it. ``waited``, the phase's
    name before it said what it means, is taken for ``waiting``."""

    future: int = 0
    phase: str = "resolved"

    def __post_init__(self) -> None:
        self.phase = _OLD_PHASE_NAMES.get(self.phase, self.phase)
        if self.phase not in PHASES:
            raise ValueError(f"unknown phase {self.phase!r} (one of {', '.join(PHASES)})")

    def find(self, replay: Replay) -> np.ndarray:
        f = replay.index.futures
        if not 0 <= self.future < len(f.cmd):
            return _EMPTY
        table = {
            "issued": f.issue,
            "queued": f.request,
            "transferring": f.grant,
            "ready": f.complete,
            "waiting": f.wait_begin,
            "resolved": f.wait_end,
        }[self.phase]
        event = int(table[self.future])
        return np.array([event] if event >= 0 else [], dtype=np.int64)

    def describe(self, replay: Replay) -> str:
        return f"future {self.future} {self.phase}"


@dataclass(eq=False)
class EventKind(Breakpoint):
    """Every event of ``kind`` (a Kind, its code or its name, e.g. "wait_begin"), optionally
    on one PE."""

    kind: Kind = Kind.ISSUE
    pe: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.kind, str):
            try:
                self.kind = Kind[self.kind.upper()]
            except KeyError:
                names = ", ".join(k.name.lower() for k in Kind)
                raise ValueError(f"unknown event kind {self.kind!r} (one of {names})") from None
        else:
            self.kind = Kind(self.kind)

    def find(self, replay: Replay) -> np.ndarray:
        c = replay.index.columns
        keep = c.kind == int(self.kind)
        if self.pe is not None:
            keep &= c.pe == self.pe
        return np.flatnonzero(keep)

    def describe(self, replay: Replay) -> str:
        text = f"event {Kind(self.kind).name.lower()}"
        return text if self.pe is None else f"{text} on PE {self.pe}"


@dataclass(eq=False)
class Cycle(Breakpoint):
    """The first event at or after ``cycle``."""

    cycle: int = 0

    def find(self, replay: Replay) -> np.ndarray:
        times = replay.index.columns.time
        i = int(np.searchsorted(times, self.cycle, side="left"))
        return np.array([i] if i < len(times) else [], dtype=np.int64)

    def describe(self, replay: Replay) -> str:
        return f"cycle {self.cycle}"


@dataclass(eq=False)
class FindingHit(Breakpoint):
    """The events of findings (all, or those whose id or rule starts with ``prefix``).

    ``findings`` are what the analysis found (a tuple of objects with ``id``, ``rule``
    and ``events``), handed in by whoever computed them; None while they are being
    computed, when the breakpoint hits nothing. They are part of its key, so setting
    them makes the replay search again: set before the findings arrive, it hits once
    they are handed in.
    """

    prefix: str = ""
    findings: tuple | None = None

    def find(self, replay: Replay) -> np.ndarray:
        events: list[int] = []
        for finding in self.findings or ():
            if finding.id.startswith(self.prefix) or finding.rule.startswith(self.prefix):
                events.extend(finding.events)
        return np.unique(np.array(events, dtype=np.int64))

    def describe(self, replay: Replay) -> str:
        what = f"finding {self.prefix or '*'}"
        return what if self.findings is not None else f"{what} (findings not computed yet)"


@dataclass(eq=False)
class HazardHit(Breakpoint):
    """The second access of every hazard (of one rule, e.g. "KB201", or all): the load's
    grant or the store's landing that came second in this run, where the two accesses
    met.

    ``hazards`` are what the analysis found (objects with ``rule`` and ``occurrences``:
    each occurrence's event), handed in as for :class:`FindingHit`; None while they are
    being computed, when it hits nothing.
    """

    rule: str = ""
    hazards: tuple | None = None

    def find(self, replay: Replay) -> np.ndarray:
        events: list[int] = []
        for hazard in self.hazards or ():
            if hazard.rule.startswith(self.rule):
                events.extend(hazard.occurrences)
        return np.unique(np.array(events, dtype=np.int64))

    def describe(self, replay: Replay) -> str:
        what = f"hazard {self.rule or '*'}"
        return what if self.hazards is not None else f"{what} (hazards not computed yet)"
