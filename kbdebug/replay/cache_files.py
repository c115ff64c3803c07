"""The index cache's files on disk: which ones kbdebug reads, writes and removes.

A file in the cache directory is read only if it is a regular file (opened without
following a symbolic link, without blocking: a FIFO or a device at its name is refused
at once), owned by this user and writable by no one else. It is removed only if its
name is one kbdebug gives its files and its first bytes are those kbdebug writes:
an index file (``DEV-INO-HASH.kbi``, starting with ``MAGIC``), or the temporary file
of a write (``.kbi-HOST-PID-TOKEN.part``), once the process that was writing it is
gone (its PID no longer runs on this host), or, written on another host, after an hour.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import socket
import stat
import time
from pathlib import Path

log = logging.getLogger(__name__)

#: The first bytes of every file kbdebug writes in the cache directory.
MAGIC = b"KBDIDX\x00\x01"
#: An index file's name: the trace's device and inode (hex), a hash of its key.
INDEX_NAME = re.compile(r"[0-9a-f]+-[0-9a-f]+-[0-9a-f]{24}\.kbi")
#: A write in progress: the writer's host and PID, and a random token.
TEMP_NAME = re.compile(r"\.kbi-(?P<host>[A-Za-z0-9.]{1,64})-(?P<pid>[0-9]{1,10})-[0-9a-f]{8}\.part")
#: The temporary files of kbdebug before 0.2 (tempfile.mkstemp's names): no PID in them.
OLD_TEMP_NAME = re.compile(r"\.tmp-[A-Za-z0-9_]{8}\.part")
#: A temporary file of another host (whose PIDs cannot be looked up) this old is stale.
STALE_TEMP_SECONDS = 3600

_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "", socket.gethostname())[:64] or "host"


HOST = _host()


def open_own(path: Path) -> int | None:
    """A read-only descriptor of ``path`` if it is a regular file of this user that no
    one else can write, else None. Never blocks, never follows a symbolic link."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if (
        not stat.S_ISREG(info.st_mode)
        or info.st_uid != os.geteuid()
        or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ):
        os.close(fd)
        return None
    return fd


def written_by_kbdebug(path: Path, *, empty_ok: bool = False) -> bool:
    """Whether ``path`` is a file of ours (see open_own) that starts as kbdebug's files
    do (``empty_ok``: or is empty, a write killed before its first bytes)."""
    fd = open_own(path)
    if fd is None:
        return False
    try:
        head = os.pread(fd, len(MAGIC), 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    return head == MAGIC or (empty_ok and head == b"")


def remove_if_ours(path: Path, *, empty_ok: bool = False) -> bool:
    """Remove ``path`` if kbdebug wrote it (see written_by_kbdebug); whether it did."""
    if not written_by_kbdebug(path, empty_ok=empty_ok):
        return False
    try:
        path.unlink()
    except OSError:
        return False
    return True


def create_temp(directory: Path) -> tuple[int, Path]:
    """A new temporary file for a write, named with this host and PID (see TEMP_NAME)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    while True:
        path = directory / f".kbi-{HOST}-{os.getpid()}-{secrets.token_hex(4)}.part"
        try:
            return os.open(path, flags, 0o600), path
        except FileExistsError:
            continue


def _running(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (ours, or one we may not signal)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def _stale_temp(name: str, mtime: float, now: float) -> bool:
    """Whether the temporary file ``name`` (modified at ``mtime``) is a write that died."""
    match = TEMP_NAME.fullmatch(name)
    if match is not None:
        pid = int(match["pid"])
        if match["host"] == HOST:
            return pid > 0 and not _running(pid)
        return now - mtime > STALE_TEMP_SECONDS
    return OLD_TEMP_NAME.fullmatch(name) is not None and now - mtime > STALE_TEMP_SECONDS


def _entries(directory: Path, temps: bool = False) -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of each regular file of ours in ``directory`` (none if unreadable):
    of each index file by its name, or with ``temps`` of each temporary file."""
    out = []
    uid = os.geteuid()
    try:
        with os.scandir(directory) as scan:
            for entry in scan:
                name = entry.name
                if temps != (name.startswith(".") and name.endswith(".part")):
                    continue
                if not temps and INDEX_NAME.fullmatch(name) is None:
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode) and info.st_uid == uid:
                    out.append((name, info))
    except OSError:
        pass
    return out


def remove_leftovers(directory: Path) -> None:
    """Remove the temporary files of writes that died (a killed process's)."""
    now = time.time()
    for name, info in _entries(directory, temps=True):
        if _stale_temp(name, info.st_mtime, now) and remove_if_ours(
            directory / name, empty_ok=True
        ):
            log.debug("removed %s, left by a write that did not finish", name)


def index_files(directory: Path, prefix: str = "") -> list[tuple[Path, os.stat_result]]:
    """The index files kbdebug wrote in ``directory`` (whose name starts with ``prefix``)."""
    return [
        (directory / name, info)
        for name, info in _entries(directory)
        if name.startswith(prefix) and written_by_kbdebug(directory / name)
    ]


def prune(directory: Path, budget: int, keep: Path | None = None) -> None:
    """Remove the least recently used index files past ``budget`` bytes (never ``keep``),
    and the leftovers of writes that died."""
    remove_leftovers(directory)
    files = index_files(directory)
    total = sum(info.st_size for _, info in files)
    for path, info in sorted(files, key=lambda f: f[1].st_mtime):
        if total <= budget:
            break
        if path == keep:
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            total -= info.st_size
