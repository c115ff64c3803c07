"""IndexCache: a trace's index kept on disk, read back when the same trace is opened again.

One file per trace in the cache directory (``$KBDEBUG_CACHE_DIR``, else
``$XDG_CACHE_HOME/kbdebug``, else ``~/.cache/kbdebug``; an empty
``KBDEBUG_CACHE_DIR`` or ``KBDEBUG_NO_CACHE=1`` turns the cache off; past
``KBDEBUG_CACHE_MAX_MB``, 4 GB by default, the least recently used files are
removed). Nothing about the cache is ever an error for the user: a directory that
cannot be created or written just means no cache, and a file that is not right is
ignored (and rewritten).

Key: the trace file's device, inode, size and modification time, and the versions of
the cache layout, of kbdebug and of the trace format name the file (``file_name``); a
SHA-256 of every byte of the trace is kept in it and must match before it is used, so
a trace that changed in any way (even edited in place, its size and times put back) is
read again. Hashing a million-event trace (8.7 MB) takes about 6 ms, against 65 ms to
merely unpack its msgpack; it runs on a thread while the cache file is read.

Layout: ``MAGIC``, then the lengths and CRC-32s of a msgpack map (the key, the trace's
hash, the lengths of its header and footer, where it is cut if it is, its strings,
locs, sources and shapes, each array's name, dtype, shape and offset) and of the
arrays' bytes, then the map, then the arrays one after another: the event columns and
the ISSUE fields that have no column. Nothing derived is stored: the tables are
derived again, and everything is checked as the reader checks a trace, header and
footer read from the trace itself (kbdebug.replay.cache_checks). Which files are
read, written and removed: kbdebug.replay.cache_files.

Reading copies the file into the process's own memory, never maps it: a cache file cut
short or rewritten by another process while an index from it is in use changes nothing
(a mapping of it would kill the process with SIGBUS at the next page it touched).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import mmap
import os
import struct
import sys
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgpack
import numpy as np

from emulator.trace import wire
from emulator.trace.parser import unpack_limits
from emulator.trace.reader import Trace
from emulator.trace.schema import Kind, SourceLoc
from kbdebug import __version__
from kbdebug.replay import cache_files
from kbdebug.replay.cache_checks import (
    ISSUE_EXTRAS,
    CacheRefused,
    checked_events,
    checked_extras,
    definitions,
    index_of,
    shapes_of,
    trace_end,
    trace_header,
)
from kbdebug.replay.index import COLUMNS, DTYPES, WIDE, TraceIndex

log = logging.getLogger(__name__)

MAGIC = cache_files.MAGIC
#: Bump when the layout or what is stored changes: older files are then ignored.
#: 2: columns and positions int32 where their values allow (DTYPES).
#: (Format 1.3's READS events changed neither: they are rows of the same columns, and
#: the key names the trace format this reader reads, so no index a 1.2 reader built,
#: without a 1.3 file's READS, is used by a 1.3 reader.)
#: 3: the columns and the ISSUE fields without one, no derived table; header and
#: footer read from the trace; the key holds a hash of all of the trace.
CACHE_FORMAT = 3
# magic, then: meta length, meta CRC-32, arrays length, arrays CRC-32.
_PREAMBLE = struct.Struct("<8sQIQI")
# Bytes read at a time, from the trace to hash it and from a cache file into its arrays
# (a megabyte: each chunk is checksummed while it is still in the caches).
READ_BYTES = 1 << 20
# madvise(2)'s MADV_POPULATE_WRITE (Linux 5.14), which Python 3.11's mmap does not name.
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23 if sys.platform == "linux" else None)
# Arrays start at multiples of this many bytes from the first (read in one piece, each
# is then aligned in memory).
_ALIGN = 64
# The most bytes a cache file's map may take over those of its trace (strings, locs and
# sources come from the trace; the rest is small).
META_SLACK = 1 << 20
#: Bytes of index files kept in the directory (``$KBDEBUG_CACHE_MAX_MB`` overrides):
#: past it, the least recently used go first, so traces opened once and deleted (a
#: sweep's) do not fill the disk.
DEFAULT_BUDGET = 4 << 30
# A temporary file of another host this old was left by a write that never finished.
STALE_TEMP_SECONDS = cache_files.STALE_TEMP_SECONDS


def cache_root() -> Path | None:
    """kbdebug's cache folder: ``$KBDEBUG_CACHE_DIR``, else ``$XDG_CACHE_HOME/kbdebug``,
    else ``~/.cache/kbdebug``; None when ``KBDEBUG_CACHE_DIR`` is set but empty (no cache)."""
    configured = os.environ.get("KBDEBUG_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kbdebug"


def cache_dir() -> Path | None:
    """Where index files go; None if the cache is turned off (``KBDEBUG_NO_CACHE=1`` too)."""
    if os.environ.get("KBDEBUG_NO_CACHE", "") not in ("", "0"):
        return None
    return cache_root()


class TraceKey(NamedTuple):
    """What names a trace's cache file and what must match in it (unpacks as the
    ``(key, prefix)`` pair it always was)."""

    #: Device, inode, size and modification time of the trace and versions (the
    #: identity, which names the file), then " sha256 " and the hash of every byte.
    key: str
    #: The start of the names of every version's file of the trace's device and inode.
    prefix: str

    @property
    def identity(self) -> str:
        return self.key.rpartition(_CONTENT)[0]

    @property
    def content(self) -> str:
        return self.key.rpartition(_CONTENT)[2]


_CONTENT = " sha256 "


def _identity(fd: int) -> tuple[str, str]:
    info = os.fstat(fd)
    major, minor = wire.FORMAT_VERSION
    identity = (
        f"v{CACHE_FORMAT} kbdebug {__version__} kbt {major}.{minor}"
        f" dev {info.st_dev} ino {info.st_ino} size {info.st_size} mtime {info.st_mtime_ns}"
    )
    return identity, f"{info.st_dev:x}-{info.st_ino:x}-"


def content_hash(fd: int) -> str:
    """SHA-256 of the bytes of the file open at ``fd``, read a chunk at a time (read, not
    mapped: a file cut short meanwhile gives a short read, never a SIGBUS)."""
    digest = hashlib.sha256()
    view = memoryview(bytearray(READ_BYTES))
    at = 0
    while True:
        n = os.preadv(fd, [view], at)
        if not n:
            return digest.hexdigest()
        digest.update(view[:n])
        at += n


def trace_key(fd: int) -> TraceKey:
    """The key of the trace open at ``fd`` (its whole content hashed)."""
    identity, prefix = _identity(fd)
    return TraceKey(identity + _CONTENT + content_hash(fd), prefix)


def _name(identity: str, prefix: str) -> str:
    return prefix + hashlib.blake2b(identity.encode(), digest_size=12).hexdigest() + ".kbi"


def file_name(key: TraceKey) -> str:
    """The name of the cache file of the trace of ``key`` (see cache_files.INDEX_NAME)."""
    return _name(key.identity, key.prefix)


# --- what is stored ---------------------------------------------------------------------


def _arrays(index: TraceIndex) -> list[tuple[str, np.ndarray]]:
    """The arrays stored, by name: the columns, then the ISSUE fields without a column, in
    ISSUE order (as the builder kept them: each command's, by its ISSUE's cmd)."""
    c = index.columns
    arrays = [(f"c.{name}", getattr(c, name)) for name in COLUMNS]
    cmds = c.cmd[c.kind == Kind.ISSUE]
    for name, dtype in ISSUE_EXTRAS:
        values = getattr(index.commands, name)[cmds].astype(dtype, copy=False)
        arrays.append((f"i.{name}", values))
    return arrays


_ARRAY_NAMES = [f"c.{name}" for name in COLUMNS] + [f"i.{name}" for name, _ in ISSUE_EXTRAS]
_ARRAY_DTYPES = {f"c.{name}": {np.dtype(DTYPES[name]).str, np.dtype(WIDE).str} for name in COLUMNS}
_ARRAY_DTYPES |= {f"i.{name}": {np.dtype(dtype).str} for name, dtype in ISSUE_EXTRAS}
_ARRAY_DTYPES["c.kind"] = {np.dtype(DTYPES["kind"]).str}


def _loc_out(loc: SourceLoc | None) -> list[Any] | None:
    """A loc and its chain of callers as a flat list (a chain is never recursed into)."""
    if loc is None:
        return None
    out: list[Any] = []
    while loc is not None:
        out.extend((loc.file, loc.line, loc.function))
        loc = loc.caller
    return out


def _meta(index: TraceIndex, key: TraceKey, places: tuple[int, int | None, int | None]) -> dict:
    header_len, footer_len, truncated_at = places
    return {
        "key": key.identity,
        "content": key.content,
        "header_len": header_len,
        "footer_len": footer_len,
        "truncated_at": truncated_at,
        "sources": index.sources,
        "strings": index.strings,
        "locs": [_loc_out(loc) for loc in index.locs],
        "shapes": [list(shape) for shape in index.shapes],
    }


def _trace_places(
    fd: int, index: TraceIndex, truncated_at: int | None
) -> tuple[int, int | None, int | None] | None:
    """(length of the header, of the footer, where the trace is cut) of the trace open at
    ``fd``, from which ``index`` was read; None if its header is not the index's, or its
    footer does not end the file as the writer packs it (a trace the cache cannot check
    against itself is not cached)."""
    unpacker = msgpack.Unpacker(max_buffer_size=wire.MAX_RECORD_BYTES, **unpack_limits())
    at = 0
    try:
        while True:
            try:
                header = unpacker.unpack()
                break
            except msgpack.OutOfData:
                chunk = os.pread(fd, 1 << 16, at)
                if not chunk:
                    return None
                unpacker.feed(chunk)
                at += len(chunk)
    except (ValueError, msgpack.UnpackException):
        return None
    if header != index.header:
        return None
    footer = index.footer
    if footer is None:
        return (unpacker.tell(), None, truncated_at) if truncated_at is not None else None
    loc = footer.get("error_loc")
    raw = {
        "status": footer["status"],
        "events": footer["events"],
        "end_time": footer["end_time"],
        "error": footer["error"],
        "error_loc": None if loc is None else [loc.file, loc.line, loc.function],
    }
    if "check" in footer:  # the output check's verdict, written last
        raw["check"] = footer["check"]
    packed = msgpack.packb(raw)
    size = os.fstat(fd).st_size
    if size < len(packed) or os.pread(fd, len(packed), size - len(packed)) != packed:
        return None
    return unpacker.tell(), len(packed), None


# --- writing ----------------------------------------------------------------------------


def keep(index: TraceIndex, trace: Trace, directory: Path, key: TraceKey, fd: int) -> None:
    """Write ``index``, read from ``trace`` (open at ``fd``), to the cache in the background
    (see save), unless the cache does not keep such a trace: cut short inside its header,
    or of a newer minor version than this reader (whose unknown records were skipped)."""
    if trace.version is None or trace.version > wire.FORMAT_VERSION:
        return
    save_in_background(index, directory, key, trace.truncated_at, os.dup(fd))


def save(
    index: TraceIndex, directory: Path, key: TraceKey, truncated_at: int | None, trace_fd: int
) -> Path | None:
    """Write ``index`` under ``key``, atomically, replacing older files of the same trace
    file, if the trace open at ``trace_fd`` (closed here) still has that key: the
    same file, unchanged since the key was taken, before it was read. None, with a debug
    note, if it has another or the index cannot be written."""
    try:
        try:
            if trace_key(trace_fd) != key:
                log.debug("index cache not written: the trace changed as it was read")
                return None
            places = _trace_places(trace_fd, index, truncated_at)
        finally:
            os.close(trace_fd)
    except OSError as e:
        log.debug("index cache not written: %s", e)
        return None
    if places is None:
        log.debug("index cache not written: header or footer not where they were read")
        return None
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temp = cache_files.create_temp(directory)
    except OSError as e:
        log.debug("no index cache in %s: %s", directory, e)
        return None
    target = directory / file_name(key)
    try:
        with os.fdopen(fd, "wb") as out:
            _write(out, index, _meta(index, key, places))
        os.replace(temp, target)
    except (OSError, ValueError, TypeError) as e:
        log.debug("index cache not written to %s: %s", directory, e)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        return None
    for old, _ in cache_files.index_files(directory, key.prefix):
        if old != target:
            with contextlib.suppress(OSError):
                old.unlink()
    prune(directory, keep=target)
    return target


# Threads writing index files (see save_in_background).
_writers: list[threading.Thread] = []


def save_in_background(
    index: TraceIndex, directory: Path, key: TraceKey, truncated_at: int | None, trace_fd: int
) -> None:
    """save() from a thread, so that an open returns once the index is built (at ten
    million events the file is half a gigabyte). Not a daemon: a process that is done
    before the file waits for it at exit. The index is only read meanwhile."""
    thread = threading.Thread(
        target=_save_quietly,
        args=(index, directory, key, truncated_at, trace_fd),
        name="kbdebug-index-cache",
    )
    _writers[:] = [t for t in _writers if t.is_alive()]
    _writers.append(thread)
    thread.start()


def _save_quietly(*args: Any) -> None:
    try:
        save(*args)
    except Exception as e:  # a thread's traceback on a user's terminal: never, for a cache
        log.debug("index cache not written: %r", e)


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
    what writes that died left; only files kbdebug wrote (see cache_files)."""
    cache_files.prune(directory, budget(), keep)


