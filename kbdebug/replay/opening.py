"""Opening: Replay.open started on a thread of its own, to be collected later.

The app starts reading a large trace before it imports Textual and draws its first
screen: the reading is mostly numpy and the kernel mapping pages in, which let go of
the GIL, so on a second core it overlaps the ~0.3 s of imports and start-up instead of
following them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from kbdebug.replay.replay import Replay


class Opening:
    """``Replay.open(path)`` running on a daemon thread from construction.

    ``fraction`` is how far it got (0..1); ``stamp`` the file's (mtime in ns, size) as
    the reading began; ``wait(timeout)`` whether it finished;
    ``result()`` its Replay, or raises what it raised; ``cancel()`` makes it stop at
    its next progress report, ``result()`` then raising InterruptedError.

    ``then(fn)`` has ``fn(replay)`` computed off the caller's thread once the open
    succeeds (the app's first timeline, say), ``followed()`` giving its result.
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
        # then(): the follow-up, whether the thread got past the point it would run it,
        # and its result once finished (None if it raised: the caller computes it then).
        self._lock = threading.Lock()
        self._then: Callable[[Replay], object] | None = None
        self._past_then = False
        self._followed = threading.Event()
        self._follow_result: object = None
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
        with self._lock:
            self._past_then = True
            then = self._then
        if then is not None:
            self._follow(then)

    def _follow(self, then: Callable[[Replay], object]) -> None:
        try:
            if self._replay is not None and not self._cancelled:
                self._follow_result = then(self._replay)
        except Exception:  # noqa: BLE001 - followed() is None: the caller computes it itself
            self._follow_result = None
        finally:
            self._followed.set()

    def then(self, fn: Callable[[Replay], object]) -> None:
        """Compute ``fn(replay)`` once the open has succeeded: on the opening's thread if
        it is still reading, else on a thread of its own (one follow-up per opening)."""
        with self._lock:
            if self._then is not None:
                raise ValueError("an Opening takes one follow-up")
            self._then = fn
            late = self._past_then
        if late:
            threading.Thread(
                target=self._follow, args=(fn,), name="kbdebug-open-then", daemon=True
            ).start()

    def followed(self, timeout: float | None = None) -> object:
        """What the follow-up computed (waiting up to ``timeout`` s for it); None if there
        is none, it failed, the open failed, or it is not done in time."""
        if self._then is None or not self._followed.wait(timeout):
            return None
        return self._follow_result

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
