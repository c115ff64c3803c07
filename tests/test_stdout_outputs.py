"""`-o -` and `-o /dev/stdout`: run and export write their stream to stdout (a pipe, a file, a
FIFO; a terminal only for export's JSON), every status line to stderr, and a reader that goes
away early ends the command with one line and exit 1."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from emulator.trace.reader import read_trace

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
KBDEBUG = [sys.executable, "-m", "kbdebug"]
SMALL = ["decode_blocking", "--set", "n_tiles=2"]
STDOUTS = ["-", "/dev/stdout"]


def kbdebug(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    """kbdebug's stdout and stderr through two pipes, as bytes."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([*KBDEBUG, *argv], env=ENV, timeout=120, **kwargs)


def no_traceback(err: bytes) -> str:
    text = err.decode()
    assert "Traceback" not in text and "Exception ignored" not in text, text
    return text


@pytest.fixture
def trace(tmp_path) -> Path:
    path = tmp_path / "prefill.kbt"
    shutil.copy(ROOT / "traces" / "prefill.kbt", path)
    return path


# --- into a pipe -----------------------------------------------------------------------------


@pytest.mark.parametrize("out", STDOUTS)
def test_export_to_stdout_is_the_json_alone(trace, out):
    done = kbdebug("export", str(trace), "-o", out)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)  # nothing but the JSON on stdout
    assert doc["otherData"]["kbdebug_version"]
    err = no_traceback(done.stderr)
    name = "stdout" if out == "-" else out
    assert f"wrote {name} (" in err and "open it in" in err
    assert sorted(p.name for p in trace.parent.iterdir()) == ["prefill.kbt"]  # no file "-"


@pytest.mark.parametrize("out", STDOUTS)
def test_run_to_stdout_is_the_trace_alone(tmp_path, out):
    done = kbdebug("run", *SMALL, "-o", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    trace = read_trace(done.stdout)  # the bytes parse whole: no status line among them
    assert trace.footer["status"] == "ok"
    err = no_traceback(done.stderr)
    name = "stdout" if out == "-" else out
    assert f"trace:  {name} (" in err and "end:" in err and "check:" in err
    assert "next:" not in err  # nothing to open by name
    assert list(tmp_path.iterdir()) == []  # no partial file, no file named "-"


def test_run_into_a_pipe_then_report(tmp_path):
    """`kbdebug run decode_prefetch -o - > x.kbt`, then `kbdebug report x.kbt`."""
    path = tmp_path / "x.kbt"
    with open(path, "wb") as f:
        done = kbdebug("run", "decode_prefetch", "-o", "-", stdout=f, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.kbt"]
    report = kbdebug("report", str(path), "--json")
    assert report.returncode in (0, 1), report.stderr  # 1: findings, not a failure to read
    assert json.loads(report.stdout)["status"] == "ok"


def test_run_piped_into_export_through_a_file(tmp_path):
    """The stream written to a pipe is the same trace -o FILE writes."""
    piped = kbdebug("run", *SMALL, "-o", "-", cwd=tmp_path)
    kbdebug("run", *SMALL, "-o", "file.kbt", cwd=tmp_path)
    assert piped.stdout == (tmp_path / "file.kbt").read_bytes()


# --- a reader that goes away: a broken pipe --------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "decode_prefetch", "--set", "n_tiles=3000", "--no-check", "-o", "-"],
        ["export", str(ROOT / "traces" / "prefill.kbt"), "-o", "-"],  # some 270 KB of JSON
    ],
    ids=["run", "export"],
)
def test_a_broken_pipe_is_one_line_and_exit_1(argv):
    """`kbdebug ... -o - | head -c 10`."""
    proc = subprocess.Popen(
        [*KBDEBUG, *argv], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    head = proc.stdout.read(10)
    proc.stdout.close()  # what head does after 10 bytes
    err = proc.stderr.read()
    assert proc.wait(60) == 1
    assert len(head) == 10
    lines = no_traceback(err).strip().splitlines()
    assert lines[-1] == f"kbdebug {argv[0]}: cannot write stdout: Broken pipe"
    assert all(line.startswith(("setup:", "kbdebug ")) for line in lines), lines


# --- a FIFO ----------------------------------------------------------------------------------


def read_fifo(fifo: Path, got: list[bytes]) -> threading.Thread:
    def read_it() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read_it)
    reader.start()
    return reader


