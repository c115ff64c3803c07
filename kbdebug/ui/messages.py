"""Messages the panes and the app's workers post to the app, as small dataclasses."""

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
class PeChosen(Message):
    """Enter on a PE of the mesh: focus it in the other panes."""

    pe: int


@dataclass
class FindingChosen(Message):
    """Enter on a finding: jump to its first event."""

    finding: Finding


@dataclass
class FindingHighlighted(Message):
    """The cursor moved to a finding on a pane too short to show its details."""

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
class TracesLoaded(Message):
    """The traces are open, in the order the app was given them."""

    replays: list[Replay]
    #: Each file's (mtime, size) when it was read.
    stamps: list[tuple[int, int] | None]


@dataclass
class TraceLoadFailed(Message):
    """The trace could not be opened: ``error`` is one line."""

    error: str


@dataclass
class AnalysisComputed(Message):
    """The findings worker is done: what the mode's analysis returned, or ``error``."""

    result: object | None
    error: str | None
    #: The replays it was computed for (a reload may have replaced them since).
    replays: tuple[Replay, ...]


@dataclass
class TraceReloaded(Message):
    """The trace file was read again (``r``, or after a re-run)."""

    replay: Replay
    #: The file's (mtime, size) when it was read.
    stamp: tuple[int, int] | None
    #: What brought it: "reloaded" or "re-ran".
    how: str = "reloaded"


@dataclass
class ReloadFailed(Message):
    """Reading the trace again, or re-running it, failed: ``error`` is one line; the old
    trace stays on screen."""

    error: str


@dataclass
class RerunProgressed(Message):
    """The re-run is still going: the last line it printed, and the seconds so far."""

    line: str
    seconds: float

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RerunProgressed)
