"""KB111 on a pipeline of send/recv stages, one per PE, one stage doing extra work on
every tile: the work moved to another stage is done on that tile there, before the tile
goes on, so every later stage waits for it. The estimate re-times that split (each
tile's extra runs spread over the stages) and the launch ends where it says; the report
shows the saving at the launch, never in a PE's own "at most that gap" figure."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_ui_app import lines, opened

from emulator import HardwareConfig, Memory, run_kernel
from kbdebug.analysis import Analysis
from kbdebug.analysis.imbalance import imbalance_of
from kbdebug.cli import main
from kbdebug.replay import Replay
from kbdebug.ui import KbdebugApp
from kbdebug.ui.panes.findings_view import FindingsView

ROWS = COLS = 64
TILE_BYTES = ROWS * COLS * 2
TILES = 6


def stages(tl, x_ptr, w_ptr, y_ptr, n_tiles, extra):
    """Stage PE s multiplies each tile by W once, then ``extra[s]`` times more, and
    passes it right; PE 0 loads the tiles, the last PE stores them."""
    pe, last = tl.program_id(0), tl.num_programs(0) - 1
    w = tl.load(w_ptr, (COLS, COLS), "f16")
    for j in range(n_tiles):
        with tl.scope():
            if pe == 0:
                x = tl.wait(tl.load_async(x_ptr + j * TILE_BYTES, (ROWS, COLS), "f16"))
            else:
                x = tl.wait(tl.recv_async("left", (ROWS, COLS), "f16"))
            h = tl.dot(x, w).to("f16")
            for _ in range(extra[pe]):
                h = tl.dot(h, w).to("f16")
            if pe == last:
                tl.store(y_ptr + j * TILE_BYTES, h)
            else:
                tl.send("right", h)


def run_stages(path, extra) -> None:
    """Record the pipeline with ``extra[s]`` more multiplies a tile on stage ``s``."""
    memory = Memory(size_bytes=1 << 22)
    rng = np.random.default_rng(5)
    x_ptr = memory.put((rng.standard_normal((TILES, ROWS, COLS)) * 0.5).astype(np.float16))
    w_ptr = memory.put((rng.standard_normal((COLS, COLS)) / 8).astype(np.float16))
    y_ptr = memory.alloc(TILES * TILE_BYTES)
    config = HardwareConfig(mesh_rows=1, mesh_cols=len(extra), mesh_wrap=False)
    args = (x_ptr, w_ptr, y_ptr, TILES, tuple(extra))
    run_kernel(stages, args, (len(extra),), memory, config, trace=path)


def run_heavy_last_stage(path) -> None:
    """Four stages, the last with three more multiplies a tile (as held-out pipe4.py)."""
    run_stages(path, (0, 0, 0, 3))


def end_of(analysis: Analysis) -> int:
    return max(b.end for b in analysis.bounds)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("pipeline")


@pytest.fixture(scope="module")
def heavy_last(folder):
    path = folder / "heavy_last.kbt"
    run_heavy_last_stage(path)
    return path


def analysed(path) -> Analysis:
    return Analysis(Replay.open(path, cache=False))


@pytest.mark.parametrize("extra", [(0, 0, 0, 3), (0, 3, 0, 0), (3, 0, 0, 0), (0, 0, 0, 5)])
def test_the_saving_is_what_the_named_split_measures(folder, extra):
    """Doing what the finding says (each tile's extra runs spread over the stages it
    names, at most its share on each) ends the launch where it said."""
    name = "".join(map(str, extra))
    path = folder / f"uneven_{name}.kbt"
    run_stages(path, extra)
    bad = analysed(path)
    (kb111,) = [f for f in bad.findings if f.rule == "KB111"]
    heavy = extra.index(max(extra))
    assert kb111.pe == heavy
    split = imbalance_of(bad.model).per_round
    assert split is not None and split.pe == heavy and split.rounds == TILES
    # The split the message names, written as a kernel: each stage it names takes up to
    # its share of the heavy stage's extra runs a tile, the heavy stage keeps the rest.
    moved, left = [0] * len(extra), max(extra)
    for pe in sorted(split.takers, key=lambda pe: pe == heavy):
        take = min(split.cap, left)
        moved[pe], left = take, left - take
    assert left == 0
    assert f"at most {split.cap} on each of" in kb111.message
    even = folder / f"split_{name}.kbt"
    run_stages(even, moved)
    measured = end_of(bad) - end_of(analysed(even))
    assert measured > 0
    assert kb111.saving == pytest.approx(measured, rel=0.03)


def test_the_saving_is_the_launch_s_not_a_pe_s_gap(heavy_last, capsys):
    analysis = analysed(heavy_last)
    (kb111,) = [f for f in analysis.findings if f.rule == "KB111"]
    assert main(["report", str(heavy_last)]) == 0
    text = capsys.readouterr().out
    # At the launch, beside its bound, with what its efficiency is of.
    launch = text[text.index("launch: bound") :].split("\n")[:2]
    assert "(launch bound / launch time)" in launch[0]
    assert f"KB111 saves up to ~{kb111.saving:,}" in launch[1]
    assert "efficiency (its bound / its kernel time)" in text
    # Each PE's figure stays within its own gap: the heavy PE sits near its bound.
    gaps = {b.pe: b.achieved - b.bound for b in analysis.bounds}
    heavy = next(b for b in analysis.bounds if b.pe == kb111.pe)
    assert kb111.saving > 10 * (heavy.achieved - heavy.bound)
    shown = {}
    for line in text.splitlines():
        if line.startswith("  PE") and "findings save up to ~" in line:
            pe = int(line.split()[0][2:])
            shown[pe] = int(line.split("up to ~")[1].split()[0].replace(",", ""))
    assert sorted(shown) == sorted(gaps)
    assert all(shown[pe] <= gaps[pe] for pe in gaps)
    # --json says the same figures.
    assert main(["report", str(heavy_last), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["launch"]["saving"] == kb111.saving
    assert {e["pe"]: e["savings"] for e in doc["efficiency"]} == shown


async def test_the_findings_pane_at_80x24_shows_kb111_whole(heavy_last):
    app = KbdebugApp(replay=Replay.open(heavy_last, cache=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await opened(app, pilot)
        await pilot.press("5")
        await pilot.pause()
        view = app.query_one(FindingsView)
        (kb111,) = [f for f in view.findings if f.rule == "KB111"]
        assert view.findings[view.cursor] is kb111
        shown = "".join("".join(lines(view)).split())
        assert "".join(kb111.message.split()) in shown
        assert "".join(("→ " + kb111.suggestion).split()) in shown
        assert "…" not in "".join(lines(view)[view.size.height - view.detail_rows :])
