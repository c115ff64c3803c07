"""A findings breakpoint set before the background findings arrive hits once they do."""

from __future__ import annotations

import asyncio
import threading
import time

from test_ui_traces import fresh

from kbdebug.analysis import results
from kbdebug.replay import FindingHit
from kbdebug.ui import KbdebugApp


async def test_a_findings_breakpoint_set_before_the_findings_stops_once_they_arrive(
    monkeypatch,
):
    """On a large trace the findings take seconds: a ``finding`` breakpoint set in the
    meantime used to stay empty for good ("ran to the end of the trace")."""
    release = threading.Event()
    compute = results.Analysis.findings.fget

    def delayed(self):
        release.wait(30)
        return compute(self)

    monkeypatch.setattr(results.Analysis, "findings", property(delayed))
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        assert app.findings is None  # the worker is held
        await pilot.press("B", *"finding", "enter", "escape")
        (bp,) = replay.breakpoints
        assert isinstance(bp, FindingHit) and bp.findings is None
        await pilot.press("c")
        assert app.position == replay.n_events  # nothing to hit yet: it ran to the end
        await pilot.press("g")
        assert app.position == 0
        release.set()
        deadline = time.monotonic() + 30
        while app.findings is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            await pilot.pause()
        assert app.findings, "the findings never arrived"
        first = min(e for f in app.findings for e in f.events)
        await pilot.press("c")
        assert app.position - 1 == first
        assert bp.findings == tuple(app.findings)
