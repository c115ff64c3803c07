"""The error a .kbt reader raises for anything that is not a valid trace."""

from __future__ import annotations

import re

# Control characters (C0, DEL, C1), bidi overrides and lone surrogates: the message names
# a file and quotes a trace, and is printed to a terminal (kbdebug.safe_text does the
# same for kbdebug, which the emulator may not import).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _shown(text: str) -> str:
    return _UNSAFE.sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else f"\\u{ord(m.group()):04x}"
        ),
        text,
    )


class TraceFormatError(ValueError):
    """A trace that is not a well-formed .kbt file, naming what was wrong and where.

    ``source`` is the path (or ``"<bytes>"``), ``offset`` the byte offset of the
    offending record (or None), ``event_index`` the 0-based index among the
    trace's event records of the offending event (None if the error is not in an
    event record), ``reason`` the bare description.
    """

    def __init__(
        self,
        reason: str,
        *,
        source: str = "<trace>",
        offset: int | None = None,
        event_index: int | None = None,
    ) -> None:
        self.reason = reason
        self.source = source
        self.offset = offset
        self.event_index = event_index
        where = []
        if event_index is not None:
            where.append(f"event {event_index}")
        if offset is not None:
            where.append(f"at byte {offset}")
        prefix = f"{source}: " + (" ".join(where) + ": " if where else "")
        # One line, control characters escaped: it goes to a terminal as it is.
        super().__init__(_shown(prefix + reason))
