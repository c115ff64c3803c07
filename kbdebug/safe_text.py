"""Escape untrusted text (anything read from a trace) before it reaches a terminal."""

from __future__ import annotations

import re

#: Longest text shown by default; longer text is cut with an ellipsis.
DEFAULT_LIMIT = 4096

# C0 controls, DEL, C1 controls, and the bidi overrides and isolates that reorder what follows.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: object, limit: int = DEFAULT_LIMIT) -> str:
    """``text`` with control characters shown as ``\\x1b`` and cut to ``limit`` characters."""
    s = text if isinstance(text, str) else str(text)
    if len(s) > limit:
        s = s[:limit] + "…"
    return _UNSAFE.sub(_escaped, s)
