"""A failed check that points at the tile: on a prefetch pipeline with an off-by-one index,
`kbdebug run` names the first wrong block, its store's line, PE and iteration, the largest
error and the load that took the wrong slice; --open opens the app at that store."""

from __future__ import annotations

import sys
from pathlib import Path

import kbdebug.commands.replay as replay_command
from emulator.reference import whole_reference
from kbdebug.analysis.wrong_block import first_wrong_block
from kbdebug.cli import main
from kbdebug.replay import Replay

KERNELS = Path(__file__).parent / "kernels_off_by_one.py"
LAUNCH = f"{KERNELS}:launch"


def run(capsys, tmp_path, *extra: str) -> tuple[int, str, str]:
    status = main(["run", LAUNCH, "-o", str(tmp_path / "x.kbt"), *extra])
    out, err = capsys.readouterr()
    return status, out, err


def test_an_off_by_one_prefetch_names_the_wrong_tile_and_the_slice_it_loaded(tmp_path, capsys):
    status, out, err = run(capsys, tmp_path)
    assert status == 1 and "output check failed: O differs" in err
    assert (
        "check:  first wrong block: O[16:32, :], stored at tests/kernels_off_by_one.py:22 "
        "(kernel) on PE 0, iteration 1"
    ) in out
    assert "largest error 1024 at O[16, 0]: got 2048, want 1024" in out
    assert "its loads: waited K[32:48, :] where the reference used K[16:32, :]" in out
    assert "run with --open to open it at that store" in out
    # The right pipeline passes; without a reference per block, a line says how to get one.
    status, out, _ = run(capsys, tmp_path, "--set", "ahead=1")
    assert status == 0 and "first wrong block" not in out
    status, out, _ = run(capsys, tmp_path, "--set", "per_block=false")
    assert status == 1 and "a Scenario(reference=...) per block names" in out


def test_a_whole_reference_names_the_slices_the_store_was_fed_from(tmp_path):
    sys.path.insert(0, str(KERNELS.parent))
    try:
        import kernels_off_by_one as kernels
    finally:
        sys.path.remove(str(KERNELS.parent))
    scenario = kernels.launch(n_tiles=3)
    scenario.run(trace=tmp_path / "y.kbt")
    want = scenario.memory.get(scenario.args[0], (3 * kernels.ROWS, kernels.COLS), "f32") * 2
    wrong = first_wrong_block(
        Replay.open(tmp_path / "y.kbt"),
        whole_reference({"O": want}),
        lambda addr, shape, dtype: scenario.memory.get(addr, shape, dtype),
    )
    assert wrong is not None and str(wrong.store.slice) == "O[16:32, :]"
    assert wrong.lines()[-1].startswith("  its loads: waited K[32:48, :] (")


def test_open_opens_the_app_at_the_wrong_store(tmp_path, capsys, monkeypatch):
    opened = []

    def make_app(path, rerun=None, open_at=None):
        app = real_make_app(path, rerun, open_at)
        monkeypatch.setattr(app, "run", lambda: opened.append(open_at[0]))
        return app

    real_make_app = replay_command.make_app
    monkeypatch.setattr(replay_command, "make_app", make_app)
    status, _, _ = run(capsys, tmp_path, "--open")
    assert status == 1
    replay = Replay.open(tmp_path / "x.kbt")
    [position] = opened
    event = replay.event(position - 1)
    assert "issue" in replay.describe(position - 1).lower(), event
    assert replay.index.loc(int(replay.index.columns.loc[position - 1])).line == 22