def _write(out: Any, index: TraceIndex, meta: dict[str, Any]) -> None:
    arrays = _arrays(index)
    places = []
    offset = 0
    for name, array in arrays:
        offset += -offset % _ALIGN
        places.append([name, array.dtype.str, list(array.shape), offset])
        offset += array.nbytes
    meta["arrays"] = places
    packed = msgpack.packb(meta, use_bin_type=True)
    out.write(_PREAMBLE.pack(MAGIC, 0, 0, 0, 0))
    out.write(packed)
    crc = written = 0
    for (_, _, _, at), (_, array) in zip(places, arrays, strict=True):
        for data in (b"\0" * (at - written), memoryview(np.ascontiguousarray(array)).cast("B")):
            crc = zlib.crc32(data, crc)
            out.write(data)
        written = at + array.nbytes
    out.seek(0)
    out.write(_PREAMBLE.pack(MAGIC, len(packed), zlib.crc32(packed), written, crc))


# --- reading ----------------------------------------------------------------------------


def lookup(
    directory: Path, fd: int, name: str = "<trace>"
) -> tuple[TraceIndex | None, TraceKey | None]:
    """The index of the trace open at ``fd`` (called ``name``) from the cache, and the
    trace's key (to save its index with): ``(None, key)`` if the cache holds no index of
    it that passes every check, ``(None, None)`` if the trace cannot be read to hash it.
    Removes what writes that died left in ``directory``."""
    identity, prefix = _identity(fd)
    found: dict[str, Any] = {}

    def hash_it() -> None:
        try:
            found["content"] = content_hash(fd)
        except OSError as e:
            log.debug("trace not hashed: %s", e)

    hasher = threading.Thread(target=hash_it, name="kbdebug-trace-hash", daemon=True)
    hasher.start()

    def content() -> str | None:
        hasher.join()
        return found.get("content")

    index = None
    try:
        with contextlib.suppress(OSError):
            cache_files.remove_leftovers(directory)
        cache_fd = cache_files.open_own(directory / _name(identity, prefix))
        if cache_fd is not None:
            try:
                index = _load(cache_fd, identity, fd, name, content)
                with contextlib.suppress(OSError, NotImplementedError):
                    os.utime(cache_fd)  # recently used: pruned last
            except CacheRefused as e:
                log.debug("index cache of %s ignored: %s", name, e)
            except Exception as e:  # whatever a file holds, it is never an error for the user
                log.debug("index cache of %s ignored: %r", name, e)
            finally:
                os.close(cache_fd)
    finally:
        digest = content()
    if digest is None:
        return None, None
    return index, TraceKey(identity + _CONTENT + digest, prefix)


