"""One line for an exception the user's code raised: where it was raised (``FILE:LINE``)
and Python's own hint (``Did you mean: 'load_async'?``), which ``str(error)`` leaves out."""

from __future__ import annotations

import builtins
import difflib
import os
import re
import traceback
from pathlib import Path

from emulator.errors import DeadlockError, EmulatorError
from kbdebug.analysis.select import pes_text
from kbdebug.errors import UserError

__all__ = ["LaunchError", "describe", "failure_text", "python_hint", "where_raised"]

_ROOT = Path(__file__).resolve().parents[2]
# Frames in these folders are kbdebug's and the emulator's, not the user's.
_OURS = (str(_ROOT / "kbdebug") + os.sep, str(_ROOT / "emulator") + os.sep)
_HINT = re.compile(r"Did you mean:? [^\n]*\?")


class LaunchError(UserError):
    """The launch function raised: one line, and the traceback for ``--traceback``."""

    def __init__(self, message: str, details: str, status: int = 2):
        super().__init__(message, status)
        #: The whole traceback, as Python prints it.
        self.details = details


def failure_text(error: EmulatorError) -> str:
    """Why a run did not complete, worded as ``report`` and the app word its trace:
    ``deadlock on PEs 0, 1 at cycle 4: PE 0 waits on ...`` (the emulator's message
    starts ``deadlock at cycle 4``; run, sweep and explore print this instead)."""
    text = str(error)
    pes = sorted({pe for pe, _what, _loc in getattr(error, "blocked", [])})
    if isinstance(error, DeadlockError) and pes and text.startswith("deadlock at "):
        return f"deadlock on {pes_text(pes)}{text[len('deadlock') :]}"
    return text


def python_hint(error: BaseException) -> str:
    """Python's suggestion for a misspelt attribute or name (``Did you mean: 'put'?``),
    '' if it has none. Python 3.11 computes it only when it prints a traceback itself."""
    found = _HINT.search("".join(traceback.format_exception_only(error)))
    if found:
        return found.group(0)
    name = getattr(error, "name", None)
    if not isinstance(name, str) or not name:
        return ""
    if isinstance(error, AttributeError):
        obj = getattr(error, "obj", None)
        try:
            candidates = dir(obj) if obj is not None else []
        except Exception:  # noqa: BLE001 - the user's object: its __dir__ may raise
            candidates = []
    elif isinstance(error, NameError):
        frame = None
        tb = error.__traceback__
        while tb is not None:
            frame, tb = tb.tb_frame, tb.tb_next
        scopes = [frame.f_locals, frame.f_globals] if frame is not None else []
        candidates = [k for scope in scopes for k in scope] + dir(builtins)
    else:
        return ""
    if not name.startswith("_"):
        candidates = [c for c in candidates if isinstance(c, str) and not c.startswith("_")]
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f"Did you mean: {close[0]!r}?" if close else ""


def where_raised(error: BaseException, prefer: Path | None = None) -> str:
    """``FILE:LINE in FUNCTION`` of the deepest frame of ``prefer`` (the launch file) in
    the traceback, else the deepest outside kbdebug and the emulator; '' if neither."""
    frames = traceback.extract_tb(error.__traceback__)
    preferred = str(prefer.resolve()) if prefer is not None else None
    mine = [f for f in frames if preferred is not None and _resolved(f.filename) == preferred]
    users = [f for f in frames if not _resolved(f.filename).startswith(_OURS)]
    frame = (mine or users or [None])[-1]
    if frame is None:
        return ""
    return f"{Path(frame.filename).name}:{frame.lineno} in {frame.name}"


def describe(error: BaseException, prefer: Path | None = None) -> str:
    """``ValueError: n must be 2 (at launch.py:20 in launch) Did you mean: ...?``, cut to
    one line of at most 500 characters of the error's own text."""
    text = " ".join(str(error).split())[:500]
    what = f"{type(error).__name__}: {text}" if text else type(error).__name__
    where = where_raised(error, prefer)
    hint = python_hint(error)
    return what + (f" (at {where})" if where else "") + (f"; {hint}" if hint else "")


def _resolved(filename: str) -> str:
    try:
        return str(Path(filename).resolve())
    except (OSError, RuntimeError, ValueError):
        return filename
