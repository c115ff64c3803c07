"""How the main screen looks, stopped at a stalled wait, at 80x24 and 160x48."""

from __future__ import annotations

from app_settle import settled
from test_ui_traces import fresh

from kbdebug.ui import KbdebugApp


async def _stop_at_second_stalled_wait(pilot) -> None:
    await settled(pilot)
    await pilot.press("w", "c", "c")
    await pilot.pause()


def test_main_screen_80x24(snap_compare):
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    assert snap_compare(app, terminal_size=(80, 24), run_before=_stop_at_second_stalled_wait)


def test_main_screen_160x48(snap_compare):
    app = KbdebugApp(replay=fresh("flawed_prefetch"))
    assert snap_compare(app, terminal_size=(160, 48), run_before=_stop_at_second_stalled_wait)


def test_main_screen_of_four_pes_160x48(snap_compare):
    app = KbdebugApp(replay=fresh("prefill"))
    assert snap_compare(app, terminal_size=(160, 48), run_before=_stop_at_second_stalled_wait)


async def _mesh_by_end(pilot) -> None:
    await settled(pilot)
    await pilot.press("6", "o")
    await pilot.pause()


def test_mesh_pane_of_a_4x4_mesh_by_end_80x24(snap_compare):
    app = KbdebugApp(replay=fresh("mesh16"))
    assert snap_compare(app, terminal_size=(80, 24), run_before=_mesh_by_end)


def test_mesh_pane_of_a_4x4_mesh_by_end_160x48(snap_compare):
    app = KbdebugApp(replay=fresh("mesh16"))
    assert snap_compare(app, terminal_size=(160, 48), run_before=_mesh_by_end)


async def _mesh_grid(pilot) -> None:
    await settled(pilot)
    await pilot.press("6", "v", "right", "down")
    await pilot.pause()


def test_mesh_pane_as_a_4x4_grid_80x24(snap_compare):
    app = KbdebugApp(replay=fresh("mesh16"))
    assert snap_compare(app, terminal_size=(80, 24), run_before=_mesh_grid)
