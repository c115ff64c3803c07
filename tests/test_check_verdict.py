"""The output check's verdict in the trace: `kbdebug run` holds the footer until its numpy
check has run and writes the verdict there (traces/FORMAT.md, footer ``check``); a reader
that does not know the key opens the file without it; report, diff and the compare header
say a run's output was wrong (an off-by-one prefetch against the right pipeline)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import msgpack
import pytest
from app_settle import settled

from emulator.trace.reader import read_trace, read_trace_tables
from emulator.trace.writer import TraceWriter, check_record
from kbdebug.cli import main
from kbdebug.replay import Replay
from kbdebug.ui.compare.app import CompareApp
from kbdebug.ui.compare.header import CompareHeader

ROOT = Path(__file__).resolve().parents[1]
KERNELS = Path(__file__).parent / "kernels_off_by_one.py"
WRONG = {"ok": False, "message": "O differs (max error 1024)", "block": "O[16:32, :]"}
RIGHT = {"ok": True, "message": None, "block": None}
#: A commit whose reader predates the verdict (a 1.6 reader that does not know "check").
OLD_READER = "1f56122"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("verdict")
    paths = {name: str(root / f"{name}.kbt") for name in ("bad", "good", "unchecked")}
    assert main(["run", f"{KERNELS}:launch", "-o", paths["bad"], "-q"]) == 1
    assert main(["run", f"{KERNELS}:launch", "--set", "ahead=1", "-o", paths["good"], "-q"]) == 0
    assert main(["run", f"{KERNELS}:launch", "--no-check", "-o", paths["unchecked"], "-q"]) == 0
    return paths


def test_run_records_the_verdict_in_the_footer_on_both_reader_paths(runs, capsys):
    capsys.readouterr()
    bad = read_trace(runs["bad"])
    assert bad.footer["check"] == WRONG
    assert read_trace(runs["good"]).footer["check"] == RIGHT
    assert "check" not in read_trace(runs["unchecked"]).footer
    # The verdict raises no version: the file is labelled as one without it.
    assert bad.version == read_trace(runs["unchecked"]).version
    read_trace_tables(runs["bad"], lambda tables: None)  # the fast path takes it too
    assert Replay.open(runs["bad"], cache=False).index.footer["check"] == WRONG


def test_the_verdict_survives_the_index_cache(runs, tmp_path, monkeypatch):
    """The cache finds the footer with the verdict where the writer packed it, keeps the
    index, and the index read back from it has the verdict."""
    from kbdebug.replay import cache as index_cache
    from kbdebug.replay import replay as replay_module

    monkeypatch.setenv("KBDEBUG_CACHE_DIR", str(tmp_path / "cache"))
    Replay.open(runs["bad"])
    index_cache.wait()
    assert len(list((tmp_path / "cache").iterdir())) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("the trace was read, not its cached index")

    monkeypatch.setattr(replay_module, "read_trace_tables", refuse)
    assert Replay.open(runs["bad"]).index.footer["check"] == WRONG


def _old_reader(tmp_path: Path) -> Path:
    """The emulator package at OLD_READER, extracted from git."""
    try:
        data = subprocess.run(
            ["git", "-C", str(ROOT), "archive", OLD_READER, "emulator"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"no git history with {OLD_READER}")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(tmp_path / "old", filter="data")
    return tmp_path / "old"


def test_a_reader_that_does_not_know_the_verdict_opens_the_trace_without_it(runs, tmp_path):
    old = _old_reader(tmp_path)
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "from emulator.trace.reader import read_trace;"
        "t = read_trace(sys.argv[2]);"
        "print(json.dumps([t.truncated, len(t.events), sorted(t.footer)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(old), runs["bad"]],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    truncated, events, keys = json.loads(out)
    assert not truncated and events == len(read_trace(runs["bad"]).events)
    assert keys == sorted(["status", "events", "end_time", "error", "error_loc"])


def test_a_held_footer_is_written_by_close_without_a_verdict_and_finish_adds_it(tmp_path):
    def write(path: Path, verdict) -> dict:
        writer = TraceWriter(path, hold_footer=True)
        header = {"config": {}, "mesh": [1, 1], "channels": [], "launch": {}}
        writer.begin({**header, "launch": {"kernel": "k", "grid": [1], "args": []}})
        writer.end({"status": "ok", "end_time": 0, "error": None, "error_loc": None})
        assert writer.held
        assert read_trace(path).truncated  # everything but the footer is on disk
        if verdict is None:
            writer.close()
        else:
            writer.finish(verdict)
        return read_trace(path).footer

    assert "check" not in write(tmp_path / "closed.kbt", None)
    said = "bad\x1b[31m\nvalue " + "x" * 2000
    footer = write(tmp_path / "checked.kbt", {"ok": False, "message": said, "block": "O[0:8]"})
    check = footer["check"]
    assert check["message"].startswith("bad [31m value x") and "\x1b" not in check["message"]
    assert len(check["message"].encode()) <= 1024 and check["block"] == "O[0:8]"


def test_check_record_refuses_what_is_no_verdict():
    with pytest.raises(TypeError):
        check_record({"ok": "no"})
    with pytest.raises(TypeError):
        check_record({"ok": False, "block": 3})


def test_a_forged_verdict_is_refused_in_one_line(runs, tmp_path, capsys):
    data = Path(runs["bad"]).read_bytes()
    footer = msgpack.packb({**read_trace(runs["bad"]).footer, "error_loc": None})
    assert data.endswith(footer)
    forged = msgpack.packb(
        {**read_trace(runs["bad"]).footer, "error_loc": None, "check": {"ok": 1}}
    )
    path = tmp_path / "forged.kbt"
    path.write_bytes(data[: -len(footer)] + forged)
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "footer check must be" in err and "Traceback" not in err


def test_report_says_the_output_was_wrong_in_text_and_json(runs, capsys):
    capsys.readouterr()
    main(["report", runs["bad"]])
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "status: completed, output check failed (first wrong block O[16:32, :])"
    main(["report", runs["bad"], "--json"])
    assert json.loads(capsys.readouterr().out)["check"] == WRONG
    main(["report", runs["unchecked"], "--json"])
    assert json.loads(capsys.readouterr().out)["check"] is None
    main(["report", runs["unchecked"]])
    assert capsys.readouterr().out.splitlines()[0] == "status: ok"


def test_diff_says_a_s_output_was_wrong_at_the_top(runs, capsys):
    capsys.readouterr()
    assert main(["diff", runs["bad"], runs["good"], "--fail-on-regression"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2:4] == [
        "A: output check failed (first wrong block O[16:32, :])",
        "B: output check passed",
    ]
    main(["diff", runs["bad"], runs["good"], "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (doc["a"]["check"], doc["b"]["check"]) == (WRONG, RIGHT)
    # Two passing runs say nothing of it.
    main(["diff", runs["good"], runs["good"]])
    assert "output check" not in capsys.readouterr().out


def test_a_wrong_output_in_b_is_a_regression_whatever_the_speed(runs, capsys):
    capsys.readouterr()
    assert main(["diff", runs["good"], runs["bad"], "--fail-on-regression", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["regressions"] == ["B's output check failed (first wrong block O[16:32, :])"]
    assert doc["headline"][0]["delta"] == 0  # as fast as A


async def test_the_compare_header_says_which_run_s_output_was_wrong(runs):
    app = CompareApp(Replay.open(runs["bad"]), Replay.open(runs["good"]))
    async with app.run_test(size=(160, 48)) as pilot:
        await settled(pilot)
        header = app.query_one(CompareHeader).render().plain
        assert "A: output check failed (first wrong block O[16:32, :])" in header
        assert "B: output check passed" in header


def test_a_run_that_did_not_finish_records_no_verdict(tmp_path, monkeypatch, capsys):
    """A kernel error is no verdict on the output: the check does not run, the footer
    has no ``check`` (before, a held footer could have let it run on a failed run)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "boom.py").write_text(
        "import numpy as np\n"
        "from emulator import Memory\n"
        "from emulator.scenarios import Scenario\n\n"
        "def kernel(tl, x):\n"
        "    tl.load(x, (4, 4), 'f32')\n"
        "    raise RuntimeError('boom')\n\n"
        "def launch():\n"
        "    mem = Memory(size_bytes=1 << 12)\n"
        "    x = mem.put(np.zeros((4, 4), np.float32))\n\n"
        "    def check(memory):\n"
        "        raise AssertionError('the check ran')\n\n"
        "    return Scenario(kernel=kernel, args=(x,), grid=(1,), memory=mem, check=check)\n"
    )
    assert main(["run", "boom.py:launch", "-o", "boom.kbt", "-q"]) == 1
    footer = read_trace(tmp_path / "boom.kbt").footer
    assert footer["status"] == "error" and "check" not in footer
    assert "the check ran" not in capsys.readouterr().err
