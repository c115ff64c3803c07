"""Safe outputs: `kbdebug run` and `export` never destroy or silently overwrite a file."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from emulator.trace.reader import read_trace
from kbdebug import outputs
from kbdebug.cli import main

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
SMALL = ["decode_blocking", "--set", "n_tiles=2", "-q"]

LAUNCHES = textwrap.dedent(
    """
    from emulator import HardwareConfig, Memory
    from emulator.scenarios import Scenario

    def k(tl):
        tl.zeros((4,))

    def launch_good():
        return Scenario(kernel=k, args=(), grid=(1,), memory=Memory(1024))

    def launch_flawed():
        return Scenario(kernel=k, args=(), grid=(2,), memory=Memory(1024),
                        config=HardwareConfig(mesh_cols=2))

    def launch_refused():  # 4 PEs on a 1x1 mesh: refused before it runs
        return Scenario(kernel=k, args=(), grid=(4,), memory=Memory(1024))
    """
)


@pytest.fixture
def launches(tmp_path) -> Path:
    path = tmp_path / "a.py"
    path.write_text(LAUNCHES)
    return path


def run_kbdebug(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kbdebug", *argv],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        **kwargs,
    )


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".partial" in p.name)


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# --- what a run leaves at OUT ----------------------------------------------------------------


def test_a_refused_launch_leaves_a_previous_trace_and_an_empty_file_as_they_were(
    launches, tmp_path, capsys
):
    good, empty = tmp_path / "good.kbt", tmp_path / "empty.kbt"
    assert main(["run", *SMALL, "-o", str(good)]) == 0
    before = good.read_bytes()
    empty.touch()
    for out in (good, empty):
        assert main(["run", f"{launches}:launch_refused", "-q", "-o", str(out)]) == 2
        assert "nothing ran, no trace written" in capsys.readouterr().err
    assert good.read_bytes() == before
    assert empty.exists() and empty.stat().st_size == 0
    assert leftovers(tmp_path) == []


def test_default_names_keep_each_launch_of_a_file_apart(launches, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", f"{launches}:launch_good", "-q"]) == 0
    assert main(["run", f"{launches}:launch_flawed", "-q"]) == 0
    assert main(["run", *SMALL]) == 0
    assert read_trace(tmp_path / "a.launch_good.kbt").header["launch"]["grid"] == [1]
    assert read_trace(tmp_path / "a.launch_flawed.kbt").header["launch"]["grid"] == [2]
    assert (tmp_path / "decode_blocking.kbt").exists()
    assert not (tmp_path / "a.kbt").exists()


def test_a_file_kbdebug_did_not_write_needs_force(tmp_path, capsys):
    notes = tmp_path / "notes.kbt"
    notes.write_text("my notes\n")
    assert main(["run", *SMALL, "-o", str(notes)]) == 2
    line = one_line(capsys.readouterr().err)
    assert (
        line == f"kbdebug run: {notes} exists and is not a kbdebug trace; use --force to overwrite"
    )
    assert notes.read_text() == "my notes\n"
    # A previous trace is the re-run loop: replaced without asking.
    assert main(["run", *SMALL, "-o", str(notes), "--force"]) == 0
    assert main(["run", "decode_blocking", "--set", "n_tiles=3", "-q", "-o", str(notes)]) == 0
    assert read_trace(notes).header["launch"]["args"][4] == "3"  # n_tiles
    assert leftovers(tmp_path) == []


def test_a_kernel_error_is_still_written_to_out_whole(tmp_path, capsys):
    path = tmp_path / "boom.py"
    path.write_text(
        "from emulator import Memory\nfrom emulator.scenarios import Scenario\n"
        "def k(tl):\n    tl.zeros((4,))\n    raise RuntimeError('boom')\n"
        "def launch():\n    return Scenario(kernel=k, args=(), grid=(1,), memory=Memory(1024))\n"
    )
    out = tmp_path / "boom.kbt"
    assert main(["run", f"{path}:launch", "-q", "-o", str(out)]) == 1
    trace = read_trace(out)
    assert trace.footer["status"] == "error" and "boom" in trace.footer["error"]
    assert leftovers(tmp_path) == []


class _FullDisk(io.RawIOBase):
    """A file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, raw, room: int):
        self.raw, self.room = raw, room

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.raw.write(data)

    def fileno(self) -> int:
        return self.raw.fileno()

    def close(self) -> None:
        self.raw.close()
        super().close()


@pytest.mark.parametrize("room", [0, 2000])  # full at the header, or mid-run
def test_a_full_disk_is_one_line_and_leaves_the_previous_trace(room, tmp_path, monkeypatch, capsys):
    out = tmp_path / "t.kbt"
    assert main(["run", *SMALL, "-o", str(out)]) == 0
    before = out.read_bytes()
    real_fdopen = os.fdopen
    monkeypatch.setattr(
        outputs.os, "fdopen", lambda fd, *a, **k: _FullDisk(real_fdopen(fd, *a, **k), room)
    )
    assert main(["run", "decode_blocking", "--set", "n_tiles=3", "-q", "-o", str(out)]) == 1
    line = one_line(capsys.readouterr().err)
    assert line == f"kbdebug run: cannot write {out}: No space left on device"
    assert out.read_bytes() == before
    assert leftovers(tmp_path) == []