def _refuse(reason: str) -> None:
    raise CacheRefused(reason)


def _load(
    fd: int, identity: str, trace_fd: int, name: str, content: Callable[[], str | None]
) -> TraceIndex:
    """The index in the cache file open at ``fd``, once all of it passed its checks against
    the trace open at ``trace_fd`` (see kbdebug.replay.cache_checks); ``content()`` is
    the trace's hash. Every size is bounded by the trace's before anything is read."""
    size = os.fstat(trace_fd).st_size
    file_size = os.fstat(fd).st_size
    preamble = os.pread(fd, _PREAMBLE.size, 0)
    if len(preamble) != _PREAMBLE.size:
        _refuse("shorter than its preamble")
    magic, meta_len, meta_crc, arrays_len, arrays_crc = _PREAMBLE.unpack(preamble)
    if magic != MAGIC or meta_len > min(file_size, size + META_SLACK):
        _refuse("not an index cache file")
    start = _PREAMBLE.size + meta_len
    if start + arrays_len != file_size:
        _refuse(f"{file_size} bytes, expected {start + arrays_len}")
    packed = os.pread(fd, meta_len, _PREAMBLE.size)
    if len(packed) != meta_len or zlib.crc32(packed) != meta_crc:
        _refuse("its map is damaged")
    meta = msgpack.unpackb(packed, raw=False, strict_map_key=True)
    if not isinstance(meta, dict) or meta.get("key") != identity:
        _refuse("made for another trace or version")
    checks = trace_header(trace_fd, size, meta.get("header_len"), name)
    places = _places(meta.get("arrays"), arrays_len, size)
    memory = _read_arrays(fd, start, arrays_len)
    arrays = {
        array_name: np.frombuffer(memory, dtype, count, at)
        for array_name, dtype, count, at in places
    }
    # The arrays' checksum on a thread of its own, while they are checked (zlib and numpy
    # let go of the GIL): nothing is used before it and the trace's hash match.
    crc: list[int] = []
    summing = threading.Thread(
        target=lambda: crc.append(_crc(memory)), name="kbdebug-cache-crc", daemon=True
    )
    summing.start()
    try:
        definitions(checks, meta)
        checked = checked_events({n: arrays[f"c.{n}"] for n in COLUMNS}, checks)
        n_issues = len(checked.events.get(Kind.ISSUE, ()))
        shapes = shapes_of(meta, n_issues)
        extras = {n: arrays[f"i.{n}"] for n, _ in ISSUE_EXTRAS}
        checked_extras(extras, n_issues, checks, len(shapes))
        time = checked.columns.time
        trace_end(checks, trace_fd, size, meta, len(time), int(time[-1]) if len(time) else 0)
        index = index_of(checks, checked, extras, shapes)
    finally:
        summing.join()
    if crc != [arrays_crc]:
        _refuse("its arrays are damaged")
    if content() != meta.get("content"):
        _refuse("the trace changed since its index was written")
    return index


