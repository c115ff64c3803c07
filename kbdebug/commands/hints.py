"""What to suggest when a file given to kbdebug is not what the command takes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kbdebug.launch.file import run_hint


def not_a_trace_hint(path: Path, head: bytes) -> str:
    """What the file that is not a kbt trace looks like and what to do with it ('' if unknown)."""
    start = head.lstrip()[:1]
    if path.suffix == ".py":
        return run_hint(path)
    if path.suffix == ".json" or (start in (b"{", b"[") and b"traceEvents" in head[:4096]):
        return (
            "it looks like Chrome trace JSON (what kbdebug export writes): open it at "
            "https://ui.perfetto.dev; kbdebug itself opens .kbt traces"
        )
    return ""


#: Bytes of a refused file read to recognise what it is.
HEAD_BYTES = 4096


def with_hint(message: str, path: str | os.PathLike[str]) -> str:
    """``message``, and what to do with the file at ``path`` when it is something kbdebug
    recognises (Chrome trace JSON, a kernel file). Only a regular file is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return message
    try:
        head = os.read(fd, HEAD_BYTES) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        head = b""
    finally:
        os.close(fd)
    hint = not_a_trace_hint(Path(path), head)
    return f"{message}; {hint}" if hint else message
