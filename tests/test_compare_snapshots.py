"""How the compare screen looks after fixing a flawed prefetch: stopped at A's second stalled
wait, at 160x48 (both runs) and 80x24 (one run, x flips)."""

from __future__ import annotations

from pathlib import Path

from app_settle import settled

from kbdebug.replay import Replay
from kbdebug.ui.compare.app import CompareApp

TRACES = Path(__file__).resolve().parents[1] / "traces"


def fixed_prefetch() -> CompareApp:
    return CompareApp(
        Replay.open(TRACES / "flawed_prefetch.kbt"), Replay.open(TRACES / "decode_prefetch.kbt")
    )


async def _stop_at_second_stalled_wait(pilot) -> None:
    await settled(pilot)
    await pilot.press("w", "c", "c")
    await pilot.pause()


async def _flip_to_b_at_a_linked_call(pilot) -> None:
    await settled(pilot)
    # s steps into helpers (as n did before it stepped over them); the first enters the kernel.
    await pilot.press("x", *["s"] * 7)
    await pilot.pause()


def test_compare_screen_160x48(snap_compare):
    assert snap_compare(
        fixed_prefetch(), terminal_size=(160, 48), run_before=_stop_at_second_stalled_wait
    )


def test_compare_screen_80x24(snap_compare):
    assert snap_compare(
        fixed_prefetch(), terminal_size=(80, 24), run_before=_stop_at_second_stalled_wait
    )


def test_compare_screen_80x24_flipped_to_b(snap_compare):
    assert snap_compare(
        fixed_prefetch(), terminal_size=(80, 24), run_before=_flip_to_b_at_a_linked_call
    )
