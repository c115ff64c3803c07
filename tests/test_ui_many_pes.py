"""The app on many PEs: findings say where they hold, futures follow the focused PE, waits
are followed across PEs."""

from __future__ import annotations

from test_ui_app import SIZE, lines, opened
from test_ui_traces import fresh

from kbdebug.analysis import Analysis
from kbdebug.analysis.across_pes import short_id, where_text
from kbdebug.ui import KbdebugApp
from kbdebug.ui.panes.findings_view import FindingsView

# --- findings ----------------------------------------------------------------------------


async def test_findings_show_their_short_id_and_the_pes_where_they_hold():
    replay = fresh("ring_attention")
    expected = Analysis(fresh("ring_attention")).findings
    n_pes = replay.index.n_pes
    assert expected and any(len(f.pes) == n_pes > 1 for f in expected)
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("5")
        await pilot.pause()
        view = app.query_one(FindingsView)
        shown = lines(view)
        for k, finding in enumerate(view.findings):
            rule, site = short_id(finding).split(" ", 1)
            row = " ".join(shown[k].split())
            assert row.startswith(f"{rule} {site} {where_text(finding, n_pes)} ")
        assert f"on {n_pes} of {n_pes} PEs" in "".join(shown)
