"""Hostile traces: every mutation ends in a correct open or one TraceFormatError, in bounded
time and memory; the commands refuse them in one line without a traceback or an ESC byte."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest
from _shared_fuzz import cases
from trace_synth import every_kind_events, record_run

from emulator.trace.writer import TraceWriter
from kbdebug.cli import main
from kbdebug.safe_text import escape

ROOT = Path(__file__).resolve().parent.parent
#: Cases per seeded batch, each batch run in one subprocess under the limits below.
CASES_PER_BATCH = 150
#: Seeded batches: 4 in CI, more with KBDEBUG_FUZZ_SCALE (see _shared_fuzz).
BATCHES = cases(4)
#: Address space of a batch's process: imports take some 600 MB of it, a trace sized
#: by a hostile id (5e7 ids: 15 GB) would not fit.
MEMORY_LIMIT = 2 << 30
TIME_LIMIT_S = 15.0
NASTY = "\x1b]0;pwned\x07\x1b[2J\x9b\u202e[/b]"


def base_objects() -> list:
    out = io.BytesIO()
    events = every_kind_events()
    # The synthetic run's receive names a future no command issued: make it the recv's.
    record_run(TraceWriter(out), events, status="error", error="boom")
    return list(msgpack.Unpacker(io.BytesIO(out.getvalue()), raw=False, strict_map_key=False))


def pack(objects: list) -> bytes:
    data = b"".join(msgpack.packb(o, use_bin_type=True) for o in objects)
    # msgpack will not pack deep nesting: a placeholder stands for it, replaced here.
    for depth in (200, 1000, 1100):
        data = data.replace(msgpack.packb(f"@deep{depth}"), b"\x91" * depth + b"\x90")
    return data


def _deep(depth: int) -> str:
    """A placeholder ``pack`` turns into ``depth`` nested one-element arrays."""
    return f"@deep{depth}"


WEIRD = [
    -1, -5, -(2**63), 2**63 - 1, 2**64 - 1, 2**53 + 1, 10**18, 50_000_000, 1.5, float("nan"),
    "x", NASTY, None, True, [], {}, [1, [2]], b"\x00",
]  # fmt: skip


def mutate(rng: random.Random, objects: list) -> bytes:
    """One hostile variant of a valid trace's objects (FORMAT.md's layout, nothing else)."""
    objs = [json_copy(o) for o in objects]
    how = rng.choice(
        ["truncate", "flip", "value", "deep", "length", "reorder", "duplicate", "undefined",
         "escape", "drop", "footer"]
    )  # fmt: skip
    if how in ("truncate", "flip", "length"):
        data = bytearray(pack(objs))
        at = rng.randrange(len(data))
        if how == "truncate":
            return bytes(data[:at])
        if how == "flip":
            data[at] ^= 1 << rng.randrange(8)
            return bytes(data)
        # A str32 or array32 header claiming up to 4 GB, where a record starts.
        claim = rng.choice(
            [b"\xdb\xff\xff\xff\xff", b"\xdd\xff\xff\xff\xf0", b"\xdf\x7f\xff\xff\xff"]
        )
        return bytes(data[:at]) + claim + bytes(data[at:])
    records = [i for i, o in enumerate(objs) if isinstance(o, list)]
    i = rng.choice(records)
    record = objs[i]
    if how == "value" and len(record) > 1:
        record[rng.randrange(1, len(record))] = rng.choice(WEIRD)
    elif how == "deep":
        record[rng.randrange(len(record))] = _deep(rng.choice([200, 1000, 1100]))
    elif how == "reorder":
        j = rng.choice(records)
        objs[i], objs[j] = objs[j], objs[i]
    elif how == "duplicate":
        objs.insert(i, json_copy(record))
    elif how == "undefined" and len(record) > 3:
        record[rng.randrange(3, len(record))] = rng.choice([7, 99, 10_000])
    elif how == "escape":
        for o in objs:
            if isinstance(o, list) and o and o[0] in (0, 100, 101):
                o[1] = NASTY + str(o[1])
        objs[-1]["error"] = NASTY
        objs[0]["launch"]["kernel"] = NASTY
        objs[0]["channels"][0]["name"] = NASTY
    elif how == "drop":
        del objs[i]
    elif how == "footer":
        objs[-1][rng.choice(list(objs[-1]))] = rng.choice(WEIRD)
    return pack(objs)


def json_copy(value):
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    return value


# Run in a child process: open each case as every command does, then compute what report
# shows; print one JSON line of outcomes.
CHILD = r"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from emulator.trace.errors import TraceFormatError
from kbdebug.replay import Replay
from kbdebug.analysis.summary import futures_table, summarize
counts = {{"ok": 0, "refused": 0}}
bad = []
for path in sys.argv[1:]:
    try:
        replay = Replay.open(path)
        summary = summarize(replay)
        rows = futures_table(replay)
    except TraceFormatError as e:
        counts["refused"] += 1
        if "\n" in str(e) or "\x1b" in str(e) and "\x1b" not in path:
            bad.append((path, "message: " + repr(str(e))[:200]))
        continue
    except BaseException as e:
        bad.append((path, type(e).__name__ + ": " + str(e)[:200]))
        continue
    counts["ok"] += 1
    # What a user would see as wrong: negative or overflowed numbers, times out of order.
    numbers = [summary.stall_cycles, summary.end_time, *(c.busy_cycles for c in summary.channels)]
    if min(numbers, default=0) < 0:
        bad.append((path, f"negative figure in {{numbers}}"))
    for row in rows:
        steps = [t for t in (row.issued, row.granted, row.done) if t is not None]
        if steps != sorted(steps) or row.stall < 0:
            bad.append((path, f"future {{row.id}} out of order: {{row}}"))
print(json.dumps({{"counts": counts, "bad": bad}}))
"""


