"""IndexCache: a trace's TraceIndex kept on disk, memory-mapped when the trace is opened again.

One file per trace in the cache directory (``$KBDEBUG_CACHE_DIR``, else
``$XDG_CACHE_HOME/kbdebug``, else ``~/.cache/kbdebug``; an empty
``KBDEBUG_CACHE_DIR`` or ``KBDEBUG_NO_CACHE=1`` turns the cache off; past
``KBDEBUG_CACHE_MAX_MB``, 4 GB by default, the least recently used files are
removed). Its name
and its contents carry the trace's key: device, inode, size and mtime of the
file, a hash of its first and last bytes, and the versions of the cache format,
of kbdebug and of the trace format. A trace that changed, grew or was replaced
has another key, so a stale index is never used.

Layout: ``MAGIC``, then the lengths and CRC-32s of a msgpack map (the key, the
header, footer, strings, locs, sources, shapes, and each array's name, dtype,
shape and offset) and of the arrays' bytes, then the map, then the arrays, each
at a 64-byte boundary. On loading, everything is checked (magic, key, lengths,
both checksums, each array's dtype, shape and place) before an array is made;
whatever does not fit makes the file be ignored (and then rewritten). Nothing
about the cache is ever an error for the user: a directory that cannot be
created or written just means no cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import mmap
import os
import struct
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from emulator.trace import wire
from emulator.trace.schema import SourceLoc
from kbdebug import __version__
from kbdebug.replay.index import (
    COLUMNS,
    DTYPES,
    WIDE,
    ChannelTable,
    Columns,
    Commands,
    Futures,
    LiveTable,
    TraceIndex,
)

log = logging.getLogger(__name__)

MAGIC = b"KBDIDX\x00\x01"
#: Bump when the layout or what is stored changes: older files are then ignored.
#: 2: columns and positions int32 where their values allow (DTYPES).
#: (Format 1.3's READS events changed neither: they are rows of the same columns, and
#: the key names the trace format this reader reads, so no index a 1.2 reader built,
#: without a 1.3 file's READS, is used by a 1.3 reader.)
CACHE_FORMAT = 2
# magic, then: meta length, meta CRC-32, arrays length, arrays CRC-32.
_PREAMBLE = struct.Struct("<8sQIQI")
_ALIGN = 64
# Bytes of the trace's head and tail hashed into its key: an edit in place that keeps
# the size and the mtime (a clock set back, a copy with -p) still changes the key.
EDGE_BYTES = 1 << 16
# The most bytes of the map of a cache file read before trusting its length.
MAX_META_BYTES = 1 << 30
# Bytes read at a time to check the arrays' checksum (without mapping them all in).
CHECK_BYTES = 1 << 22
#: Bytes of index files kept in the directory (``$KBDEBUG_CACHE_MAX_MB`` overrides):
#: past it, the least recently used go first, so traces opened once and deleted (a
#: sweep's) do not fill the disk.
DEFAULT_BUDGET = 4 << 30
# A temporary file this old was left by a write that never finished.
STALE_TEMP_SECONDS = 3600


def cache_dir() -> Path | None:
    """Where index files go; None if the cache is turned off."""
    if os.environ.get("KBDEBUG_NO_CACHE", "") not in ("", "0"):
        return None
    configured = os.environ.get("KBDEBUG_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kbdebug"


def trace_key(fd: int) -> tuple[str, str]:
    """The key of the trace open at ``fd``, and the prefix of its cache file's name
    (the same for every version of the file at that device and inode)."""
    info = os.fstat(fd)
    digest = hashlib.blake2b(digest_size=16)
    digest.update(os.pread(fd, EDGE_BYTES, 0))
    if info.st_size > EDGE_BYTES:
        digest.update(os.pread(fd, EDGE_BYTES, max(EDGE_BYTES, info.st_size - EDGE_BYTES)))
    major, minor = wire.FORMAT_VERSION
    key = (
        f"v{CACHE_FORMAT} kbdebug {__version__} kbt {major}.{minor}"
        f" dev {info.st_dev} ino {info.st_ino} size {info.st_size} mtime {info.st_mtime_ns}"
        f" edges {digest.hexdigest()}"
    )
    return key, f"{info.st_dev:x}-{info.st_ino:x}-"


def _file_name(key: str, prefix: str) -> str:
    return prefix + hashlib.blake2b(key.encode(), digest_size=12).hexdigest() + ".kbi"


# --- what is stored ---------------------------------------------------------------------


def _flat(parts: list[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    """A list of 1-D int arrays, stored one after another as one array (never joined in
    memory: the index may be in use meanwhile), and the bounds of each part."""
    bounds = np.zeros(len(parts) + 1, dtype=np.int64)
    bounds[1:] = np.cumsum([len(p) for p in parts])
    if not parts:
        return [np.empty(0, np.int64)], bounds
    dtype = np.result_type(*parts)
    return [part.astype(dtype, copy=False) for part in parts], bounds


def _split(flat: np.ndarray, bounds: np.ndarray) -> list[np.ndarray]:
    edges = bounds.tolist()
    return [flat[edges[i] : edges[i + 1]] for i in range(len(edges) - 1)]


def _arrays(index: TraceIndex) -> dict[str, list[np.ndarray]]:
    """Each array stored, by name: one array, or the parts of one (see _flat)."""
    arrays: dict[str, list[np.ndarray]] = {}
    for group, table in (("c", index.columns), ("k", index.commands), ("f", index.futures)):
        for name, array in vars(table).items():
            arrays[f"{group}.{name}"] = [array]

    def flat(name: str, parts: list[np.ndarray]) -> np.ndarray:
        arrays[name], bounds = _flat(parts)
        return bounds

    for name in ("pe_loc_events", "pe_status_events", "pe_scratch_events"):
        arrays[name + ".bounds"] = [flat(name, getattr(index, name))]
    tables = index.channel_tables
    for name in ("cmds", "request", "grant", "release", "done_by"):
        arrays["ch.bounds"] = [flat(f"ch.{name}", [getattr(t, name) for t in tables])]
    assert index.live_table is not None
    for name, array in vars(index.live_table).items():
        arrays[f"live.{name}"] = [array]
    keys = list(index.op_log_events)
    arrays["op.keys"] = [np.array(keys, dtype=np.int64).reshape(len(keys), 2)]
    arrays["op.bounds"] = [flat("op.events", [index.op_log_events[k] for k in keys])]
    return arrays


def _loc_out(loc: SourceLoc | None) -> list[Any] | None:
    """A loc and its chain of callers as a flat list (a chain is never recursed into)."""
    if loc is None:
        return None
    out: list[Any] = []
    while loc is not None:
        out.extend((loc.file, loc.line, loc.function))
        loc = loc.caller
    return out


def _loc_in(flat: Any) -> SourceLoc | None:
    if flat is None:
        return None
    if type(flat) is not list or not flat or len(flat) % 3:
        raise ValueError("bad loc")
    loc = None
    for at in range(len(flat) - 3, -1, -3):
        file, line, function = flat[at : at + 3]
        if not (isinstance(file, str) and type(line) is int and isinstance(function, str)):
            raise ValueError("bad loc")
        loc = SourceLoc(file, line, function, loc)
    return loc


def _meta(index: TraceIndex, key: str) -> dict[str, Any]:
    footer = index.footer
    if footer is not None:
        footer = {**footer, "error_loc": _loc_out(footer.get("error_loc"))}
    return {
        "key": key,
        "header": index.header,
        "footer": footer,
        "truncated": index.truncated,
        "sources": index.sources,
        "strings": index.strings,
        "locs": [_loc_out(loc) for loc in index.locs],
        "shapes": [list(shape) for shape in index.shapes],
    }


# --- writing ----------------------------------------------------------------------------


def save(index: TraceIndex, directory: Path, key: str, prefix: str) -> Path | None:
    """Write ``index`` under ``key``, atomically, replacing older files of the same trace
    file (``prefix``); None, with a debug note, if it cannot be written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=directory)
    except OSError as e:
        log.debug("no index cache in %s: %s", directory, e)
        return None
    target = directory / _file_name(key, prefix)
    try:
        with os.fdopen(fd, "wb") as out:
            _write(out, index, key)
        os.replace(temp, target)
    except (OSError, ValueError, TypeError) as e:
        log.debug("index cache not written to %s: %s", directory, e)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        return None
    for old in directory.glob(prefix + "*.kbi"):
        if old != target:
            with contextlib.suppress(OSError):
                old.unlink()
    prune(directory, keep=target)
    return target


