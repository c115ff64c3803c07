"""Before and after without effort: two kernels of one file align by likeness, R keeps the
trace it records over for D, and `kbdebug run --compare-with OLD.kbt` opens the compare."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_ui_app import header, opened
from test_ui_reload import settle

from kbdebug.analysis.compare import Comparison
from kbdebug.cli import main
from kbdebug.replay import Replay
from kbdebug.ui import KbdebugApp
from kbdebug.ui.app.reloading import previous_path

ONE_FILE = Path(__file__).parent / "compare_kernels" / "one_file" / "flawed_and_fixed.py"


@pytest.fixture(scope="module")
def flawed_and_fixed(tmp_path_factory) -> tuple[str, str]:
    """The flawed and the fixed kernel of one file, each recorded on 4 tiles."""
    folder = tmp_path_factory.mktemp("one_file")
    out = []
    for launch in ("launch_flawed", "launch_fixed"):
        path = str(folder / f"{launch}.kbt")
        argv = ["run", f"{ONE_FILE}:{launch}", "--set", "n_tiles=4", "-q", "-o", path]
        assert main(argv) == 0
        out.append(path)
    return out[0], out[1]


def test_two_kernels_of_one_file_pair_their_calls_and_lines(flawed_and_fixed, capsys):
    a, b = flawed_and_fixed
    capsys.readouterr()
    assert main(["diff", a, b, "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["warnings"] == [] and "different kernels" not in out.err
    # The flawed kernel's wait stalls; in B the same wait is the fixed kernel's.
    waits = [r for r in doc["stall_by_line"] if r["a"]]
    assert len(waits) == 1 and waits[0]["b_line"] != waits[0]["line"]
    lines = ONE_FILE.read_text().splitlines()
    assert "tl.wait(f)" in lines[waits[0]["line"] - 1]
    assert "tl.wait(f)" in lines[waits[0]["b_line"] - 1]
    comparison = Comparison(Replay.open(a), Replay.open(b))
    a_calls, b_calls = comparison.calls.calls("a"), comparison.calls.calls("b")
    paired = [comparison.other_call("a", int(e)) for e in a_calls]
    # Every call of A but one has its counterpart: the in-loop load_async pairs with the
    # fixed kernel's next-tile load by likeness, so A's last load (its 4th) has none, as
    # B issues only 3 there (and its first load out of the loop).
    unpaired = [int(e) for e, other in zip(a_calls, paired, strict=True) if other is None]
    assert len(a_calls) == len(b_calls) and len(set(paired) - {None}) == len(a_calls) - 1
    assert len(unpaired) == 1 and str(comparison.call_key("a", unpaired[0])).endswith("#0 #3")
    assert str(comparison.call_key("a", int(a_calls[0]))).startswith(
        f"{comparison.a.index.locs[0].file}::kernel_fixed::tl.load_async(k_ptr+(j+1)"
    )


def test_previous_path_never_takes_another_file(tmp_path):
    path = str(tmp_path / "x.kbt")
    assert previous_path(path) == str(tmp_path / "x.prev.kbt")
    (tmp_path / "x.prev.kbt").write_bytes(b"someone's")
    assert previous_path(path) == str(tmp_path / "x.prev2.kbt")
    assert previous_path(path, mine=str(tmp_path / "x.prev.kbt")) == str(tmp_path / "x.prev.kbt")


async def test_R_keeps_the_previous_trace_and_D_compares_it(tmp_path, flawed_and_fixed):
    path = tmp_path / "x.kbt"
    shutil.copy(flawed_and_fixed[0], path)
    original = path.read_bytes()
    (tmp_path / "x.prev.kbt").write_bytes(b"not ours")
    argv = ["run", f"{ONE_FILE}:launch_fixed", "--set", "n_tiles=2", "-o", str(path), "--open"]
    app = KbdebugApp(str(path), rerun=argv)
    async with app.run_test(size=(120, 36)) as pilot:
        await opened(app, pilot)
        await pilot.press("D")
        assert "D compares with the previous run: R re-runs and keeps it" in header(app)
        await pilot.press("R")
        await settle(app, pilot)
        kept = tmp_path / "x.prev2.kbt"
        assert f"previous run kept as {kept}: D compares" in app.status
        assert kept.read_bytes() == original and path.read_bytes() != original
        assert (tmp_path / "x.prev.kbt").read_bytes() == b"not ours"
        second = path.read_bytes()
        await pilot.press("R")
        await settle(app, pilot)
        # Its own kept trace is replaced by the run just recorded over; nothing else.
        assert kept.read_bytes() == second
        assert sorted(p.name for p in tmp_path.iterdir()) == ["x.kbt", "x.prev.kbt", kept.name]
        await pilot.press("D")  # the test's terminal cannot hand itself to another app
        assert f"kbdebug compare {kept} {path}" in app.status


def test_run_compare_with_opens_compare_after_recording(tmp_path, monkeypatch, capsys):
    import kbdebug.commands.compare as compare

    opened_with = []
    monkeypatch.setattr(compare, "open_compare", lambda a, b: opened_with.append((a, b)))
    out = tmp_path / "after.kbt"
    run = ["run", f"{ONE_FILE}:launch_fixed", "--set", "n_tiles=2", "-o", str(out)]
    assert main([*run, "--compare-with", str(tmp_path / "missing.kbt")]) == 2
    assert "missing.kbt: no such file" in capsys.readouterr().err and not out.exists()
    assert main([*run, "--compare-with", str(out)]) == 2  # OLD is what it would write over
    assert "is the trace this run writes over" in capsys.readouterr().err
    before = tmp_path / "before.kbt"
    assert main(["run", f"{ONE_FILE}:launch_flawed", "--set", "n_tiles=2", "-o", str(before)]) == 0
    assert main([*run, "--compare-with", str(before)]) == 0
    [(a, b)] = opened_with
    assert (str(a.path), str(b.path)) == (str(before), str(out))
    assert "next:" not in capsys.readouterr().out.split("trace:  ")[-1]


def test_a_finding_of_both_kernels_is_still_there_not_fixed_and_new(flawed_and_fixed, tmp_path):
    renamed = str(tmp_path / "renamed.kbt")
    argv = ["run", f"{ONE_FILE}:launch_flawed_renamed", "--set", "n_tiles=4", "-q"]
    assert main([*argv, "-o", renamed]) == 0
    groups = Comparison(Replay.open(flawed_and_fixed[0]), Replay.open(renamed)).findings
    assert (groups.fixed, groups.new) == ([], [])
    assert [b.rule for _, b in groups.still] == ["KB102"]