def _places(places: Any, arrays_len: int, size: int) -> list[tuple[str, np.dtype, int, int]]:
    """(name, dtype, length, offset) of each array, if they are the arrays of an index of
    a trace of ``size`` bytes, each at the first aligned offset past the one before, the
    last ending the file."""
    if type(places) is not list or len(places) != len(_ARRAY_NAMES):
        _refuse("not the arrays of an index")
    out = []
    offset = 0
    # Events: at most one per MIN_EVENT_BYTES of the trace (see IndexBuilder.capacity_for).
    most = size // wire.MIN_EVENT_BYTES + 1
    for place, expected in zip(places, _ARRAY_NAMES, strict=True):
        if type(place) is not list or len(place) != 4:
            _refuse("an array's place")
        name, dtype, shape, at = place
        offset += -offset % _ALIGN
        if name != expected or dtype not in _ARRAY_DTYPES[expected] or at != offset:
            _refuse(f"array {expected}")
        if type(shape) is not list or len(shape) != 1 or type(shape[0]) is not int:
            _refuse(f"array {name}'s shape")
        if not 0 <= shape[0] <= most:
            _refuse(f"array {name} longer than its trace allows")
        out.append((name, np.dtype(dtype), shape[0], at))
        offset += shape[0] * np.dtype(dtype).itemsize
    if offset != arrays_len:
        _refuse("arrays not as long as the file says")
    return out


