"""The index cache is never wrong, never hangs, never kills: a trace changed in any way is
read again; a forged or damaged cache file is rebuilt, never trusted, in time bounded by
the trace; a cache file cut or rewritten while an index from it is in use changes nothing;
a FIFO, a device or a symbolic link at a cache file's name is never opened as one; and
only files kbdebug wrote are ever removed."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from cache_forge import claim_length, forge, forge_map
from trace_synth import decode_like_events, record_run

from emulator.trace.schema import Kind
from emulator.trace.writer import TraceWriter
from kbdebug.replay import Replay, cache_files
from kbdebug.replay import cache as index_cache
from kbdebug.replay import replay as replay_module

ROOT = Path(__file__).resolve().parent.parent


def trace_bytes(events) -> bytes:
    out = io.BytesIO()
    record_run(TraceWriter(out), events)
    return out.getvalue()


EVENTS = decode_like_events(2000)
SMALL = trace_bytes(EVENTS)


@pytest.fixture(autouse=True)
def synchronous_writes(monkeypatch):
    """Index files written before Replay.open returns (see test_replay_cache)."""
    monkeypatch.setattr(index_cache, "save_in_background", index_cache.save)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("KBDEBUG_CACHE_DIR", str(directory))
    return directory


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "run.kbt"
    path.write_bytes(SMALL)
    return path


def key_of(path) -> index_cache.TraceKey:
    fd = os.open(path, os.O_RDONLY)
    try:
        return index_cache.trace_key(fd)
    finally:
        os.close(fd)


def load(directory, path):
    """The index of the trace at ``path`` from the cache, or None (nothing else happens)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return index_cache.lookup(directory, fd)[0]
    finally:
        os.close(fd)


def index_file(directory) -> Path:
    (path,) = sorted(directory.glob("*.kbi"))
    return path


