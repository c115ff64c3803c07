"""Messages the debugger's widgets post to the app, as small dataclasses."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from kbdebug.analysis.findings import Finding
from kbdebug.replay import Replay


@dataclass
class SeekRequested(Message):
    """A widget asks to make event ``event`` the current one (position ``event + 1``)."""

    event: int


@dataclass
class CycleClicked(Message):
    """The timeline was clicked at ``cycle``."""

    cycle: int


@dataclass
class FutureChosen(Message):
    """A future was chosen in the futures table."""

    future: int


@dataclass
class FindingChosen(Message):
    """Enter on a finding: jump to its first event."""

    finding: Finding


@dataclass
class LineChosen(Message):
    """Enter on a source line: toggle a breakpoint there."""

    file: str
    line: int


@dataclass
class LoadProgressed(Message):
    """The trace is ``fraction`` read and indexed."""

    fraction: float
    stage: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LoadProgressed)


@dataclass
class TraceLoaded(Message):
    """The trace is open."""

    replay: Replay


@dataclass
class TraceLoadFailed(Message):
    """The trace could not be opened: ``error`` is one line."""

    error: str


@dataclass
class FindingsComputed(Message):
    """The findings are ready (or ``error`` says why not)."""

    findings: list[Finding]
    error: str | None = None
