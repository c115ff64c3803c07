"""kbdebug replay: open a trace in the terminal debugger (also ``kbdebug TRACE``, ``kbdebug``)."""

from __future__ import annotations

import argparse
import hashlib
import inspect
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from emulator.trace.errors import TraceFormatError
from emulator.trace.reader import open_trace_file, read_trace
from emulator.trace.writer import TraceWriter
from kbdebug import __version__
from kbdebug.commands.hints import not_a_trace_hint
from kbdebug.errors import UserError
from kbdebug.replay.cache import cache_root

if TYPE_CHECKING:
    from kbdebug.ui import KbdebugApp

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
    """The bundled flawed-prefetch trace.

    In a checkout (or an editable install) it is the project's traces/ file. A
    package installed without it (``pip install .``, a wheel) records the same
    trace once into the cache directory and opens that.
    """
    import kbdebug

    checkout = Path(kbdebug.__file__).resolve().parents[1] / "traces" / BUNDLED_TRACE
    return checkout if checkout.is_file() else recorded_example()


def recorded_example() -> Path:
    """The flawed-prefetch trace recorded by this installation, recorded now if need be.

    Kept under a digest of the emulator's sources: another version records its own.
    An unwritable cache directory falls back to a temporary one.
    """
    from emulator.scenarios import SCENARIOS

    # One folder per digest, so the app's title shows the trace's own name.
    digest = _emulator_digest()
    name = BUNDLED_TRACE
    root = cache_root()  # None: the cache is turned off, so a temporary folder
    folders = [] if root is None else [root / "examples" / digest]
    folders.append(Path(tempfile.gettempdir()) / f"kbdebug-{os.getuid()}" / digest)
    for folder in folders:
        path = folder / name
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if folder.stat().st_uid != os.getuid():
                continue  # a shared temporary folder someone else made: not ours to trust
            if path.is_file():
                return path
            fd, temp = tempfile.mkstemp(dir=folder, prefix=name, suffix=".partial")
        except OSError:
            continue
        print(f"kbdebug: recording the example trace once into {path}", file=sys.stderr)
        try:
            # As the bundled trace was recorded: what `kbdebug run` writes by default,
            # the footer holding the output check's verdict.
            scenario = SCENARIOS[Path(BUNDLED_TRACE).stem]()
            with os.fdopen(fd, "wb") as f, TraceWriter(f, hold_footer=True) as writer:
                scenario.run(recorder=writer)
                scenario.check(scenario.memory)
                writer.finish({"ok": True, "message": None, "block": None})
            os.replace(temp, path)
        except OSError:
            Path(temp).unlink(missing_ok=True)
            continue
        return path
    raise UserError(
        "the bundled trace is missing and cannot be recorded; give a trace: kbdebug TRACE.kbt"
    )


def _emulator_digest() -> str:
    """A short digest of the emulator's Python sources (what the recorded trace depends on)."""
    import emulator

    digest = hashlib.sha256(__version__.encode())
    root = Path(emulator.__file__).resolve().parent
    for source in sorted(root.rglob("*.py")):
        digest.update(source.relative_to(root).as_posix().encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16]


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
        raise UserError(os_error_message(e, path)) from None
    try:
        probe = read_trace(head)
    except TraceFormatError as e:
        where = f"at byte {e.offset}: " if e.offset is not None else ""
        raise UserError(_with_hint(f"{path}: {where}{e.reason}", path, head)) from None
    if probe.version is None:
        what = "empty file" if not head else "the file ends inside the header"
        raise UserError(_with_hint(f"{path}: not a kbt trace ({what})", path, head))


def _with_hint(message: str, path: Path, head: bytes) -> str:
    hint = not_a_trace_hint(path, head)
    return f"{message}; {hint}" if hint else message


def run(args: argparse.Namespace) -> int:
    if args.trace is None:
        path = bundled_trace()
        if not path.is_file():
            raise UserError(f"the bundled trace {path} is missing; give a trace: kbdebug TRACE.kbt")
    else:
        path = Path(args.trace)
    return open_app(path)


def open_app(path: Path, rerun: Sequence[str] | None = None) -> int:
    """Open the trace at ``path`` in the app until it quits; UserError if it cannot be opened.

    ``rerun`` is the ``kbdebug`` argv (``run ...``) that records the trace again:
    the app offers a key for it when it knows how.
    """
    app = make_app(path, rerun)
    app.run()
    if app.load_error is not None:
        raise UserError(app.load_error)
    return 0


def make_app(
    path: Path, rerun: Sequence[str] | None = None, open_at: tuple[int, str] | None = None
) -> KbdebugApp:
    """The app on the trace at ``path``, not yet running (UserError: see open_app);
    ``open_at`` (position, why): where it opens, and what its status says.

    A small trace is opened here, before the first screen; a large one starts
    opening on a thread of its own before the app's modules are even imported, and
    the app collects it (with a progress bar) once its screen is up.
    """
    from kbdebug.replay import Replay
    from kbdebug.replay.opening import Opening

    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not a trace")
    check_header(path)
    replay = opening = None
    if os.path.getsize(path) <= OPEN_BEFORE_SCREEN_BYTES:
        try:
            replay = Replay.open(path)
        except TraceFormatError as e:
            raise UserError(" ".join(str(e).split())) from None
        except OSError as e:
            raise UserError(os_error_message(e, path)) from None
    else:
        opening = Opening(path)

    from kbdebug.ui import KbdebugApp

    options: dict[str, object] = {}
    if rerun is not None and "rerun" in inspect.signature(KbdebugApp).parameters:
        options["rerun"] = list(rerun)
    if open_at is not None:
        options["open_at"] = open_at
    return KbdebugApp(path=str(path), replay=replay, opening=opening, **options)


def os_error_message(error: OSError, path: Path) -> str:
    """The one line for a trace that cannot be opened (``compare`` says it the same way)."""
    if isinstance(error, FileNotFoundError):
        return f"{path}: no such file"
    if isinstance(error, PermissionError):
        return f"{path}: permission denied"
    return f"{path}: {error.strerror or error}"