# Threads writing index files (see save_in_background).
_writers: list[threading.Thread] = []


def save_in_background(index: TraceIndex, directory: Path, key: str, prefix: str) -> None:
    """save() from a thread, so that an open returns once the index is built (at ten
    million events the file is a gigabyte). Not a daemon: a process that is done
    before the file waits for it at exit. The index is only read meanwhile."""
    thread = threading.Thread(
        target=_save_quietly, args=(index, directory, key, prefix), name="kbdebug-index-cache"
    )
    _writers[:] = [t for t in _writers if t.is_alive()]
    _writers.append(thread)
    thread.start()


def _save_quietly(index: TraceIndex, directory: Path, key: str, prefix: str) -> None:
    try:
        save(index, directory, key, prefix)
    except Exception as e:  # a thread's traceback on a user's terminal: never, for a cache
        log.debug("index cache not written to %s: %r", directory, e)


def wait() -> None:
    """Return once the index files being written are complete (or given up)."""
    for thread in list(_writers):
        thread.join()


def budget() -> int:
    """The most bytes of index files to keep (see DEFAULT_BUDGET)."""
    try:
        return max(0, int(os.environ["KBDEBUG_CACHE_MAX_MB"])) << 20
    except (KeyError, ValueError):
        return DEFAULT_BUDGET