@pytest.mark.parametrize("seed", range(BATCHES))
def test_hostile_traces_open_correctly_or_are_refused_in_bounded_time_and_memory(tmp_path, seed):
    rng = random.Random(seed)
    objects = base_objects()
    paths = []
    for n in range(CASES_PER_BATCH):
        path = tmp_path / f"case{n}.kbt"
        path.write_bytes(mutate(rng, objects))
        paths.append(str(path))
    script = CHILD.format(limit=MEMORY_LIMIT)
    result = subprocess.run(
        [sys.executable, "-c", script, *paths],
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT_S,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    outcome = json.loads(result.stdout)
    assert outcome["bad"] == []
    assert sum(outcome["counts"].values()) == CASES_PER_BATCH
    # Both ends are exercised: some variants stay valid, most are refused.
    assert outcome["counts"]["refused"] > CASES_PER_BATCH // 4


def hostile_files(tmp_path: Path) -> dict[str, Path]:
    """A few files that broke the commands before, by what they are."""
    objects = base_objects()
    files = {}

    def write(name: str, objs: list) -> None:
        files[name] = tmp_path / f"{name}.kbt"
        files[name].write_bytes(pack(objs))

    big = [json_copy(o) for o in objects]
    issue = next(o for o in big if isinstance(o, list) and o[0] == 4)
    issue[3] = 50_000_000
    write("huge_id", big)
    deep = [json_copy(o) for o in objects]
    deep[0]["version"] = _deep(1000)
    write("deep", deep)
    stall = [json_copy(o) for o in objects]
    wait_end = next(o for o in stall if isinstance(o, list) and o[0] == 10)
    wait_end[4] = 2**62
    write("stall", stall)
    escaped = [json_copy(o) for o in objects]
    escaped.insert(1, [42, 0, 0])  # an unknown kind after strings full of escapes
    escaped[0]["launch"]["kernel"] = NASTY
    write("escape\x1b[2J", escaped)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    files["fifo"] = fifo
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    files["loop"] = loop
    return files


def command_argv(command: str, path: Path, tmp_path: Path) -> list[str]:
    if command == "report":
        return ["report", str(path)]
    if command == "export":
        return ["export", str(path), "-o", str(tmp_path / "out.json")]
    return ["diff", str(ROOT / "traces" / "decode_blocking.kbt"), str(path)]


def run_command(command: str, path: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """The command in its own process, as a user runs it: its exit code and both streams."""
    return subprocess.run(
        [sys.executable, "-m", "kbdebug", *command_argv(command, path, tmp_path)],
        capture_output=True,
        timeout=20,
        cwd=ROOT,
    )


def run_in_process(command: str, path: Path, tmp_path: Path, capsys) -> subprocess.CompletedProcess:
    """The command through kbdebug.cli.main in this process (an exception escaping it fails
    the test, as a traceback would); the same result as run_command, without a new
    interpreter's start-up."""
    capsys.readouterr()
    status = main(command_argv(command, path, tmp_path))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess([command], status, out.encode(), err.encode())


def assert_refused_in_one_line(result: subprocess.CompletedProcess, name: str) -> None:
    assert result.returncode == 2, (name, result.stderr[-1000:])
    assert b"Traceback" not in result.stderr, name
    assert len(result.stderr.strip().splitlines()) == 1, (name, result.stderr)
    assert b"\x1b" not in result.stdout + result.stderr, (name, result.stderr)


# Every file through report in its own process (exit code, stderr as a terminal gets it);
# three through export and diff in this process (an interpreter's start-up each saved), but
# for export's FIFO, which would block this process if it were opened.
@pytest.mark.parametrize(
    ("command", "names"),
    [
        ("report", ("huge_id", "escape\x1b[2J", "fifo", "loop")),
        ("export", ("huge_id", "escape\x1b[2J", "fifo")),
        ("diff", ("deep", "escape\x1b[2J", "stall")),
    ],
)
def test_commands_refuse_hostile_files_in_one_line(tmp_path, capsys, command, names):
    files = hostile_files(tmp_path)
    for name in names:
        if command == "report" or name == "fifo":
            result = run_command(command, files[name], tmp_path)
        else:
            result = run_in_process(command, files[name], tmp_path, capsys)
        assert_refused_in_one_line(result, name)


def test_export_refuses_a_symlink_loop_in_one_line(tmp_path):
    assert_refused_in_one_line(
        run_command("export", hostile_files(tmp_path)["loop"], tmp_path), "loop"
    )


def test_escape_shows_control_characters_and_bounds_length():
    assert escape("a\x1b[2Jb\x07") == "a\\x1b[2Jb\\x07"
    assert escape("\x9b\x7f") == "\\x9b\\x7f"
    assert escape("\u202e") == "\\u202e"
    assert escape("x" * 10, limit=4) == "xxxx…"
    assert escape("plain [/b] text") == "plain [/b] text"


def test_op_counts_compare_strings_by_text_not_by_id(tmp_path):
    # Two ids for each of "memory" and "dma_read": both pairs count.
    objs = base_objects()
    footer = objs.pop()
    n = len([o for o in objs if isinstance(o, list) and o[0] == 0])
    objs += [[0, "memory"], [0, "dma_read"], [11, 0, 0, n, n + 1]]
    footer["events"] += 1
    path = tmp_path / "twice.kbt"
    path.write_bytes(pack([*objs, footer]))
    from kbdebug.analysis.summary import summarize
    from kbdebug.replay import Replay

    assert summarize(Replay.open(path)).counts["dma_read_count"] == 2
