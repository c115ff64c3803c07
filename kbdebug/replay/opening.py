"""Opening: Replay.open started on a thread of its own, to be collected later.

The app starts reading a large trace before it imports Textual and draws its first
screen: the reading is mostly numpy and the kernel mapping pages in, which let go of
the GIL, so on a second core it overlaps the ~0.3 s of imports and start-up instead of
following them.
"""

from __future__ import annotations

import os
import threading

from kbdebug.replay.replay import Replay


class Opening:
    """``Replay.open(path)`` running on a daemon thread from construction.

    ``fraction`` is how far it got (0..1); ``stamp`` the file's (mtime in ns, size) as
    the reading began; ``wait(timeout)`` whether it finished;
    ``result()`` its Replay, or raises what it raised; ``cancel()`` makes it stop at
    its next progress report, ``result()`` then raising InterruptedError.
    """

    def __init__(self, path: str | os.PathLike[str], *, cache: bool = True) -> None:
        self.path = os.fspath(path)
        #: The file's (modification time in ns, size) before it was read, None if unreadable.
        self.stamp: tuple[int, int] | None = None
        try:
            st = os.stat(self.path)
            self.stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            pass  # Replay.open says why
        self.fraction = 0.0
        self._cache = cache
        self._cancelled = False
        self._done = threading.Event()
        self._replay: Replay | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kbdebug-open", daemon=True)
        self._thread.start()

    def _progress(self, fraction: float) -> None:
        if self._cancelled:
            raise InterruptedError("opening cancelled")
        self.fraction = fraction

    def _run(self) -> None:
        try:
            self._replay = Replay.open(self.path, progress=self._progress, cache=self._cache)
        except BaseException as e:  # noqa: BLE001 - handed to whoever collects the result
            self._error = e
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the open has finished (well or not), waiting up to ``timeout`` s."""
        return self._done.wait(timeout)

    def cancel(self) -> None:
        """Ask the open to stop at its next progress report (a block or so)."""
        self._cancelled = True

    def result(self) -> Replay:
        """The opened Replay (waiting for it), or the exception the open raised."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._replay is not None
        return self._replay