def same_index(a: Replay, b: Replay) -> None:
    assert a.n_events == b.n_events and a.end_time == b.end_time and a.status == b.status
    for table in ("columns", "commands", "futures", "live_table"):
        for name, array in vars(getattr(a.index, table)).items():
            other = getattr(getattr(b.index, table), name)
            assert array.dtype == other.dtype and np.array_equal(array, other), (table, name)
    for name in ("header", "footer", "truncated", "sources", "strings", "locs", "shapes"):
        assert getattr(a.index, name) == getattr(b.index, name), name
    for i in (0, a.n_events // 2, a.n_events - 1):
        assert a.describe(i) == b.describe(i)


def total_stall(replay: Replay) -> int:
    return int(replay.index.futures.stall.sum())


# --- a trace changed in any way is read again -------------------------------------------


def edited_in_the_middle(events, data: bytes) -> tuple[list, bytes]:
    """``events`` with one stall, past the first and before the last 64 KiB, one cycle
    shorter, and the trace of them: as long as ``data``, differing only there."""
    for i in range(len(events) // 2, len(events)):
        event = events[i]
        if event[0] == Kind.WAIT_END and event[4] > 300:
            edited = [*events[:i], (*event[:4], event[4] - 1), *events[i + 1 :]]
            break
    out = trace_bytes(edited)
    assert len(out) == len(data) and out != data
    changed = [at for at in range(len(data)) if out[at] != data[at]]
    assert 1 << 16 < changed[0] and changed[-1] < len(data) - (1 << 16), changed
    return edited, out


def test_a_trace_edited_in_place_keeping_its_size_and_time_is_read_again(cache, tmp_path, capsys):
    events = decode_like_events(60000)
    original = trace_bytes(events)
    _, edited = edited_in_the_middle(events, original)
    path = tmp_path / "big.kbt"
    path.write_bytes(original)
    before = Replay.open(path)
    stat = path.stat()
    with open(path, "r+b") as out:  # the same inode, written in place
        out.write(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert path.stat().st_ino == stat.st_ino
    again = Replay.open(path)
    assert total_stall(again) == total_stall(before) - 1
    same_index(again, Replay.open(path, cache=False))
    # What `kbdebug report` shows is the edited trace's stall, from the cache rewritten.
    from kbdebug.cli import main

    assert main(["report", str(path), "--json"]) == 0
    assert f'"stall_cycles": {total_stall(before) - 1}' in capsys.readouterr().out


# --- a forged cache file is rebuilt, never trusted ---------------------------------------


def events_of(arrays, kind: Kind) -> np.ndarray:
    return np.flatnonzero(arrays["c.kind"] == kind)


def set_at(arrays, column: str, kind: Kind, value: int, which: int = 0) -> None:
    arrays[f"c.{column}"][events_of(arrays, kind)[which]] = value


def swap_request_and_grant(arrays) -> None:
    first = events_of(arrays, Kind.CHAN_REQUEST)[0]
    grant = events_of(arrays, Kind.CHAN_GRANT)
    cmd = arrays["c.cmd"]
    paired = grant[cmd[grant] == cmd[first]][0]
    kinds = arrays["c.kind"]
    kinds[first], kinds[paired] = kinds[paired], kinds[first]


def later_times(arrays) -> None:
    arrays["c.time"] += 10**6  # the events now end after the footer's end time


FORGERIES = {
    "events-on-PE-60000": lambda m, a: a["c.pe"].__setitem__(events_of(a, Kind.ISSUE)[:5], 60000),
    "channel-outside-the-header": lambda m, a: set_at(a, "chan", Kind.CHAN_REQUEST, 999),
    "string-never-defined": lambda m, a: set_at(a, "op", Kind.ISSUE, 10**6),
    "loc-never-defined": lambda m, a: set_at(a, "loc", Kind.WAIT_BEGIN, 10**6),
    "command-id-past-the-events": lambda m, a: set_at(a, "cmd", Kind.CHAN_GRANT, 10**6),
    "wait-on-no-future": lambda m, a: set_at(a, "fut", Kind.WAIT_BEGIN, -1),
    "field-its-kind-lacks": lambda m, a: set_at(a, "chan", Kind.ISSUE, 0),
    "negative-byte-count": lambda m, a: set_at(a, "nbytes", Kind.ISSUE, -5),
    "stall-longer-than-its-wait": lambda m, a: set_at(a, "val", Kind.WAIT_END, 10**8),
    "time-going-back": lambda m, a: a["c.time"].__setitem__(len(a["c.time"]) // 2, -1),
    "time-past-the-limit": lambda m, a: a["c.time"].__setitem__(-1, 2**53 + 1),
    "events-after-the-end-time": lambda m, a: later_times(a),
    "unknown-kind": lambda m, a: a["c.kind"].__setitem__(7, 99),
    "compound-code-as-a-kind": lambda m, a: a["c.kind"].__setitem__(7, 19),
    "command-issued-twice": lambda m, a: set_at(a, "cmd", Kind.ISSUE, 0, which=1),
    "grant-before-its-request": lambda m, a: swap_request_and_grant(a),
    "address-below-minus-one": lambda m, a: a["i.addr"].__setitem__(0, -5),
    "shape-never-seen": lambda m, a: a["i.shape"].__setitem__(0, 99),
    "dtype-never-defined": lambda m, a: a["i.dtype"].__setitem__(0, 10**6),
    "blocking-neither-true-nor-false": lambda m, a: a["i.blocking"].__setitem__(0, 2),
    "issue-fields-short": lambda m, a: a.__setitem__("i.addr", a["i.addr"][:-1]),
    "one-event-fewer": lambda m, a: a.update({k: v[:-1] for k, v in a.items() if k[0] == "c"}),
    "kinds-as-int16": lambda m, a: a.__setitem__("c.kind", a["c.kind"].astype(np.int16)),
    "string-not-a-string": lambda m, a: m["strings"].__setitem__(0, 5),
    "string-past-its-limit": lambda m, a: m["strings"].__setitem__(0, "x" * 70000),
    "loc-chain-deeper-than-its-id": lambda m, a: m["locs"].__setitem__(0, m["locs"][0] * 4),
    "negative-shape": lambda m, a: m["shapes"].__setitem__(0, [-1]),
    "shape-twice": lambda m, a: m["shapes"].append(m["shapes"][0]),
    "header-length": lambda m, a: m.__setitem__("header_len", m["header_len"] + 1),
    "footer-length": lambda m, a: m.__setitem__("footer_len", m["footer_len"] - 1),
    "claims-the-trace-is-cut": lambda m, a: m.update(footer_len=None, truncated_at=100),
    "another-traces-hash": lambda m, a: m.__setitem__("content", "0" * 64),
    "arrays-in-another-order": lambda m, a: m["arrays"].reverse(),
    "more-events-than-the-trace-holds": lambda m, a: a.update(
        {k: np.resize(v, len(v) * 3) for k, v in a.items() if k[0] == "c"}
    ),
}


@pytest.mark.parametrize("how", list(FORGERIES), ids=list(FORGERIES))
def test_a_forged_cache_file_is_rebuilt_never_trusted(cache, trace, monkeypatch, how):
    expected = Replay.open(trace, cache=False)
    Replay.open(trace)
    forge(index_file(cache), FORGERIES[how])
    assert load(cache, trace) is None
    start = time.perf_counter()
    same_index(Replay.open(trace), expected)
    assert time.perf_counter() - start < 5
    # Rebuilt: the next open reads it back.
    assert load(cache, trace) is not None


def test_the_end_time_and_status_are_always_the_traces_own(cache, trace):
    expected = Replay.open(trace, cache=False)
    Replay.open(trace)
    # A map that carries a footer of its own (as format 2 did) changes nothing: the
    # footer is read from the trace.
    fake = {"status": "deadlock", "events": 1, "end_time": 7, "error": "x", "error_loc": None}
    forge(index_file(cache), lambda m, a: m.update(footer=fake, truncated=True, header={}))
    index = load(cache, trace)
    assert index is not None
    assert index.footer == expected.index.footer and index.end_time == expected.end_time
    assert index.header == expected.index.header


def peak_resident_growth(action: Callable[[], object]) -> int:
    """Bytes the process's peak resident set grew by while ``action()`` ran (Linux: the
    peak is reset first). The cache reads arrays into anonymous memory of its own, which
    tracemalloc does not see."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # resets the peak (VmHWM) to what is resident now

    def resident(field: str) -> int:
        with open("/proc/self/status") as status:
            (line,) = (line for line in status if line.startswith(field + ":"))
        return int(line.split()[1]) * 1024

    before = resident("VmRSS")
    action()
    return resident("VmHWM") - before


def test_a_forged_file_claiming_a_gib_of_arrays_is_refused_before_it_is_read(cache, trace):
    expected = Replay.open(trace, cache=False)
    Replay.open(trace)
    # The map claims 1 GiB of event kinds (the trace holds 2,000 events), the other arrays
    # placed past them and the file as long as that says (sparse): only the bound of an
    # array by its trace stands between this file and a 1 GiB read. 1 GiB, not more, so
    # that without that bound the read would happen here, not fail for want of memory.
    forge_map(index_file(cache), lambda meta, _: claim_length(meta, "c.kind", 1 << 30))
    assert index_file(cache).stat().st_size > 1 << 30
    opened = []
    grew = peak_resident_growth(lambda: opened.append(Replay.open(trace)))
    assert grew < 128 << 20, f"the open grew the resident set by {grew:,} bytes"
    same_index(opened[0], expected)
    assert index_file(cache).stat().st_size < 1 << 20  # rebuilt


# --- a cache file changed while its index is in use changes nothing ----------------------

TOUCH_EVERYTHING = """
import os, sys
import numpy as np
sys.path.insert(0, {root!r})
import kbdebug.replay.replay as replay_module
from kbdebug.replay import Replay
replay_module.read_trace_tables = None  # an open that reads the trace fails
trace, index_file, how = sys.argv[1:]
replay = Replay.open(trace)
if how == "truncated":  # `: > file`
    open(index_file, "w").close()
else:  # `cp other file`: cut, then written over
    with open(index_file, "r+b") as out:
        out.truncate(0)
        out.write(b"not an index" * 100)
total = 0
index = replay.index
for table in (index.columns, index.commands, index.futures, index.live_table):
    for array in vars(table).values():
        total += int(np.asarray(array, dtype=np.int64).sum())
for position in range(0, replay.n_events, 97):
    replay.seek(position)
print("ok", total)
"""


@pytest.mark.parametrize("how", ["truncated", "copied-over"])
def test_a_cache_file_cut_while_its_index_is_in_use_kills_nothing(cache, trace, how):
    Replay.open(trace)
    script = TOUCH_EVERYTHING.format(root=str(ROOT))
    env = {**os.environ, "KBDEBUG_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(trace), str(index_file(cache)), how],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.startswith("ok ")


def test_a_cache_file_cut_while_it_is_read_is_ignored(cache, trace, monkeypatch):
    expected = Replay.open(trace, cache=False)
    Replay.open(trace)
    path = index_file(cache)
    read_arrays = index_cache._read_arrays

    def cut_first(fd, *args):
        os.truncate(path, 100)
        return read_arrays(fd, *args)

    monkeypatch.setattr(index_cache, "_read_arrays", cut_first)
    assert load(cache, trace) is None
    monkeypatch.setattr(index_cache, "_read_arrays", read_arrays)
    same_index(Replay.open(trace), expected)
    assert load(cache, trace) is not None


# --- only regular files of ours are read; nothing blocks ---------------------------------


def opens_within(trace, seconds: float = 10) -> Replay:
    """Replay.open(trace), failing the test if it takes longer than ``seconds``."""
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(replay=Replay.open(trace)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the open hung"
    return result["replay"]


def cache_name(trace) -> str:
    return index_cache.file_name(key_of(trace))


@pytest.mark.parametrize("what", ["fifo", "symlink-to-fifo", "symlink-to-dev-zero"])
def test_a_fifo_or_device_at_the_cache_files_name_blocks_nothing(cache, trace, tmp_path, what):
    expected = Replay.open(trace, cache=False)
    cache.mkdir()
    name = cache / cache_name(trace)
    if what == "fifo":
        os.mkfifo(name)
    elif what == "symlink-to-fifo":
        os.mkfifo(tmp_path / "fifo")
        name.symlink_to(tmp_path / "fifo")
    else:
        name.symlink_to("/dev/zero")
    same_index(opens_within(trace), expected)
    # Written over it: the next open reads the index back.
    assert name.is_file() and not name.is_symlink()
    assert load(cache, trace) is not None


def test_a_symlink_at_the_cache_files_name_is_not_followed(cache, trace, tmp_path, monkeypatch):
    expected = Replay.open(trace, cache=False)
    Replay.open(trace)
    # A good index file, but outside the folder, linked to from the cache file's name.
    outside = tmp_path / "elsewhere.kbi"
    index_file(cache).rename(outside)
    kept = outside.read_bytes()
    (cache / cache_name(trace)).symlink_to(outside)
    assert load(cache, trace) is None
    same_index(opens_within(trace), expected)
    assert outside.read_bytes() == kept  # the link was replaced, not what it points to
    assert not (cache / cache_name(trace)).is_symlink()


def test_a_cache_file_others_can_write_is_not_read(cache, trace):
    Replay.open(trace)
    path = index_file(cache)
    path.chmod(0o666)
    assert load(cache, trace) is None
    Replay.open(trace)
    assert index_file(cache).stat().st_mode & 0o077 == 0
    assert load(cache, trace) is not None


def test_a_directory_at_the_cache_files_name_means_no_cache(cache, trace):
    expected = Replay.open(trace, cache=False)
    (cache / cache_name(trace)).mkdir(parents=True)
    for _ in range(2):
        same_index(opens_within(trace), expected)
    assert (cache / cache_name(trace)).is_dir()
    assert not list(cache.glob(".kbi-*"))


# --- only files kbdebug wrote are removed -----------------------------------------------


def test_pruning_removes_only_index_files_kbdebug_wrote(cache, tmp_path, monkeypatch):
    cache.mkdir()
    old = time.time() - 30 * 24 * 3600
    foreign = {
        "notes.kbi": b"a user's file",
        "fe00-1-" + "0" * 24 + ".kbi": b"named as ours, not ours",
        ".tmp-mine": b"another program's temporary file",
        ".tmp-abcdefgh.part": b"named as kbdebug 0.1's, not one",
        ".kbi-elsewhere-123-0badc0de.part": b"named as ours, not ours",
    }
    for name, data in foreign.items():
        (cache / name).write_bytes(data)
        os.utime(cache / name, (old, old))
    outside = tmp_path / "outside.kbi"
    outside.write_bytes(index_cache.MAGIC + b"looks like an index")
    (cache / ("fe00-2-" + "1" * 24 + ".kbi")).symlink_to(outside)
    monkeypatch.setenv("KBDEBUG_CACHE_MAX_MB", "0")
    for i in range(3):
        path = tmp_path / f"run{i}.kbt"
        path.write_bytes(SMALL)
        Replay.open(path)
    # Of ours, only the newest is left; nothing else was touched.
    for name, data in foreign.items():
        assert (cache / name).read_bytes() == data, name
    assert outside.exists() and (cache / ("fe00-2-" + "1" * 24 + ".kbi")).is_symlink()
    ours = [f for f in cache.glob("*.kbi") if not f.is_symlink() and f.name not in foreign]
    assert [f.name for f in ours] == [index_cache.file_name(key_of(tmp_path / "run2.kbt"))]


KILLED_WRITE = """
import os, signal, sys
from collections.abc import Callable
from pathlib import Path
sys.path.insert(0, {root!r})
from kbdebug.replay import cache, cache_files
fd, path = cache_files.create_temp(Path(sys.argv[1]))
os.write(fd, cache.MAGIC + b"half an index")
print(path, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_writes_leftover_is_removed_at_the_next_open(cache, trace, monkeypatch):
    Replay.open(trace)
    script = KILLED_WRITE.format(root=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", script, str(cache)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -signal.SIGKILL
    leftover = Path(done.stdout.strip())
    assert leftover.exists() and leftover.parent == cache
    # A write in progress (this process's own) is left alone.
    fd, writing = cache_files.create_temp(cache)
    os.write(fd, index_cache.MAGIC)
    os.close(fd)
    monkeypatch.setattr(
        replay_module, "read_trace_tables", lambda *a, **k: pytest.fail("the trace was read")
    )
    Replay.open(trace)  # from the cache: the leftover goes even so
    assert not leftover.exists() and writing.exists()


def test_a_leftover_of_another_host_or_of_kbdebug_0_1_goes_after_an_hour(cache, trace):
    cache.mkdir()
    old = time.time() - cache_files.STALE_TEMP_SECONDS - 60
    names = {
        "stale-other-host": ".kbi-otherhost-123-0badc0de.part",
        "fresh-other-host": ".kbi-otherhost-124-0badc0de.part",
        "stale-0.1": ".tmp-abc_defg.part",
        "fresh-0.1": ".tmp-abc_defh.part",
    }
    for what, name in names.items():
        (cache / name).write_bytes(index_cache.MAGIC + b"half an index")
        if what.startswith("stale"):
            os.utime(cache / name, (old, old))
    Replay.open(trace)
    left = {what for what, name in names.items() if (cache / name).exists()}
    assert left == {"fresh-other-host", "fresh-0.1"}


def test_index_files_kbdebug_writes_are_its_users_alone(cache, trace):
    Replay.open(trace)
    assert index_file(cache).stat().st_mode & 0o777 == 0o600
    assert cache.stat().st_mode & 0o777 == 0o700


def test_nothing_is_left_in_the_folder_but_the_index(cache, trace):
    Replay.open(trace)
    Replay.open(trace)
    assert [p.name for p in cache.iterdir()] == [index_file(cache).name]


def test_the_folder_can_hold_what_other_commands_keep(cache, trace):
    # `kbdebug` records its examples into the cache folder's examples/ (commands/replay.py).
    (cache / "examples").mkdir(parents=True)
    (cache / "examples" / "run.kbt").write_bytes(SMALL)
    Replay.open(trace)
    assert (cache / "examples" / "run.kbt").read_bytes() == SMALL
