"""The status line of `kbdebug run` on stderr: building inputs, the emulation's bar, the check."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Protocol


class _Counted(Protocol):
    events: int


#: A run shorter than this shows no line at all (no flicker for a quick run).
FIRST_DRAW_SECONDS = 0.3
#: Redraw interval.
TICK_SECONDS = 0.2
SPINNER = "|/-\\"


class RunStatus:
    """A line on stderr from the first ``FIRST_DRAW_SECONDS`` of a command on, whatever it does.

    ``phase("building inputs")`` names the work under way; ``running(writer)``
    shows the emulation's events as they are written, and their rate (a run's
    total is not known before it ends: sizing a bar would take extra runs);
    ``clear()`` takes the line away so stdout can be printed, until the next
    phase. A worker thread draws; ``close()`` stops it.
    """

    def __init__(self, *, enabled: bool):
        self.enabled = enabled
        self._started = time.perf_counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._text: str | None = None
        self._since = self._started
        self._writer: _Counted | None = None
        self._shown = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        if enabled:
            self._thread.start()

    def phase(self, text: str) -> None:
        """Say what the command does now (``building inputs``, ``checking output ...``)."""
        with self._lock:
            self._text, self._writer, self._since = text, None, time.perf_counter()

    def running(self, writer: _Counted) -> None:
        """Show the emulation's progress: ``writer.events`` so far."""
        with self._lock:
            self._text, self._writer = "running", writer
            self._since = time.perf_counter()

    def clear(self) -> None:
        """Take the line away (before printing to stdout) until the next phase."""
        with self._lock:
            self._text = None
            self._erase()

    def close(self) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()
        with self._lock:
            self._erase()

    def _erase(self) -> None:
        if self._shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self._shown = False

    def _loop(self) -> None:
        delay = max(FIRST_DRAW_SECONDS - (time.perf_counter() - self._started), 0)
        if self._stop.wait(delay):
            return
        tick = 0
        while True:
            with self._lock:
                if self._text is not None:
                    self._draw(self._line(tick))
            tick += 1
            if self._stop.wait(TICK_SECONDS):
                return

    def _line(self, tick: int) -> str:
        elapsed = time.perf_counter() - self._since
        if self._writer is None:
            return f"{self._text}… {elapsed:.1f} s"
        events = self._writer.events
        rate = events / elapsed if elapsed > 0 else 0
        spin = SPINNER[tick % len(SPINNER)]
        return f"{spin} running: {events:,} events, {elapsed:.1f} s, {rate:,.0f} events/s"

    def _draw(self, line: str) -> None:
        try:
            width = max(os.get_terminal_size(sys.stderr.fileno()).columns - 1, 20)
        except OSError:
            width = 79
        sys.stderr.write("\r" + line[:width] + "\033[K")
        sys.stderr.flush()
        self._shown = True
