"""Ctrl+C and SIGTERM during a sweep: a request the backends act on between steps.

Raising KeyboardInterrupt wherever the signal lands could drop a row the parent
had just received, or orphan a worker it had just started; a flag checked at
the top of the scheduling loop cannot. The loop checks it at least every
quarter second.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class StopRequest:
    """Set by SIGINT or SIGTERM while :meth:`installed`; read by the backends."""

    def __init__(self) -> None:
        #: The signal's name once one arrived ("SIGINT", "SIGTERM"), else None.
        self.signal: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def interrupt(self) -> KeyboardInterrupt:
        """The exception a backend raises once it has stopped its workers."""
        return KeyboardInterrupt(self.signal or "")

    def _handler(self, signum: int, frame: object) -> None:
        if self.signal is None:
            self.signal = signal.Signals(signum).name

    @contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """Catch SIGINT and SIGTERM into this request (only in the main thread; a signal
        ignored by whoever started us stays ignored)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, self._handler)
        try:
            yield self
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