def prune(directory: Path, keep: Path | None = None) -> None:
    """Remove the least recently used index files past the budget (never ``keep``), and
    temporary files of writes that never finished."""
    files = []
    now = time.time()
    for entry in directory.iterdir():
        try:
            info = entry.stat()
        except OSError:
            continue
        if entry.name.startswith(".tmp-"):
            # Another process may be writing it, unless it is old.
            if now - info.st_mtime > STALE_TEMP_SECONDS:
                with contextlib.suppress(OSError):
                    entry.unlink()
        elif entry.suffix == ".kbi" and entry != keep:
            files.append((info.st_mtime, info.st_size, entry))
    total = sum(size for _, size, _ in files)
    if keep is not None:
        with contextlib.suppress(OSError):
            total += keep.stat().st_size
    for _, size, entry in sorted(files, key=lambda f: f[0]):
        if total <= budget():
            break
        with contextlib.suppress(OSError):
            entry.unlink()
            total -= size


def _write(out: Any, index: TraceIndex, key: str) -> None:
    arrays = _arrays(index)
    places = []
    offset = 0
    for name, parts in arrays.items():
        offset += -offset % _ALIGN
        shape = list(parts[0].shape) if len(parts) == 1 else [sum(len(p) for p in parts)]
        places.append([name, parts[0].dtype.str, shape, offset])
        offset += sum(part.nbytes for part in parts)
    meta = _meta(index, key)
    meta["arrays"] = places
    packed = msgpack.packb(meta, use_bin_type=True)
    start = _PREAMBLE.size + len(packed)
    start += -start % _ALIGN
    out.write(_PREAMBLE.pack(MAGIC, 0, 0, 0, 0))
    out.write(packed)
    out.write(b"\0" * (start - _PREAMBLE.size - len(packed)))
    crc = 0
    written = 0
    for (_, _, _, at), parts in zip(places, arrays.values(), strict=True):
        pad = b"\0" * (at - written)
        crc = zlib.crc32(pad, crc)
        out.write(pad)
        written = at
        for part in parts:
            data = memoryview(np.ascontiguousarray(part)).cast("B")
            crc = zlib.crc32(data, crc)
            out.write(data)
            written += part.nbytes
    out.seek(0)
    out.write(_PREAMBLE.pack(MAGIC, len(packed), zlib.crc32(packed), written, crc))


# --- reading ----------------------------------------------------------------------------


class _Foreign(ValueError):
    """Not a cache file of this trace, or not whole: ignored."""


def load(directory: Path, key: str, prefix: str) -> TraceIndex | None:
    """The index stored under ``key``, its arrays mapped from the file; None if there is
    none, or it is not one this version wrote for this trace, whole and intact."""
    path = directory / _file_name(key, prefix)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        index = _load(fd, key)
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: pruned last
        return index
    except (_Foreign, ValueError, TypeError, KeyError, OSError, msgpack.UnpackException) as e:
        log.debug("index cache %s ignored: %s", path, e)
        return None
    finally:
        os.close(fd)


