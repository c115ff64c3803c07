"""The app's p (print the value of a future's tensor) and the futures table's slices and digests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from app_settle import settled

from emulator.scenarios import decode_prefetch
from kbdebug.cli import main
from kbdebug.replay import Replay
from kbdebug.replay.values import Values
from kbdebug.ui import KbdebugApp
from kbdebug.ui.panes.futures_table import FuturesTable
from kbdebug.ui.screens.value_screen import ValueScreen
from kbdebug.ui.value_text import value_lines

SIZE = (160, 48)
TRACES = Path(__file__).resolve().parents[1] / "traces"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A 3-tile decode run recorded with --values, and one without beside it."""
    folder = tmp_path_factory.mktemp("ui_values")
    kept, plain = folder / "kept.kbt", folder / "plain.kbt"
    args = ["run", "decode_prefetch", "--set", "n_tiles=3", "-q"]
    assert main([*args, "-o", str(kept), "--values"]) == 0
    assert main([*args, "-o", str(plain)]) == 0
    return kept, plain


def table_lines(app) -> list[str]:
    table = app.query_one(FuturesTable)
    return [table.render_line(y).text for y in range(table.size.height)]


async def opened(app, pilot) -> None:
    await settled(pilot)


async def test_p_prints_the_selected_futures_slice_digest_and_first_rows(recorded):
    kept, _ = recorded
    app = KbdebugApp(replay=Replay.open(kept))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        app.query_one(FuturesTable).focus()
        await pilot.press("down")  # future 1: the first K tile
        assert app.selected_future == 1
        await pilot.press("p")
        screen = app.screen
        assert isinstance(screen, ValueScreen)
        text = "\n".join(screen.lines)
        assert "future 1: load_async K[0:64, :] (64, 128) f16 on PE 0" in screen.lines[0]
        assert screen.lines[1].startswith("min ") and "crc32 0x" in screen.lines[1]
        assert "values (rows 0..7 of 64, columns 0..7 of 128):" in text
        scenario = decode_prefetch(n_tiles=3)
        k = scenario.memory.tensors[1]
        first = scenario.memory.get(k.addr, k.shape, "f16")[0, 0]
        assert f"{first:.4g}".rstrip("0") in screen.lines[3]
        await pilot.press("p")
        assert not isinstance(app.screen, ValueScreen)


async def test_p_without_a_future_refuses_and_says_how(recorded):
    _, plain = recorded
    app = KbdebugApp(replay=Replay.open(plain))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("p")
        assert not isinstance(app.screen, ValueScreen)
        assert "no future here: pick one in the futures table (3)" in app.status


async def test_the_futures_table_shows_slices_and_digests(recorded):
    _, plain = recorded
    app = KbdebugApp(replay=Replay.open(plain))
    async with app.run_test(size=(250, 50)) as pilot:
        await opened(app, pilot)
        lines = table_lines(app)
        assert "tensor" in lines[0] and "digest" in lines[0] and "address" not in lines[0]
        row = next(line for line in lines[1:] if line.split()[:1] == ["1"])
        assert "K[0:64, :]" in row and "μ" in row


def test_p_on_an_old_trace_says_why_there_is_no_digest():
    old = TRACES.parent / "tests" / "data" / "old_traces" / "decode_prefetch.kbt"  # format 1.3
    values = Values.of(Replay.open(old))
    lines = value_lines(values, 1)
    assert lines[0].startswith("future 1: load_async 0x800 + 16,384 bytes (64, 128) f16 on PE 0")
    assert lines[1] == (
        "no digest: this trace was recorded before format 1.5 (kbdebug run records them)"
    )
    assert lines[2] == "values not kept: kbdebug run --values keeps them beside the trace"


def test_p_says_when_the_limit_left_a_tensor_out(recorded, tmp_path):
    _, plain = recorded
    values = Values.of(Replay.open(plain))
    assert values.kept is None and values.array(1) is None
    lines = value_lines(values, 1)
    assert np.isfinite(values.digest(1).mean)
    assert lines[2].startswith("values not kept")


async def test_picking_a_future_names_its_slice_on_the_status_line(recorded):
    _, plain = recorded
    app = KbdebugApp(replay=Replay.open(plain))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        app.query_one(FuturesTable).focus()
        await pilot.press("down", "down")
        assert app.status.startswith("future 2 (load_async V[0:64, :] on PE 0 at pipeline.py:")


async def test_p_in_compare_prints_the_focused_runs_tensor(recorded):
    from kbdebug.ui.compare.app import CompareApp

    kept, plain = recorded
    app = CompareApp(Replay.open(kept), Replay.open(plain))
    async with app.run_test(size=SIZE) as pilot:
        await opened(app, pilot)
        await pilot.press("s", "s", "s", "p")
        screen = app.screen
        assert isinstance(screen, ValueScreen) and screen.title_text == "A: p: future 0"
        assert screen.lines[0].startswith("future 0: load Q[:, :] (8, 128) f16 on PE 0")
        assert screen.lines[2] == "values (columns 0..7 of 128):"  # A was run with --values
