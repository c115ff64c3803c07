"""The index cache: a re-opened trace reads its index back, and never one of another file,
content or version. (Forged and damaged files, files changed under a process, FIFOs and
symbolic links: tests/test_replay_cache_trust.py.)"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from cache_forge import forge_map
from trace_synth import decode_like_events, record_run

from emulator.trace.writer import TraceWriter
from kbdebug.replay import Replay
from kbdebug.replay import cache as index_cache
from kbdebug.replay import replay as replay_module


def trace_bytes(n_events: int, **footer) -> bytes:
    out = io.BytesIO()
    record_run(TraceWriter(out), decode_like_events(n_events), **footer)
    return out.getvalue()


SMALL = trace_bytes(2000)
LARGER = trace_bytes(3000)


@pytest.fixture(autouse=True)
def synchronous_writes(request, monkeypatch):
    """Index files written before Replay.open returns, so that what a test sees next
    does not depend on a thread's timing (but for the test of the background write)."""
    if "background" not in request.node.name:
        monkeypatch.setattr(index_cache, "save_in_background", index_cache.save)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache directory of the test's own."""
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
    """The index of the trace at ``path`` from the cache in ``directory``, or None."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return index_cache.lookup(directory, fd)[0]
    finally:
        os.close(fd)


def index_files(directory) -> list:
    return sorted(directory.glob("*.kbi")) if directory.exists() else []


def no_reading(monkeypatch):
    """Make reading a trace fail: an open that succeeds then came from the cache."""

    def refuse(*args, **kwargs):
        raise AssertionError("the trace was read")

    monkeypatch.setattr(replay_module, "read_trace_tables", refuse)


def same_index(a: Replay, b: Replay) -> None:
    assert a.n_events == b.n_events
    for table in ("columns", "commands", "futures", "live_table"):
        for name, array in vars(getattr(a.index, table)).items():
            other = getattr(getattr(b.index, table), name)
            assert array.dtype == other.dtype and np.array_equal(array, other), (table, name)
    for name in ("header", "footer", "truncated", "sources", "strings", "locs", "shapes"):
        assert getattr(a.index, name) == getattr(b.index, name), name
    for name in ("pe_loc_events", "pe_status_events", "pe_scratch_events", "channel_cmds"):
        assert list(map(np.ndarray.tolist, getattr(a.index, name))) == list(
            map(np.ndarray.tolist, getattr(b.index, name))
        )
    assert {k: v.tolist() for k, v in a.index.op_log_events.items()} == {
        k: v.tolist() for k, v in b.index.op_log_events.items()
    }
    assert [vars(t).keys() for t in a.index.channel_tables] == [
        vars(t).keys() for t in b.index.channel_tables
    ]
    for ta, tb in zip(a.index.channel_tables, b.index.channel_tables, strict=True):
        for name, array in vars(ta).items():
            assert np.array_equal(array, getattr(tb, name))
    for i in (0, a.n_events // 2, a.n_events - 1):
        assert a.describe(i) == b.describe(i)
    assert a.seek(a.n_events // 3).time == b.seek(b.n_events // 3).time


def test_reopen_reads_the_index_from_the_cache(cache, trace, monkeypatch):
    first = Replay.open(trace)
    assert len(index_files(cache)) == 1
    no_reading(monkeypatch)
    again = Replay.open(trace)
    same_index(again, first)
    # The arrays are the process's own: a caller writing into a column changes no file.
    before = index_files(cache)[0].read_bytes()
    again.index.columns.val[:] = 7
    assert index_files(cache)[0].read_bytes() == before


def test_truncated_trace_with_an_error_footer_round_trips(cache, tmp_path, monkeypatch):
    for name, data in (
        ("cut.kbt", SMALL[: len(SMALL) * 2 // 3]),
        ("error.kbt", trace_bytes(500, status="error", error="boom")),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        first = Replay.open(path, cache=False)
        Replay.open(path)
        with monkeypatch.context() as patch:
            no_reading(patch)
            same_index(Replay.open(path), first)


def test_a_trace_that_grew_is_read_again(cache, trace):
    trace.write_bytes(SMALL[: len(SMALL) // 2])
    cut = Replay.open(trace)
    assert cut.status == "truncated"
    with open(trace, "ab") as out:
        out.write(SMALL[len(SMALL) // 2 :])
    whole = Replay.open(trace)
    assert whole.status == "ok" and whole.n_events > cut.n_events
    same_index(whole, Replay.open(trace, cache=False))
    # The index of the old contents of the file is dropped, not left to pile up.
    assert len(index_files(cache)) == 1


def test_a_replaced_trace_is_read_again(cache, trace, tmp_path):
    Replay.open(trace)
    other = tmp_path / "other.kbt"
    other.write_bytes(LARGER)
    os.replace(other, trace)
    same_index(Replay.open(trace), Replay.open(trace, cache=False))
    assert Replay.open(trace).n_events == Replay.open(trace, cache=False).n_events


def test_a_trace_rewritten_in_place_with_the_same_size_and_time_is_read_again(cache, trace):
    Replay.open(trace)
    stat = trace.stat()
    edited = SMALL.replace(b"kbdebug 0.1.0", b"kbdebug 9.9.9")
    assert len(edited) == len(SMALL) and edited != SMALL
    trace.write_bytes(edited)
    os.utime(trace, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert trace.stat().st_size == stat.st_size and trace.stat().st_mtime_ns == stat.st_mtime_ns
    assert Replay.open(trace).index.header["producer"] == "kbdebug 9.9.9"


def damaged(cache, how) -> None:
    (path,) = index_files(cache)
    data = bytearray(path.read_bytes())
    path.write_bytes(how(data))


@pytest.mark.parametrize(
    "how",
    [
        pytest.param(lambda d: d[:-1] + bytes([d[-1] ^ 1]), id="last-byte-flipped"),
        pytest.param(lambda d: d[: len(d) // 2], id="truncated"),
        pytest.param(lambda d: d[:100], id="cut-in-its-map"),
        pytest.param(lambda d: b"", id="empty"),
        pytest.param(lambda d: d[:60] + bytes([d[60] ^ 0x40]) + d[61:], id="map-byte-flipped"),
        pytest.param(lambda d: b"not an index at all" * 100, id="foreign"),
        pytest.param(lambda d: d + b"\0" * 64, id="grown"),
    ],
)
def test_a_damaged_or_foreign_cache_file_is_ignored_and_rebuilt(cache, trace, monkeypatch, how):
    expected = Replay.open(trace, cache=False)
    Replay.open(trace)
    damaged(cache, how)
    same_index(Replay.open(trace), expected)
    # Rebuilt: the next open maps it again.
    no_reading(monkeypatch)
    same_index(Replay.open(trace), expected)


def test_an_array_the_map_says_lies_elsewhere_is_not_trusted(cache, trace):
    Replay.open(trace)
    (path,) = index_files(cache)
    assert load(cache, trace) is not None
    # A map that points an array past the file's end, with its checksum made right.

    def past_the_end(meta, arrays_len):
        _, _, shape, at = meta["arrays"][-2]
        assert at > 1 << 16 and shape[0] > 0  # so its offset is a uint32, as the end is
        meta["arrays"][-2][3] = arrays_len  # it starts at the end

    forge_map(path, past_the_end)
    assert load(cache, trace) is None
    same_index(Replay.open(trace), Replay.open(trace, cache=False))


def test_an_unwritable_cache_location_means_no_cache(tmp_path, trace, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("KBDEBUG_CACHE_DIR", str(blocker / "cache"))
    first = Replay.open(trace)
    same_index(Replay.open(trace), first)
    assert blocker.read_text() == "not a directory"


@pytest.mark.parametrize(
    "env", [{"KBDEBUG_CACHE_DIR": ""}, {"KBDEBUG_NO_CACHE": "1"}], ids=["empty-dir", "no-cache"]
)
def test_the_cache_can_be_turned_off(tmp_path, trace, monkeypatch, env):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    Replay.open(trace)
    Replay.open(trace)
    assert not any(tmp_path.rglob("*.kbi"))


def test_cache_false_neither_reads_nor_writes_the_cache(cache, trace, monkeypatch):
    Replay.open(trace, cache=False)
    assert index_files(cache) == []
    Replay.open(trace)
    monkeypatch.setattr(index_cache, "lookup", lambda *a: pytest.fail("cache read"))
    Replay.open(trace, cache=False)


def test_the_default_directory_is_under_xdg_cache_home(tmp_path, trace, monkeypatch):
    monkeypatch.delenv("KBDEBUG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert index_cache.cache_dir() == tmp_path / "xdg" / "kbdebug"
    Replay.open(trace)
    assert len(index_files(tmp_path / "xdg" / "kbdebug")) == 1
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert index_cache.cache_dir() == tmp_path / "home" / ".cache" / "kbdebug"


def test_a_trace_written_to_while_it_is_read_is_not_cached(cache, trace, monkeypatch):
    read = replay_module.read_trace_tables

    def read_then_append(path, *args, **kwargs):
        result = read(path, *args, **kwargs)
        with open(path, "ab") as out:
            out.write(b"\x93\x02\x00\x00")
        return result

    monkeypatch.setattr(replay_module, "read_trace_tables", read_then_append)
    Replay.open(trace)
    assert index_files(cache) == []


def test_a_cache_of_another_kbdebug_version_is_not_used(cache, trace, monkeypatch):
    Replay.open(trace)
    monkeypatch.setattr(index_cache, "__version__", "0.0.0-other")
    assert "0.0.0-other" in key_of(trace).identity
    with monkeypatch.context() as patch:
        no_reading(patch)
        with pytest.raises(AssertionError, match="the trace was read"):
            Replay.open(trace)


def test_past_the_budget_the_least_recently_used_index_files_go(cache, tmp_path, monkeypatch):
    paths = []
    for i in range(3):
        path = tmp_path / f"run{i}.kbt"
        path.write_bytes(SMALL)
        Replay.open(path)
        paths.append(path)
    sizes = [f.stat().st_size for f in index_files(cache)]
    assert len(sizes) == 3
    Replay.open(paths[0])  # used again: now the most recent
    monkeypatch.setenv("KBDEBUG_CACHE_MAX_MB", "0")
    fourth = tmp_path / "run3.kbt"
    fourth.write_bytes(LARGER)
    Replay.open(fourth)
    # Only the index just written is left; with room for two, the one used again stays.
    assert [f.name for f in index_files(cache)] == [index_cache.file_name(key_of(fourth))]
    room = index_files(cache)[0].stat().st_size + max(sizes) + 4096  # the fourth and one more
    monkeypatch.setattr(index_cache, "budget", lambda: room)
    for path in paths:
        Replay.open(path)
    Replay.open(paths[0])
    Replay.open(fourth)
    kept = {f.name for f in index_files(cache)}
    assert index_cache.file_name(key_of(fourth)) in kept and len(kept) == 2
    assert index_cache.file_name(key_of(paths[0])) in kept


def test_a_write_left_unfinished_is_removed_once_its_writer_is_gone_not_before(cache, trace):
    cache.mkdir()
    # Named for this host and a PID: this process's (still writing) and one that is gone.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    host = index_cache.cache_files.HOST
    writing = cache / f".kbi-{host}-{os.getpid()}-00000001.part"
    left = cache / f".kbi-{host}-{dead}-00000002.part"
    for path in (writing, left):
        path.write_bytes(index_cache.MAGIC + b"half an index")
    Replay.open(trace)
    assert writing.exists() and not left.exists() and len(index_files(cache)) == 1


def test_the_index_is_written_in_the_background_and_complete_after_wait(cache, trace, monkeypatch):
    started, release = threading.Event(), threading.Event()
    save = index_cache.save

    def slow_save(*args):
        started.set()
        release.wait(10)
        return save(*args)

    monkeypatch.setattr(index_cache, "save", slow_save)
    first = Replay.open(trace)  # returns while the file is still being written
    assert started.wait(10) and index_files(cache) == []
    release.set()
    index_cache.wait()
    assert len(index_files(cache)) == 1
    no_reading(monkeypatch)
    same_index(Replay.open(trace), first)
