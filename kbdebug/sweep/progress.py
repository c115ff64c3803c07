"""The sweep's progress bar on stderr: points done, points left, failures and an ETA."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

#: Seconds between redraws (a row arriving redraws at once).
REDRAW = 0.2


def eta_text(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``12s``; ``--`` before anything is known."""
    if seconds is None:
        return "--"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class Progress:
    """Redraws one line on ``stream``; does nothing unless ``enabled`` (a TTY)."""

    def __init__(
        self,
        total: int,
        *,
        enabled: bool,
        stream: TextIO | None = None,
        label: str = "sweep",
        unit: str = "points",
        failures: str = "failed",
    ):
        self.total = total
        #: What the bar counts: ``sweep [###] 3/8 points``, ``explore [###] 3/64 runs``,
        #: and what it calls the rows that were not ok (``2 failed``, ``2 differ``).
        self.label, self.unit, self.failures = label, unit, failures
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.done = 0
        self.failed = 0
        self.started = time.monotonic()
        self._drawn = 0.0
        self._shown = False

    def row(self, ok: bool) -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        self.draw(force=True)

    def tick(self) -> None:
        self.draw()

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        left = self.total - self.done
        eta = elapsed / self.done * left if self.done else None
        share = self.done / self.total if self.total else 1.0
        bar = "#" * int(share * 24)
        failed = f", {self.failed} {self.failures}" if self.failed else ""
        return (
            f"{self.label} [{bar:<24}] {self.done}/{self.total} {self.unit}, {left} left{failed}, "
            f"{eta_text(elapsed)} elapsed, ETA {eta_text(eta)}"
        )

    def draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._drawn < REDRAW):
            return
        self._drawn = now
        try:
            width = max(os.get_terminal_size(self.stream.fileno()).columns - 1, 20)
        except (OSError, ValueError):
            width = 79
        self.stream.write("\r" + self.line()[:width] + "\033[K")
        self.stream.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False
