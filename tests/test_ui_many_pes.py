"""The app on many PEs: findings say where they hold, futures follow the focused PE, waits
are followed across PEs."""

from __future__ import annotations

import numpy as np
from test_ui_app import SIZE, lines, opened
from test_ui_panes import title
from test_ui_traces import fresh

from kbdebug.analysis import Analysis
from kbdebug.analysis.across_pes import short_id, where_text
from kbdebug.ui import KbdebugApp
from kbdebug.ui.app.keybar import KeyBar
from kbdebug.ui.compare.app import CompareApp
from kbdebug.ui.compare.findings import FindingGroupsView
from kbdebug.ui.panes.findings_view import FindingsView
from kbdebug.ui.panes.futures_table import FuturesTable

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


# --- futures -----------------------------------------------------------------------------


def futures_shown(table: FuturesTable) -> list[int]:
    return [table.future_at(row) for row in range(table.row_count())]


async def test_futures_list_the_focused_pes_by_default_and_a_lists_every_pes():
    replay = fresh("prefill")
    f = replay.index.futures
    n_pes = replay.index.n_pes
    assert n_pes == 4
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        table = app.query_one(FuturesTable)
        for pe in range(n_pes):
            assert futures_shown(table) == [int(x) for x in np.flatnonzero(f.pe == pe)]
            assert title(table).startswith(f"[3] futures of PE {pe}")
            await pilot.press("right_square_bracket")
            await pilot.pause()
        assert app.focused_pe == 0
        await pilot.press("3", "a")
        await pilot.pause()
        assert futures_shown(table) == list(range(len(f.cmd)))
        assert title(table).startswith("▶[3] futures of every PE")
        # Every PE's futures: the PE column tells futures 0-3 apart.
        header, *rows = lines(table)
        assert header.split()[:2] == ["future", "pe"]
        assert [row.split()[:2] for row in rows[:4]] == [[str(k), str(k)] for k in range(4)]
        await pilot.press("o")  # by stall, still every PE's
        await pilot.pause()
        assert sorted(futures_shown(table)) == list(range(len(f.cmd)))
        await pilot.press("a")
        await pilot.pause()
        assert sorted(futures_shown(table)) == [int(x) for x in np.flatnonzero(f.pe == 0)]
        assert title(table).startswith("▶[3] futures of PE 0 by stall")


async def test_a_stop_on_another_pe_lists_that_pes_futures_with_its_future_picked():
    replay = fresh("prefill")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("w", "c", "c")
        await pilot.pause()
        pe = app.focused_pe
        future = app.selected_future
        assert pe != 0 and int(replay.index.futures.pe[future]) == pe
        table = app.query_one(FuturesTable)
        assert table.future_at(table.cursor) == future
        assert {int(replay.index.futures.pe[x]) for x in futures_shown(table)} == {pe}


# --- waits followed across PEs -------------------------------------------------------------


def receive_wait(replay, pe: int) -> int:
    """The WAIT_BEGIN of ``pe``'s receive in the relay."""
    futs = replay.index.futures
    (f,) = [f for f in range(len(futs.cmd)) if futs.pe[f] == pe and futs.wait_begin[f] >= 0]
    return int(futs.wait_begin[f])


async def test_u_follows_a_stalled_receive_back_to_its_root_and_d_returns():
    replay = fresh("relay")
    n_pes = replay.index.n_pes
    chain = Analysis(fresh("relay")).wait_chain(receive_wait(replay, n_pes - 1))
    # PE 3 waited for PE 2's send, late because PE 2 waited for PE 1's, ... PE 0's work.
    assert [(link.pe, link.sender) for link in chain.links] == [(3, 2), (2, 1), (1, 0)]
    expected = [chain.links[0].wait_event]
    for k, link in enumerate(chain.links):
        expected.append(link.send_event)
        if k + 1 < len(chain.links):
            expected.append(chain.links[k + 1].wait_event)
    assert chain.root.event == expected[-1]  # the root is PE 0's send: its own work
    c = replay.index.columns
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        app.move_to(expected[0] + 1)
        await pilot.pause()
        for k, event in enumerate(expected[1:], start=1):
            await pilot.press("u")
            await pilot.pause()
            assert app.position == event + 1
            pe = int(c.pe[event])
            assert app.focused_pe == pe
            # The status names the link: the PE, its line and the cycle.
            line = replay.index.loc(int(c.loc[event]) if c.loc[event] >= 0 else -1)
            assert f"PE {pe}" in app.status and f"cycle {int(c.time[event]):,}" in app.status
            if k % 2:  # a send: how late it was and why
                link = chain.links[k // 2]
                assert f"{link.late:,} cycles late" in app.status
                assert f"kernels_across_pes.py:{link.send_loc.line}" in app.status
            else:
                assert line is None or f"kernels_across_pes.py:{line.line}" in app.status
        assert "the root: PE 0's own work" in app.status
        await pilot.press("u")  # the chain ends at its root
        assert app.position == expected[-1] + 1 and app.status.startswith("the chain ends here")
        for event in reversed(expected[:-1]):
            await pilot.press("d")
            await pilot.pause()
            assert app.position == event + 1 and app.focused_pe == int(c.pe[event])
        await pilot.press("d")
        assert app.position == expected[0] + 1 and "at the start of the chain" in app.status


async def test_u_away_from_a_receive_says_what_it_needs():
    replay = fresh("flawed_prefetch")
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("u")
        assert app.position == 0 and "stop at one first" in app.status
        await pilot.press("w", "c", "u")  # a blocking load's wait: nothing on another PE
        assert app.status.startswith("no other PE to follow: the root: PE 0 stalled")
        await pilot.press("d")
        assert "no wait chain to go back along" in app.status


async def test_compare_findings_show_their_short_id_and_where_they_hold():
    a, b = fresh("ring_attention"), fresh("prefill")
    fixed = Analysis(fresh("ring_attention")).findings
    assert fixed
    app = CompareApp(a, b)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        text = [" ".join(line.split()) for line in lines(app.query_one(FindingGroupsView))]
        for finding in fixed:
            rule, site = short_id(finding).split(" ", 1)
            where = where_text(finding, a.index.n_pes)
            assert any(line.startswith(f"{rule} {site} {where} saves") for line in text)


async def test_a_one_pe_trace_has_no_pe_filter_to_toggle():
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        table = app.query_one(FuturesTable)
        assert title(table) == "▶[3] futures" and not table.filtered
        assert "all PEs" not in app.query_one(KeyBar).text
        await pilot.press("a")
        assert not table.all_pes and "'a' is not a key here" in app.status
