"""The kbdebug command line: dispatch to one module per subcommand, errors as one line."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from kbdebug import __version__
from kbdebug.errors import UserError
from kbdebug.safe_text import escape

__all__ = ["UserError", "build_parser", "main"]

#: Subcommand name -> module under kbdebug.commands.
SUBCOMMANDS = {
    "replay": "kbdebug.commands.replay",
    "run": "kbdebug.commands.run",
    "report": "kbdebug.commands.report",
    "export": "kbdebug.commands.export",
    "diff": "kbdebug.commands.diff",
    "compare": "kbdebug.commands.compare",
    "sweep": "kbdebug.commands.sweep",
    "explore": "kbdebug.commands.explore",
    "hw": "kbdebug.commands.hw",
    "serve": "kbdebug.commands.serve",
}

EPILOG = """\
examples:
  kbdebug                          open the bundled flawed-prefetch trace
  kbdebug traces/decode_blocking.kbt
  kbdebug run decode_prefetch --set n_tiles=64 -o decode.kbt
  kbdebug report decode.kbt --fail-on any
"""


def _available() -> dict[str, object]:
    modules = {}
    for name, path in SUBCOMMANDS.items():
        try:
            modules[name] = importlib.import_module(path)
        except ModuleNotFoundError as e:
            if e.name != path:
                raise
    return modules


def build_parser(modules: dict[str, object] | None = None) -> argparse.ArgumentParser:
    modules = _available() if modules is None else modules
    parser = argparse.ArgumentParser(
        prog="kbdebug",
        description="Trace debugger for asynchronous kernel loads: record a kernel's run in "
        "the emulator, then step through it, both ways.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kbdebug {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in modules.values():
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    modules = _available()
    # `kbdebug TRACE` and a bare `kbdebug` mean `kbdebug replay ...`; `kbdebug A B` means
    # `kbdebug compare A B`.
    if not argv or (argv[0] not in modules and argv[0][:1] != "-"):
        positional = [a for a in argv if a[:1] != "-"]
        if len(positional) > 2:
            shown = " ".join(escape(a, 80) for a in positional[:4])
            more = " ..." if len(positional) > 4 else ""
            print(
                f"kbdebug: {len(positional)} traces given ({shown}{more}): kbdebug TRACE opens "
                "one, kbdebug A B compares two; for more runs, kbdebug diff A B for each pair "
                "or kbdebug sweep to run them as one grid",
                file=sys.stderr,
            )
            return 2
        if "compare" in modules and len(positional) == 2:
            argv = ["compare", *argv]
        elif "replay" in modules:
            argv = ["replay", *argv]
    parser = build_parser(modules)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(modules[args.command].run(args) or 0)
    except UserError as e:
        # Messages carry text from traces and from user kernels' exceptions: a control
        # character there must not drive the terminal.
        text = "\n".join(escape(line) for line in str(e).split("\n"))
        print(f"kbdebug {args.command}: {text}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        print(f"kbdebug {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of our output went away (kbdebug report | head): not an error.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's flush quiet
        return 0


if __name__ == "__main__":
    sys.exit(main())
