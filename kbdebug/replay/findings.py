"""Findings: where a pipeline serialised unexpectedly, each with its source line and a suggestion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from emulator.trace.schema import SourceLoc

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay


@dataclass(frozen=True)
class Finding:
    """One diagnosis, stable across runs of the same kernel source."""

    #: Stable id: rule, then where (e.g. "KB101:emulator/kernels/attention.py:62").
    id: str
    #: Rule code, e.g. "KB101".
    rule: str
    #: Short rule name, e.g. "blocking-load".
    title: str
    pe: int
    #: Cycle span the finding covers.
    start: int
    end: int
    #: Event indices involved, in order; the first is where the debugger jumps.
    events: tuple[int, ...]
    loc: SourceLoc | None
    #: One line saying what happened.
    message: str
    #: One line saying what to change.
    suggestion: str
    #: Cycles the finding is estimated to cost.
    cycles: int = 0


def find_all(replay: Replay) -> list[Finding]:
    """Every finding in the trace, ordered by first event."""
    return []
