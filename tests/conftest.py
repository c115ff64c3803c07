"""Fixtures for the whole suite: no test writes to the user's own cache directory."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_index_cache(tmp_path_factory: pytest.TempPathFactory):
    """Point the replay's index cache (KBDEBUG_CACHE_DIR) at a directory of the test
    session, for every test and every process a test starts."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KBDEBUG_CACHE_DIR", str(tmp_path_factory.mktemp("kbdebug-cache")))
        patch.delenv("KBDEBUG_NO_CACHE", raising=False)
        yield


def _quicker_pilot() -> None:
    """Make Textual's Pilot check for an idle app every 4 ms instead of every 20 ms.

    Each ``pilot.press`` and ``pilot.pause`` waits until the process's CPU time stops
    advancing (``textual._wait.wait_for_idle``), sampling in slices of
    ``SLEEP_GRANULARITY``: at Textual's 1/50 s a key costs at least 40 ms of sleep, most
    of an app test's time. A shorter slice keeps the same test (idle means under 5 % of
    the slice's CPU time, a worker thread's included) and only waits less. Textual's
    private names: if they are gone, tests keep Textual's own pace.
    """
    try:
        from textual import _wait
    except ImportError:
        return
    if hasattr(_wait, "SLEEP_GRANULARITY") and hasattr(_wait, "SLEEP_IDLE"):
        _wait.SLEEP_GRANULARITY = 1 / 250
        _wait.SLEEP_IDLE = _wait.SLEEP_GRANULARITY / 20


_quicker_pilot()
