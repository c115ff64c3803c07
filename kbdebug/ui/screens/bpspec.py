"""Breakpoints typed as text in the breakpoint list, parsed into replay breakpoints."""

from __future__ import annotations

import re

from emulator.trace.schema import Kind
from kbdebug.replay import (
    Breakpoint,
    Cycle,
    EventKind,
    FindingHit,
    FuturePhase,
    HazardHit,
    SourceLine,
    StalledWait,
)

#: Shown under the input box of the breakpoint list.
SYNTAX = (
    "wait [>= N] [pe P] [at FILE:LINE]   line [FILE:]LINE [pe P]   future N [PHASE]   "
    "cycle N   kind KIND [pe P]   finding [RULE]   hazard [RULE]"
)


def parse_breakpoint(text: str) -> Breakpoint:
    """A breakpoint from text such as ``wait >= 500 pe 0``, ``line 86`` or ``future 12 ready``.

    Raises ValueError saying what was not understood.
    """
    words = text.replace(">=", " >= ").split()
    if not words:
        raise ValueError("empty breakpoint; try: " + SYNTAX)
    head, rest = words[0].lower(), words[1:]
    if head in ("wait", "stall", "stalled", "w"):
        opts = _options(rest, numbers=True)
        return StalledWait(
            min_stall=opts.get("min", 1), pe=opts.get("pe"), file=opts.get("file"),
            line=opts.get("line"),
        )  # fmt: skip
    if head in ("line", "b", "break") or re.fullmatch(r"[^\s]*:\d+|\d+", words[0]):
        if head in ("line", "b", "break"):
            if not rest:
                raise ValueError("line needs a number or FILE:LINE")
            words = rest
        file, line = _file_line(words[0])
        opts = _options(words[1:])
        return SourceLine(file=file, line=line, pe=opts.get("pe"))
    if head == "future":
        if not rest or not rest[0].isdigit():
            raise ValueError("future needs an id: future 12 [issued|queued|...|resolved]")
        phase = rest[1].lower() if len(rest) > 1 else "resolved"
        return FuturePhase(future=int(rest[0]), phase=phase)
    if head in ("cycle", "t") or re.fullmatch(r"t\d+", head):
        value = head[1:] if head != "t" and head.startswith("t") else (rest[0] if rest else "")
        if not value.isdigit():
            raise ValueError("cycle needs a number: cycle 5000")
        return Cycle(cycle=int(value))
    if head == "kind" or head in {k.name.lower() for k in Kind}:
        name = (rest[0] if head == "kind" and rest else head).lower()
        kinds = {k.name.lower(): k for k in Kind}
        if name not in kinds:
            raise ValueError(f"unknown event kind {name!r} (one of {', '.join(kinds)})")
        opts = _options(rest[1:] if head == "kind" else rest)
        return EventKind(kind=kinds[name], pe=opts.get("pe"))
    if head == "finding":
        return FindingHit(prefix=rest[0] if rest else "")
    if head == "hazard":
        return HazardHit(rule=rest[0].upper() if rest else "")
    raise ValueError(f"not a breakpoint: {text.strip()!r}; try: " + SYNTAX)


def _file_line(word: str) -> tuple[str | None, int]:
    file, _, line = word.rpartition(":")
    if not line.isdigit():
        raise ValueError(f"expected LINE or FILE:LINE, got {word!r}")
    return (file or None), int(line)


def _options(words: list[str], numbers: bool = False) -> dict:
    """``pe P``, ``at FILE:LINE`` and (for waits) ``>= N`` / ``N`` / ``min N``."""
    opts: dict = {}
    i = 0
    while i < len(words):
        word = words[i].lower()
        value = words[i + 1] if i + 1 < len(words) else None
        if word == "pe" and value is not None and value.isdigit():
            opts["pe"] = int(value)
            i += 2
        elif re.fullmatch(r"pe\d+", word):
            opts["pe"] = int(word[2:])
            i += 1
        elif word in ("at", "line") and value is not None:
            opts["file"], opts["line"] = _file_line(value)
            i += 2
        elif numbers and word in (">=", "min") and value is not None and value.isdigit():
            opts["min"] = int(value)
            i += 2
        elif numbers and word.isdigit():
            opts["min"] = int(word)
            i += 1
        else:
            raise ValueError(f"did not understand {words[i]!r}")
    return opts
