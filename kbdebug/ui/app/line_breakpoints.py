"""toggle_line: b on a source line, the same in both modes (gdb-like)."""

from __future__ import annotations

from typing import NamedTuple

from kbdebug.replay import Replay, SourceLine
from kbdebug.ui import queries


class Toggled(NamedTuple):
    """What ``b`` did: whether breakpoints changed, what to say, and whether it refused."""

    changed: bool
    status: str
    refused: bool = False


def toggle_line(replay: Replay, file: str, line: int) -> Toggled:
    """Remove ``replay``'s breakpoints on ``file``:``line``, or add one.

    As gdb does, a line that never stops moves the new breakpoint to the next line
    that does; past the last one nothing is set.
    """
    bps = replay.breakpoints
    here = [
        b for b in bps if isinstance(b, SourceLine) and b.line == line and b.file in (None, file)
    ]
    where = queries.short_loc_of(file, line)
    if here:
        for bp in here:
            bps.remove(bp)
        return Toggled(True, f"removed the breakpoint at {where}")
    hits = len(SourceLine(file=file, line=line).hits(replay))
    if hits:
        bps.append(SourceLine(file=file, line=line))
        return Toggled(True, f"breakpoint at {where} ({_stops(hits)})")
    found = queries.next_breakable_line(replay, file, line)
    if found is None:
        return Toggled(False, f"no tl call at or after {where}: no breakpoint set", refused=True)
    moved, hits = found
    new = queries.short_loc_of(file, moved)
    if any(isinstance(b, SourceLine) and b.line == moved and b.file in (None, file) for b in bps):
        return Toggled(
            False, f"no tl call on {where}: {new}, the next line with one, has a breakpoint already"
        )
    bps.append(SourceLine(file=file, line=moved))
    return Toggled(True, f"no tl call on {where}: breakpoint moved to {new} ({_stops(hits)})")


def _stops(hits: int) -> str:
    """``16 stops in this trace``."""
    return f"{hits:,} stop{'s' if hits != 1 else ''} in this trace"
