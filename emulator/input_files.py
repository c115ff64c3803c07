"""Reading a small input file (a hardware TOML, a launch file) without trusting it.

Only a regular file is read: a FIFO would block forever, a device such as
/dev/zero would be read until memory runs out. The file is checked with
``os.stat`` before it is opened, opened non-blocking (a FIFO swapped in after the
check cannot block the open either), checked again once open, and read up to a
bound: a larger file is refused, not read.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["InputFileError", "read_input_file", "size_text"]

_FILE_TYPES = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class InputFileError(Exception):
    """The file cannot be read as an input: the message says why, without the path
    (the caller puts it in front); ``errno`` is the OSError's, if one was the cause."""

    def __init__(self, message: str, error_number: int | None = None):
        super().__init__(message)
        self.errno = error_number


def size_text(n: int) -> str:
    """``1 MiB``, ``64 KiB`` or ``123 bytes``: a bound as a message states it."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n:,} bytes"


def read_input_file(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    ``what`` names the kind of file in the message for one too large ("a
    hardware file"). Raises InputFileError for a missing or unreadable file,
    anything that is not a regular file, and a file over ``limit`` bytes.
    """
    name = os.fspath(path)
    try:
        _check_regular(os.stat(name).st_mode)
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise InputFileError(_os_reason(e), e.errno) from None
    try:
        info = os.fstat(fd)
        _check_regular(info.st_mode)  # what was opened, should it have changed since
        if info.st_size > limit:
            raise InputFileError(_too_large(info.st_size, limit, what))
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, limit + 1 - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as e:
        raise InputFileError(_os_reason(e), e.errno) from None
    finally:
        os.close(fd)
    if got > limit:  # it grew while being read
        raise InputFileError(_too_large(got, limit, what, more=True))
    return b"".join(chunks)


def _check_regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((kind for test, kind in _FILE_TYPES if test(mode)), "a special file")
        raise InputFileError(f"is {kind}, not a regular file")


def _too_large(size: int, limit: int, what: str, *, more: bool = False) -> str:
    over = "more than " if more else ""
    return f"{over}{size:,} bytes: {what} is read only up to {size_text(limit)}"


def _os_reason(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "a loop of symbolic links"
    return f"cannot read: {e.strerror or e}"
