"""kbdebug compare A B (or ``kbdebug A.kbt B.kbt``): two runs in one app, linked by call."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from emulator.trace.errors import TraceFormatError
from kbdebug.commands.replay import OPEN_BEFORE_SCREEN_BYTES, check_header, os_error_message
from kbdebug.errors import UserError
from kbdebug.safe_text import escape


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "compare",
        help="open two traces side by side: before and after a fix (also: kbdebug A.kbt B.kbt)",
        description="Open run A (before) and run B (after) in one app: A's lanes above B's on "
        "one time axis, cursors linked call by call (the same source call, matched across "
        "edits, the same occurrence), stall per source line in both, the future under the "
        "cursor in both, findings fixed / new / still there. Press ? in the app for its keys.",
        epilog="example:\n  kbdebug traces/flawed_prefetch.kbt traces/decode_prefetch.kbt",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("a", metavar="A", help="the trace before (baseline)")
    parser.add_argument("b", metavar="B", help="the trace after")
    return parser


def open_run(path_text: str):
    """Check one trace's header (UserError, one line naming it, if it is no trace); return
    it opened when it is small, else its path (the app opens it with a progress bar)."""
    from kbdebug.replay import Replay

    path = Path(path_text)
    if path.is_dir():
        raise UserError(f"{escape(str(path), 512)}: is a directory, not a trace")
    try:
        check_header(path)
    except UserError as e:
        # Its message quotes the path, which may hold control characters.
        raise UserError(escape(str(e), 1024)) from None
    try:
        if os.path.getsize(path) > OPEN_BEFORE_SCREEN_BYTES:
            return str(path)
        return Replay.open(path)
    except TraceFormatError as e:
        raise UserError(escape(" ".join(str(e).split()), 1024)) from None
    except OSError as e:
        raise UserError(escape(os_error_message(e, path), 1024)) from None


def run(args: argparse.Namespace) -> int:
    return open_compare(open_run(args.a), open_run(args.b))


def open_compare(a, b) -> int:
    """Run the compare app on ``a`` and ``b`` (what :func:`open_run` returned) until it
    quits; UserError if a trace cannot be opened."""
    from kbdebug.ui.compare.app import CompareApp

    app = CompareApp(a, b)
    app.run()
    if app.load_error is not None:
        raise UserError(escape(app.load_error, 1024))
    return 0