def _load(fd: int, key: str) -> TraceIndex:
    size = os.fstat(fd).st_size
    preamble = os.pread(fd, _PREAMBLE.size, 0)
    if len(preamble) != _PREAMBLE.size:
        raise _Foreign("shorter than its preamble")
    magic, meta_len, meta_crc, arrays_len, arrays_crc = _PREAMBLE.unpack(preamble)
    if magic != MAGIC or meta_len > min(size, MAX_META_BYTES):
        raise _Foreign("not an index cache file")
    packed = os.pread(fd, meta_len, _PREAMBLE.size)
    if len(packed) != meta_len or zlib.crc32(packed) != meta_crc:
        raise _Foreign("its map is damaged")
    meta = msgpack.unpackb(packed, raw=False, strict_map_key=True)
    if not isinstance(meta, dict) or meta.get("key") != key:
        raise _Foreign("made for another trace or version")
    start = _PREAMBLE.size + meta_len
    start += -start % _ALIGN
    if start + arrays_len != size:
        raise _Foreign(f"{size} bytes, expected {start + arrays_len}")
    crc = 0
    for at in range(start, size, CHECK_BYTES):
        crc = zlib.crc32(os.pread(fd, min(CHECK_BYTES, size - at), at), crc)
    if crc != arrays_crc:
        raise _Foreign("its arrays are damaged")
    # Private (copy-on-write) mapping: arrays stay writable, the file is never changed.
    view = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE) if size else b""
    arrays = {}
    for name, dtype, shape, at in meta["arrays"]:
        dtype = np.dtype(dtype)
        if dtype.kind not in "iub" or any(type(d) is not int or d < 0 for d in shape):
            raise _Foreign(f"array {name} is {dtype}{shape}")
        count = int(np.prod(shape, dtype=np.int64))
        if type(at) is not int or at < 0 or at + count * dtype.itemsize > arrays_len:
            raise _Foreign(f"array {name} lies outside the file")
        arrays[name] = np.frombuffer(view, dtype, count, start + at).reshape(shape)
    return _index(meta, arrays)


def _index(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> TraceIndex:
    """The TraceIndex of a cache file's map and arrays, their dtypes and lengths checked."""

    def table(cls: type, group: str, length: int | None) -> Any:
        values = {}
        for name in cls.__dataclass_fields__:
            array = arrays[f"{group}.{name}"]
            if array.ndim != 1 or (length is not None and len(array) != length):
                raise _Foreign(f"{group}.{name} has {array.shape} items")
            values[name] = array
        return cls(**values)

    n = len(arrays["c.kind"])
    for name in COLUMNS:
        if arrays[f"c.{name}"].dtype not in (DTYPES[name], WIDE):
            raise _Foreign(f"column {name} is {arrays[f'c.{name}'].dtype}")
    columns = table(Columns, "c", n)
    commands = table(Commands, "k", len(arrays["k.issue"]))
    futures = table(Futures, "f", len(arrays["f.cmd"]))
    live = table(LiveTable, "live", None)
    footer = meta["footer"]
    if footer is not None:
        footer = {**footer, "error_loc": _loc_in(footer.get("error_loc"))}
    strings = meta["strings"]
    if not all(isinstance(s, str) for s in strings):
        raise _Foreign("strings")
    index = TraceIndex(
        header=meta["header"],
        footer=footer,
        truncated=bool(meta["truncated"]),
        sources=dict(meta["sources"]),
        strings=strings,
        locs=[_loc_in(loc) for loc in meta["locs"]],
        shapes=[tuple(shape) for shape in meta["shapes"]],
        columns=columns,
        commands=commands,
        futures=futures,
        live_table=live,
    )
    n_pes, n_channels = index.n_pes, len(index.channels)
    for name in ("pe_loc_events", "pe_status_events", "pe_scratch_events"):
        parts = _split(arrays[name], _bounds(arrays[name + ".bounds"], len(arrays[name]), n_pes))
        getattr(index, name).extend(parts)
    bounds = _bounds(arrays["ch.bounds"], len(arrays["ch.cmds"]), n_channels)
    per_channel = {
        name: _split(arrays[f"ch.{name}"], bounds)
        for name in ("cmds", "request", "grant", "release", "done_by")
    }
    index.channel_cmds.extend(per_channel["cmds"])
    for parts in zip(*per_channel.values(), strict=True):
        index.channel_tables.append(ChannelTable(*parts))
    keys = arrays["op.keys"]
    bounds = _bounds(arrays["op.bounds"], len(arrays["op.events"]), len(keys))
    events = _split(arrays["op.events"], bounds)
    for (category, op), found in zip(keys.tolist(), events, strict=True):
        index.op_log_events[(category, op)] = found
    return index


def _bounds(bounds: np.ndarray, total: int, parts: int) -> np.ndarray:
    """``bounds`` if they cut ``total`` items into ``parts`` in order."""
    if (
        bounds.ndim != 1
        or len(bounds) != parts + 1
        or bounds[0] != 0
        or bounds[-1] != total
        or (np.diff(bounds) < 0).any()
    ):
        raise _Foreign("bounds")
    return bounds
