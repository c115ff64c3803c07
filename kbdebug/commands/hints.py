"""What to suggest when a file given to kbdebug is not what the command takes."""

from __future__ import annotations

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
