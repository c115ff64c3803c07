"""The critical-path model of each PE: a lower bound on its kernel time under any issue placement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kbdebug.replay.summary import pe_efficiency

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay


@dataclass(frozen=True)
class PEBound:
    """One PE's achieved kernel time against its critical-path bound."""

    pe: int
    #: Cycles of the kernel's start and end on this PE (end of trace if it never ended).
    start: int
    end: int
    #: end - start.
    achieved: int
    #: No placement of this program's issues can make the kernel take less.
    bound: int
    #: bound / achieved (1.0 for a kernel that took no time).
    efficiency: float


def pe_bounds(replay: Replay) -> list[PEBound]:
    """The bound of every PE that ran a kernel."""
    return [
        PEBound(e.pe, e.start, e.end, e.achieved, e.bound, e.efficiency)
        for e in pe_efficiency(replay.index)
    ]
