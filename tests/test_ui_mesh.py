"""The mesh pane: every PE on one screen, sorted by end, stall or efficiency; Enter focuses one."""

from __future__ import annotations

import threading

import numpy as np
from test_ui_app import SIZE, header, lines, opened
from test_ui_panes import tab_labels
from test_ui_traces import fresh

from kbdebug.analysis import Analysis
from kbdebug.ui import KbdebugApp
from kbdebug.ui.compare.app import CompareApp
from kbdebug.ui.panes.futures_table import FuturesTable
from kbdebug.ui.panes.lanes import build_timeline
from kbdebug.ui.panes.mesh_data import MeshData
from kbdebug.ui.panes.mesh_view import MeshView, strip_codes
from kbdebug.ui.panes.source_view import SourceView
from kbdebug.ui.panes.timeline import Timeline

PES = 16


def rows(view: MeshView) -> list[list[str]]:
    """The PE rows on screen, split into words, the focus mark dropped."""
    return [line.lstrip("▸").split() for line in lines(view)[1:] if line.strip()]


def expected_figures(replay) -> dict[int, tuple[int, float, float]]:
    """Per PE: (end, stall share, efficiency) from the analysis's bounds and the stalls of
    its waits."""
    bounds = Analysis(fresh("mesh16")).bounds
    f = replay.index.futures
    out = {}
    for b in bounds:
        stalled = int(f.stall[(f.pe == b.pe) & (f.wait_end >= 0)].sum())
        out[b.pe] = (b.end, stalled / b.achieved, b.efficiency)
    return out


async def test_6_lists_every_pe_of_a_16_pe_mesh_with_its_place_end_and_efficiency():
    replay = fresh("mesh16")
    assert replay.index.n_pes == PES and replay.index.header["mesh"] == [4, 4]
    expected = expected_figures(replay)
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("6")
        await pilot.pause()
        view = app.query_one(MeshView)
        assert app.focused is view and tab_labels(app)[2] == "▶[6] Mesh"
        shown = rows(view)
        assert [int(r[0]) for r in shown] == list(range(PES))
        for pe, row in enumerate(shown):
            end, stall, eff = expected[pe]
            assert row[1:5] == [f"r{pe // 4}c{pe % 4}", f"{end:,}", f"{eff:.0%}", f"{stall:.0%}"]
        # The status names the PE that ends last and the one that stalls most.
        last = max(expected, key=lambda pe: (expected[pe][0], -pe))
        assert app.status.startswith(f"PE {last} ends last ({expected[last][0]:,})")


async def test_o_sorts_the_pes_by_end_stall_and_efficiency():
    replay = fresh("mesh16")
    expected = expected_figures(replay)
    # The trace's PEs differ in each figure, so each sort puts them in another order.
    assert len({e[0] for e in expected.values()}) > PES // 2
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("6")
        # Each o moves on to the next sort, in one app: end, stall, then efficiency.
        for sort, column, key in [
            ("end", "end", lambda e, pe: (-e[pe][0], pe)),
            ("stall", "stall", lambda e, pe: (-e[pe][1], pe)),
            ("efficiency", "eff", lambda e, pe: (e[pe][2], pe)),
        ]:
            await pilot.press("o")
            await pilot.pause()
            view = app.query_one(MeshView)
            assert view.sort == sort
            titles = lines(view)[0].split()[:4]
            assert [t for t in titles if t.endswith("▼")] == [f"{column}▼"], sort
            order = sorted(range(PES), key=lambda pe: key(expected, pe))
            assert [int(r[0]) for r in rows(view)] == order, sort
            assert view.pe_at(view.cursor) == order[0], sort  # a new sort starts at its first row


