"""`kbdebug explore`'s first differing run says what `kbdebug run` says of a failed check
with a reference per block (the first wrong block), not numpy's text cut short."""

from __future__ import annotations

import textwrap
from pathlib import Path

from kbdebug.cli import main

TESTS = Path(__file__).parent

LAUNCH = textwrap.dedent(
    f"""
    import sys

    import numpy as np

    sys.path.insert(0, {str(TESTS)!r})
    import kernels_store_load_race as race
    from emulator.reference import whole_reference


    def launch_race(n_tiles=2):
        scenario = race.launch_race(n_tiles)
        rows = n_tiles * race.ROWS
        x = np.arange(rows * race.COLS, dtype=np.float32).reshape(rows, race.COLS)
        scenario.memory.name("OUT", scenario.args[3], x.shape, "f32")
        scenario.reference = whole_reference({{"OUT": x * 2 + 1}})
        return scenario
    """
)


def test_first_differing_run_names_its_first_wrong_block(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "race_ref.py").write_text(LAUNCH)
    assert main(["explore", "race_ref.py:launch_race", "--runs", "8", "-j", "1", "-q"]) == 1
    out = capsys.readouterr().out
    first = next(line for line in out.splitlines() if line.startswith("first differing run"))
    assert ": first wrong block: OUT[" in first, out
    assert "kernels_store_load_race.py:31" in first
    assert "  largest error " in out
