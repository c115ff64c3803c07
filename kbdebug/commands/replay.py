"""kbdebug replay: open a trace in the terminal debugger (also ``kbdebug TRACE``, ``kbdebug``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from emulator.trace.errors import TraceFormatError
from emulator.trace.reader import open_trace_file, read_trace
from kbdebug.cli import UserError

#: Opened by a bare ``kbdebug``.
BUNDLED_TRACE = "flawed_prefetch.kbt"
#: Traces up to this size are opened before the screen is drawn (a fraction of a second);
#: larger ones only have their header checked first and load in a worker with a progress bar.
OPEN_BEFORE_SCREEN_BYTES = 2 << 20
#: Bytes read to check a large trace's header before the screen is drawn.
HEADER_PROBE_BYTES = 256 << 10


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "replay",
        help="step through a trace in the terminal debugger (the default command)",
        description="Open a .kbt trace in the terminal debugger: a timeline of channel "
        "occupancy, the kernel source, every future from issue to resolution, stepping "
        "both ways and breaking on a stalled tl.wait. Press ? in the app for its keys.",
    )
    parser.add_argument(
        "trace",
        nargs="?",
        help=f"the .kbt file (default: the bundled traces/{BUNDLED_TRACE})",
    )
    return parser


def bundled_trace() -> Path:
    """The bundled flawed-prefetch trace, relative to the project root."""
    import kbdebug

    return Path(kbdebug.__file__).resolve().parents[1] / "traces" / BUNDLED_TRACE


def check_header(path: Path) -> None:
    """Read the start of ``path`` and validate its header; UserError if it is not a trace."""
    # Opened as the reader opens a trace: a FIFO, a device or a symlink loop is refused
    # in one line instead of hanging the app or reading /dev/zero.
    try:
        fd, _ = open_trace_file(path)
        try:
            head = os.read(fd, HEADER_PROBE_BYTES)
        finally:
            os.close(fd)
    except TraceFormatError as e:
        raise UserError(" ".join(str(e).split())) from None
    except OSError as e:
        raise UserError(_os_error(e, path)) from None
    try:
        probe = read_trace(head)
    except TraceFormatError as e:
        where = f"at byte {e.offset}: " if e.offset is not None else ""
        raise UserError(f"{path}: {where}{e.reason}") from None
    if probe.version is None:
        what = "empty file" if not head else "the file ends inside the header"
        raise UserError(f"{path}: not a kbt trace ({what})")


def run(args: argparse.Namespace) -> int:
    from kbdebug.replay import Replay

    if args.trace is None:
        path = bundled_trace()
        if not path.is_file():
            raise UserError(f"the bundled trace {path} is missing; give a trace: kbdebug TRACE.kbt")
    else:
        path = Path(args.trace)
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not a trace")
    check_header(path)
    replay = None
    if os.path.getsize(path) <= OPEN_BEFORE_SCREEN_BYTES:
        try:
            replay = Replay.open(path)
        except TraceFormatError as e:
            raise UserError(" ".join(str(e).split())) from None
        except OSError as e:
            raise UserError(_os_error(e, path)) from None

    from kbdebug.ui import KbdebugApp

    app = KbdebugApp(path=str(path), replay=replay)
    app.run()
    if app.load_error is not None:
        raise UserError(app.load_error)
    return 0


def _os_error(error: OSError, path: Path) -> str:
    if isinstance(error, FileNotFoundError):
        return f"{path}: no such file"
    if isinstance(error, PermissionError):
        return f"{path}: permission denied"
    return f"{path}: {error.strerror or error}"