async def test_enter_focuses_the_pe_and_the_other_panes_follow():
    replay = fresh("mesh16")
    expected = expected_figures(replay)
    app = KbdebugApp(replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("6", "o")  # latest end first
        await pilot.pause()
        view = app.query_one(MeshView)
        await pilot.press("down", "enter")
        await pilot.pause()
        pe = sorted(range(PES), key=lambda p: (-expected[p][0], p))[1]
        assert app.focused_pe == pe and view.pe_at(view.cursor) == pe
        assert app.status.startswith(f"focused PE {pe}: ends at cycle {expected[pe][0]:,}")
        assert f"PE {pe}/{PES}" in header(app)
        assert app.query_one(SourceView).focused_pe == pe
        timeline = app.query_one(Timeline)
        assert timeline.focused_pe == pe
        first = timeline.data.lanes_of(pe)[0]
        assert timeline.lane_top <= first < timeline.lane_top + timeline.lane_rows
        table = app.query_one(FuturesTable)
        f = replay.index.futures
        shown = [table.future_at(r) for r in range(table.row_count())]
        assert shown == [int(x) for x in np.flatnonzero(f.pe == pe)]
        # The focused PE's row is marked; ] moves the mark with the focus.
        assert lines(view)[1 + view.row_of(pe)].startswith("▸")
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert lines(view)[1 + view.row_of((pe + 1) % PES)].startswith("▸")
        assert not lines(view)[1 + view.row_of(pe)].startswith("▸")


def test_stall_shares_per_column_match_the_kernel_lanes():
    replay = fresh("mesh16")
    data = MeshData(replay)
    width = 97
    shares = data.shares(width)
    edges = np.linspace(0, data.end_time, width + 1)
    for lane in build_timeline(replay).lanes:
        if lane.kind != "kernel":
            continue
        ran = ~np.isnan(shares[lane.pe])
        assert ran.any()
        assert np.allclose(shares[lane.pe][ran], lane.stalls.fraction(edges)[ran])
        # Outside its kernel a PE's cells are blank; inside, any stall shows.
        codes = strip_codes(shares[lane.pe])
        assert (codes[~ran] == -1).all()
        assert ((codes[ran] > 0) == (shares[lane.pe][ran] > 0)).all()
    assert data.shares(width) is shares  # computed once per width, not per repaint


async def test_compare_shows_the_focused_runs_mesh_and_x_flips_it():
    a, b = fresh("mesh16"), fresh("ring_attention")
    app = CompareApp(a, b)
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("6")
        await pilot.pause()
        view = app.query_one(MeshView)
        assert app.focused is view and view.data.n_pes == PES
        assert "mesh of A" in str(view.border_title)
        bounds = {x.pe: x for x in Analysis(fresh("mesh16")).bounds}
        assert [r[2] for r in rows(view)[:3]] == [f"{bounds[pe].end:,}" for pe in range(3)]
        await pilot.press("x")
        await pilot.pause()
        assert view.data.n_pes == b.index.n_pes and "mesh of B" in str(view.border_title)
        ends = {x.pe: x.end for x in Analysis(fresh("ring_attention")).bounds}
        assert [r[1] for r in rows(view)] == [f"{ends[pe]:,}" for pe in range(b.index.n_pes)]
        await pilot.press("6", "down", "enter")
        await pilot.pause()
        assert app.focused_pe == 1 and app.status.startswith("B: focused PE 1")


def test_the_summary_says_when_every_pe_is_alike_instead_of_naming_pe_0():
    replay = fresh("prefill")
    bounds = Analysis(fresh("prefill")).bounds
    assert len({(b.end, b.efficiency) for b in bounds}) == 1
    view = MeshView(replay)
    view.use_bounds(bounds)
    end, eff = bounds[0].end, bounds[0].efficiency
    assert view.summary().startswith(f"all 4 PEs alike: end {end:,}, stall ")
    assert view.summary().endswith(f", {eff:.0%} efficient")
    uneven = MeshView(fresh("mesh16"))
    uneven.use_bounds(Analysis(fresh("mesh16")).bounds)
    expected = expected_figures(fresh("mesh16"))
    most = max(share for _, share, _ in expected.values())
    tied = sorted(pe for pe, (_, share, _) in expected.items() if share == most)
    assert f"PE {tied[0]} (+{len(tied) - 1}) stalls most" in uneven.summary()


async def test_the_mesh_tab_takes_rows_from_the_timeline_and_gives_them_back():
    app = KbdebugApp(replay=fresh("mesh16"))
    async with app.run_test(size=(80, 24)) as pilot:
        await opened(app, pilot)
        tabs = app.query_one("#tabs")
        before = tabs.size.height
        await pilot.press("6")
        await pilot.pause()
        view = app.query_one(MeshView)
        assert tabs.size.height > before and view.page_rows >= 8
        await pilot.press("4")
        await pilot.pause()
        assert tabs.size.height == before


async def test_v_draws_a_2d_mesh_as_its_rows_and_columns_and_enter_focuses_a_cell():
    app = KbdebugApp(replay=fresh("mesh16"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("6", "v")
        await pilot.pause()
        view = app.query_one(MeshView)
        assert view.grid and view.row_count() == 4
        header, *shown = [line for line in lines(view) if line.strip()]
        assert header.split() == ["c0", "c1", "c2", "c3"]
        for r, line in enumerate(shown):
            words = line.replace("▸", " ").split()
            assert words[0] == f"r{r}"
            numbers = [w for w in words[1:] if w.isdigit()]
            assert numbers == [str(r * 4 + c) for c in range(4)]
        await pilot.press("right", "right", "down", "enter")
        await pilot.pause()
        assert app.focused_pe == 6 and app.status.startswith("focused PE 6:")
        assert "(mesh r1c2)" in app.status
        await pilot.press("v")  # back to the list, on the same PE
        await pilot.pause()
        assert not view.grid and view.pe_at(view.cursor) == 6


async def test_v_is_not_a_key_on_a_row_of_pes():
    app = KbdebugApp(replay=fresh("ring_attention"))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("6", "v")
        assert not app.query_one(MeshView).grid and "'v' is not a key here" in app.status


async def test_efficiency_reads_computing_until_the_analysis_is_in_and_dash_if_it_failed():
    release = threading.Event()

    class SlowApp(KbdebugApp):
        def _analyse(self, replays):
            if not release.wait(30):
                raise RuntimeError("never released")
            raise RuntimeError("a failing rule")

    app = SlowApp(replay=fresh("mesh16"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("6")
        await pilot.pause()
        view = app.query_one(MeshView)
        assert {r[3] for r in rows(view)} == {"…"}
        release.set()
        await opened(app, pilot)
        assert {r[3] for r in rows(view)} == {"-"}
