"""The replay engine: a trace as columns, the state at any position, breakpoints.

Pure Python and numpy; never imports Textual, so users can script it.
"""

from kbdebug.replay.breakpoints import (
    Breakpoint,
    Cycle,
    EventKind,
    FindingHit,
    FuturePhase,
    HazardHit,
    SourceLine,
    StalledWait,
)
from kbdebug.replay.replay import CHECKPOINT_EVERY, Hit, Replay
from kbdebug.replay.state import PHASES, ChannelState, PEState, State

__all__ = [
    "CHECKPOINT_EVERY",
    "PHASES",
    "Breakpoint",
    "ChannelState",
    "Cycle",
    "EventKind",
    "FindingHit",
    "FuturePhase",
    "HazardHit",
    "Hit",
    "PEState",
    "Replay",
    "SourceLine",
    "StalledWait",
    "State",
]
