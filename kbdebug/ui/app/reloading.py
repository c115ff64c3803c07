"""Reload and re-run, without Textual: whether the trace file changed, the re-run's argv,
the line to show of its output, where to put the cursor in the new trace, and where the
re-run keeps the trace it records over (what ``D`` compares with)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from kbdebug.replay import Replay

#: Characters of the re-run's output kept to find its last line.
TAIL_BYTES = 4096


def file_stamp(path: str | None) -> tuple[int, int] | None:
    """The file's (modification time in ns, size), or None if it cannot be read."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def rerun_argv(rerun: Sequence[str]) -> list[str]:
    """The command that records the trace again: ``python -m kbdebug run ...``, without
    ``--open`` (the app is already open)."""
    return [sys.executable, "-m", "kbdebug", *(a for a in rerun if a != "--open")]


def command_text(rerun: Sequence[str], limit: int = 80) -> str:
    """``kbdebug run decode_prefetch --set n_tiles=16``, cut to ``limit`` characters."""
    text = " ".join(["kbdebug", *(a for a in rerun if a != "--open")])
    return text if len(text) <= limit else text[: limit - 1] + "…"


def previous_path(path: str, mine: str | None = None) -> str:
    """Where a re-run keeps the trace at ``path`` it records over: ``x.prev.kbt`` beside
    ``x.kbt``, unless a file the app did not write (``mine``) is there already, then the
    first free of ``x.prev2.kbt``, ``x.prev3.kbt``, ...: another file is never replaced."""
    stem, suffix = os.path.splitext(path)
    suffix = suffix or ".kbt"
    for k in range(1, 10_000):
        candidate = f"{stem}.prev{k if k > 1 else ''}{suffix}"
        if candidate == mine or not os.path.lexists(candidate):
            return candidate
    raise OSError(f"no free name for the previous trace beside {path}")


def stage_previous(path: str) -> str:
    """A second name for the trace at ``path`` (a hard link, else a copy) beside it, under
    a temporary name: the re-run replaces ``path`` by a rename, so this keeps the old run.
    OSError if it cannot be made."""
    staged = f"{path}.prev-{os.getpid()}"
    if os.path.lexists(staged):
        os.unlink(staged)  # our own name, left by an earlier failure of this process
    try:
        os.link(path, staged)
    except OSError:
        shutil.copyfile(path, staged)
    return staged


def compare_argv(previous: str, current: str) -> list[str]:
    """The command that opens the compare view of ``previous`` (A) and ``current`` (B)."""
    return [sys.executable, "-m", "kbdebug", "compare", previous, current]


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class OutputTail:
    """The end of a process's output as it arrives; ``last_line`` is what to show."""

    def __init__(self) -> None:
        self._text = ""

    def feed(self, data: bytes) -> None:
        text = self._text + data.decode("utf-8", "replace")
        self._text = text[-TAIL_BYTES:]

    @property
    def last_line(self) -> str:
        """The last non-blank line (a progress bar redrawn with \\r counts as lines),
        without terminal colour codes."""
        for line in reversed(re.split(r"[\r\n]", self._text)):
            line = _ANSI.sub("", line).strip()
            if line:
                return line
        return ""


@dataclass(frozen=True)
class Place:
    """Where the cursor was in the old trace, to find again in the new one."""

    position: int
    time: int

    @classmethod
    def of(cls, replay: Replay) -> Place:
        return cls(replay.position, int(replay.time))

    def position_in(self, replay: Replay) -> tuple[int, str]:
        """The position to show in ``replay``, and how it was found: the same event when
        the new trace has it at the same cycle (the same run, or an edit that moved
        nothing before it), else the last event at or before the same cycle."""
        if self.position == 0:
            return 0, "at the start"
        times = replay.index.columns.time
        if self.position <= replay.n_events and int(times[self.position - 1]) == self.time:
            return self.position, f"at the same event (#{self.position - 1}, cycle {self.time:,})"
        replay.seek_time(self.time)
        return replay.position, f"at the same cycle ({self.time:,})"