def _memory(length: int) -> Any:
    """``length`` bytes of the process's own memory (anonymous, private), faulted in at
    once in huge pages where the system allows: a page-by-page first touch costs three
    to five times more (and, in a virtual machine, about a millisecond a megabyte)."""
    if not length:
        return bytearray()
    try:
        memory = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (AttributeError, OSError, ValueError):
        return bytearray(length)
    for advice in (getattr(mmap, "MADV_HUGEPAGE", None), MADV_POPULATE_WRITE):
        if advice is not None:
            with contextlib.suppress(OSError, ValueError):
                memory.madvise(advice)
    return memory


def _read_arrays(fd: int, at: int, length: int) -> Any:
    """The ``length`` bytes of the file open at ``fd`` from ``at``, read (never mapped:
    the file may be cut or rewritten while they are in use) into memory of our own."""
    memory = _memory(length)
    view = memoryview(memory)
    try:
        for done in range(0, length, READ_BYTES):
            part = view[done : done + READ_BYTES]
            if os.preadv(fd, [part], at + done) != len(part):
                _refuse("cut short while it was read")
    finally:
        view.release()
    return memory


def _crc(memory: Any) -> int:
    """The CRC-32 of ``memory``, a chunk at a time."""
    crc = 0
    view = memoryview(memory)
    for done in range(0, len(view), READ_BYTES):
        crc = zlib.crc32(view[done : done + READ_BYTES], crc)
    view.release()
    return crc