@pytest.mark.parametrize("out", ["/dev/stdout", "-", "FIFO"])
def test_stdout_on_a_fifo_carries_the_stream_and_no_status_line(trace, tmp_path, out):
    """`kbdebug run ... -o /dev/stdout > FIFO` (and -o FIFO > FIFO): the status lines used to
    go into the FIFO with the trace."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    target = str(fifo) if out == "FIFO" else out
    for argv in (["run", *SMALL, "-o", target], ["export", str(trace), "-o", target]):
        got: list[bytes] = []
        reader = read_fifo(fifo, got)
        with open(fifo, "wb") as w:  # opens once the reader has
            done = kbdebug(*argv, stdout=w, cwd=tmp_path)
        reader.join(30)
        assert done.returncode == 0, done.stderr
        err = no_traceback(done.stderr)
        if argv[0] == "run":
            assert read_trace(got[0]).footer["status"] == "ok"
            assert "trace:  " in err
        else:
            assert json.loads(got[0])["traceEvents"]
            assert "wrote " in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "prefill.kbt"]


# --- a file, a terminal, a closed stdout -----------------------------------------------------


@pytest.mark.parametrize("out", STDOUTS)
def test_stdout_redirected_to_a_file_gets_the_stream_alone(tmp_path, out):
    """`kbdebug run ... -o /dev/stdout > x.kbt`: written through stdout, not renamed over it."""
    path = tmp_path / "x.kbt"
    with open(path, "wb") as f:
        done = kbdebug("run", *SMALL, "-o", out, stdout=f, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert read_trace(path).footer["status"] == "ok"
    assert "trace:  " in no_traceback(done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.kbt"]


def test_export_to_stdout_appended_to_its_own_trace_is_refused(trace):
    """`kbdebug export T.kbt -o - >> T.kbt` would append the JSON to the trace."""
    before = trace.read_bytes()
    with open(trace, "ab") as f:
        done = kbdebug("export", str(trace), "-o", "-", stdout=f)
    assert done.returncode == 2
    assert no_traceback(done.stderr).strip() == (
        "kbdebug export: stdout: the output would overwrite the trace"
    )
    assert trace.read_bytes() == before


@pytest.mark.parametrize("out", [*STDOUTS, "TTY"])
def test_a_terminal_is_refused_for_the_trace_in_one_line(tmp_path, out):
    master, slave = pty.openpty()
    try:
        target = os.ttyname(slave) if out == "TTY" else out
        done = kbdebug("run", *SMALL, "-o", target, stdout=slave, cwd=tmp_path)
    finally:
        os.close(slave)
        os.close(master)
    assert done.returncode == 2
    name = "stdout" if out == "-" else target
    assert no_traceback(done.stderr).strip() == (
        f"kbdebug run: {name} is a terminal, and a kbdebug trace is binary: "
        "redirect it to a file (> OUT) or pipe it"
    )
    assert list(tmp_path.iterdir()) == []


def test_export_writes_its_json_to_a_terminal(trace):
    master, slave = pty.openpty()
    got = bytearray()

    def drain() -> None:  # a terminal holds a few KB: read while export writes
        while True:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: the slave is closed
                return
            if not chunk:
                return
            got.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        done = kbdebug("export", str(trace), "-o", "-", stdout=slave)
    finally:
        os.close(slave)
        reader.join(30)
        os.close(master)
    assert done.returncode == 0, done.stderr
    assert got.startswith(b'{"displayTimeUnit"')
    assert "wrote stdout (" in no_traceback(done.stderr)


@pytest.mark.parametrize("command", ["run", "export"])
def test_a_closed_stdout_is_one_line(trace, command):
    argv = [*SMALL] if command == "run" else [str(trace)]
    done = subprocess.run(
        [*KBDEBUG, command, *argv, "-o", "-"],
        env=ENV,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        close_fds=True,
        timeout=60,
        preexec_fn=lambda: os.close(1),
    )
    assert done.returncode == 2
    assert no_traceback(done.stderr).strip() == (
        f"kbdebug {command}: cannot write stdout: stdout is closed"
    )


# --- other descriptors: /dev/fd/N of a pipe (bash's >(...)) ----------------------------------


def test_dev_fd_of_a_pipe_is_written_as_a_stream(tmp_path):
    """`kbdebug run ... -o >(cat > x.kbt)` names /dev/fd/63, a pipe realpath cannot name."""
    r, w = os.pipe()
    got: list[bytes] = []

    def read_it() -> None:
        with open(r, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read_it)
    reader.start()
    try:
        done = kbdebug("run", *SMALL, "-o", f"/dev/fd/{w}", pass_fds=(w,), cwd=tmp_path)
    finally:
        os.close(w)
        reader.join(30)
    assert done.returncode == 0, done.stderr
    assert read_trace(got[0]).footer["status"] == "ok"
    assert f"trace:  /dev/fd/{w} (" in done.stdout.decode()  # stdout is not the output here
    assert list(tmp_path.iterdir()) == []


def test_a_file_holding_a_closed_stdouts_descriptor_is_never_written(trace, tmp_path):
    """Descriptor 1 closed at start-up, then taken by a file the process opens (the index
    cache, the trace): `-o -` must still say stdout is closed, never write into that file
    (it wrote the whole export into it and exited 0)."""
    victim = tmp_path / "victim.txt"
    code = (
        "import sys; f = open(sys.argv[1], 'w'); "
        "from kbdebug.cli import main; sys.exit(main(sys.argv[2:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(victim), "export", str(trace), "-o", "-"],
        env=ENV,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        close_fds=True,
        timeout=60,
        preexec_fn=lambda: os.close(1),
    )
    assert done.returncode == 2
    assert (
        no_traceback(done.stderr).strip() == "kbdebug export: cannot write stdout: stdout is closed"
    )
    assert victim.read_bytes() == b""