def test_dev_full_is_one_line_exit_1_and_stays_a_device():
    done = run_kbdebug("run", *SMALL, "-o", "/dev/full")
    assert done.returncode == 1
    assert one_line(done.stderr) == "kbdebug run: cannot write /dev/full: No space left on device"
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_fifo_is_written_as_a_stream_and_never_removed(launches, tmp_path):
    fifo = tmp_path / "pipe.kbt"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read_it() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    for argv, status in (((*SMALL,), 0), ((f"{launches}:launch_refused", "-q"), 2)):
        reader = threading.Thread(target=read_it)
        reader.start()
        done = run_kbdebug("run", *argv, "-o", str(fifo))
        reader.join(10)
        assert done.returncode == status, done.stderr
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert read_trace(got[0]).footer["status"] == "ok"
    assert got[1] == b""
    assert leftovers(tmp_path) == []


def test_two_runs_to_one_path_never_interleave(tmp_path):
    out = tmp_path / "same.kbt"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kbdebug",
                "run",
                "decode_prefetch",
                "--set",
                f"n_tiles={n}",
                "--no-check",
                "-q",
                "-o",
                str(out),
            ],
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for n in (500, 501)
    ]
    for proc in procs:
        assert proc.wait(60) == 0, proc.stderr.read()
    trace = read_trace(out)  # whole: one run's trace, not a mix of both
    assert trace.footer["status"] == "ok"
    assert trace.header["launch"]["args"][4] in ("500", "501")  # n_tiles
    assert leftovers(tmp_path) == []


# --- stopped runs ----------------------------------------------------------------------------


def start_big_run(out: Path) -> tuple[subprocess.Popen, Path]:
    """A long run, returned once its partial trace holds some 100 KB."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbdebug", "run", "decode_prefetch", "--set", "n_tiles=50000",
         "--set", "tile=16", "--set", "head_dim=16", "--no-check", "-q", "-o", str(out)],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    partial = out.with_name(f"{out.name}.partial-{proc.pid}")
    deadline = time.monotonic() + 30
    while not (partial.exists() and partial.stat().st_size > 100_000):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("the run wrote no partial trace")
        time.sleep(0.02)
    return proc, partial


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_ends_the_trace_interrupted_and_keeps_out(sig, tmp_path, capsys):
    out = tmp_path / "big.kbt"
    out.write_bytes(b"")  # what was there stays there
    proc, partial = start_big_run(out)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    line = one_line(err)
    assert f"interrupted by {sig.name}" in line and f"in {partial}" in line
    assert out.read_bytes() == b""
    trace = read_trace(partial)
    assert not trace.truncated
    assert trace.footer["status"] == "interrupted"
    assert trace.footer["events"] == len(trace.events) > 1000
    assert main(["report", str(partial)]) == 0
    report = capsys.readouterr().out
    assert f"status: the run did not complete: interrupted by {sig.name}" in report


# --- export ----------------------------------------------------------------------------------


@pytest.fixture
def trace(tmp_path) -> Path:
    path = tmp_path / "run.kbt"
    assert main(["run", *SMALL, "-o", str(path)]) == 0
    return path


def test_export_replaces_its_own_json_but_not_yours(trace, tmp_path, capsys):
    out = tmp_path / "run.json"
    assert main(["export", str(trace)]) == 0
    assert main(["export", str(trace)]) == 0  # its own export: the re-run loop
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"displayTimeUnit": "ns", "otherData": {}, "traceEvents": []}))
    before = mine.read_text()
    capsys.readouterr()
    assert main(["export", str(trace), "-o", str(mine)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line == (
        f"kbdebug export: {mine} exists and is not a kbdebug export; use --force to overwrite"
    )
    assert mine.read_text() == before
    assert main(["export", str(trace), "-o", str(mine), "--force"]) == 0
    assert json.loads(mine.read_text())["otherData"]["kbdebug_version"]
    assert json.loads(out.read_text())["traceEvents"]
    assert leftovers(tmp_path) == []


def test_export_to_a_full_disk_is_one_line_and_leaves_the_previous_json(
    trace, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run.json"
    assert main(["export", str(trace)]) == 0
    before = out.read_bytes()
    real_fdopen = os.fdopen

    def full(fd, mode, **kwargs):
        return io.TextIOWrapper(_FullDisk(real_fdopen(fd, "wb", buffering=0), 100), **kwargs)

    monkeypatch.setattr(outputs.os, "fdopen", full)
    capsys.readouterr()
    assert main(["export", str(trace)]) == 1
    assert one_line(capsys.readouterr().err) == (
        f"kbdebug export: cannot write {out}: No space left on device"
    )
    assert out.read_bytes() == before
    assert leftovers(tmp_path) == []
    assert run_kbdebug("export", str(trace), "-o", "/dev/full").returncode == 1


def test_a_signal_while_the_writer_writes_waits_for_the_write_to_end():
    # Raised mid-write, the KeyboardInterrupt could write a record twice: the trace
    # would then fail its footer's event count.
    from kbdebug.commands.run import _stopped_by_signals

    class Writer:
        writing = True

    writer, reached = Writer(), []
    with pytest.raises(KeyboardInterrupt, match="SIGINT"):
        with _stopped_by_signals(writer):
            signal.raise_signal(signal.SIGINT)
            # Deferred: a retry is armed 10 ms out. The test stops that timer and
            # delivers its SIGALRM itself, so nothing waits on the clock.
            assert 0 < signal.setitimer(signal.ITIMER_REAL, 0)[0] <= 0.01
            signal.raise_signal(signal.SIGALRM)  # still writing: deferred again
            assert 0 < signal.setitimer(signal.ITIMER_REAL, 0)[0] <= 0.01
            reached.append("after the signal, still writing")
            writer.writing = False
            signal.raise_signal(signal.SIGALRM)  # the retry raises here
            reached.append("never")
    assert reached == ["after the signal, still writing"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
