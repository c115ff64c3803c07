"""Waiting in Pilot tests until the app has opened its traces and shown its findings."""

from __future__ import annotations

import time

#: Seconds a test waits for the findings before it fails.
SETTLE_SECONDS = 60.0


async def settled(pilot) -> None:
    """Wait until ``pilot.app`` shows its findings (or could not open), then until idle.

    Waiting for the workers alone is not enough: the findings' worker starts only once
    the loaded screen is drawn, after the load worker has completed.
    """
    app = pilot.app
    deadline = time.monotonic() + SETTLE_SECONDS
    while not app.analyses_shown and app.load_error is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"the app showed no findings in {SETTLE_SECONDS:.0f} s")
        await app.workers.wait_for_complete()
        await pilot.pause()
    await pilot.pause()
