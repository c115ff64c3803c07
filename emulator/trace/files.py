"""Opening a trace's bytes for the reader: a regular file streamed in chunks, or bytes given."""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Callable

from emulator.trace.errors import TraceFormatError


class Chunks:
    """The bytes of a trace, read a chunk at a time: ``total`` bytes at most, fewer if the
    file ends early (it shrank while being read)."""

    def __init__(
        self, read: Callable[[int], bytes | memoryview], total: int, close: Callable[[], None]
    ):
        self.read = read
        self.total = total
        self.close = close

    def __enter__(self) -> Chunks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_FILE_TYPES = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_trace_file(path: str | os.PathLike[str]) -> tuple[int, int]:
    """Open ``path`` for reading as a trace: ``(fd, size)`` of a regular file.

    Opened non-blocking, so a FIFO without a writer cannot hang the caller, and then
    refused, as is anything else that is not a regular file (a device such as
    /dev/zero would be read until memory runs out): TraceFormatError naming what it
    is. A loop of symbolic links is a TraceFormatError too; other failures to open
    are OSError.
    """
    name = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise TraceFormatError(
                "a loop of symbolic links, not a trace file", source=name
            ) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            what = next((what for test, what in _FILE_TYPES if test(info.st_mode)), "special")
            raise TraceFormatError(f"is {what}, not a trace file", source=name)
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def open_source(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview,
) -> tuple[str, Chunks]:
    """The name to give in errors and the chunks of a trace given by path or by its bytes.

    A file is streamed, never read whole: a bad one fails at its first bad record.
    """
    if isinstance(source, str | os.PathLike):
        fd, size = open_trace_file(source)
        return os.fspath(source), Chunks(
            functools.partial(os.read, fd), size, functools.partial(os.close, fd)
        )
    view = memoryview(bytes(source))
    done = 0

    def read(n: int) -> memoryview:
        nonlocal done
        chunk = view[done : done + n]
        done += len(chunk)
        return chunk

    return "<bytes>", Chunks(read, len(view), view.release)
