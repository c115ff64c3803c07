"""`kbdebug export TRACE -o OUT.json`: a trace as Chrome Trace Event JSON for Perfetto or chrome://tracing."""

from __future__ import annotations

import argparse
from pathlib import Path

from emulator.trace.errors import TraceFormatError
from kbdebug.errors import UserError
from kbdebug.export.chrome import write_chrome
from kbdebug.replay.replay import Replay

DESCRIPTION = """\
Write a trace as Chrome Trace Event JSON, for https://ui.perfetto.dev (Open trace
file) or chrome://tracing (Load).

One process per PE, one lane per kernel, DMA channel and engine; slices for
every transfer and compute command and every stalled wait; an async slice per
future from issue to resolution; a flow arrow from each transfer to the wait it
made stall; scratch in use as a counter; findings as instants. Times are in
microseconds at the trace's clock (cycle / clock_mhz).
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export",
        help="write a trace as Chrome/Perfetto trace JSON",
        description=DESCRIPTION,
        epilog="example:\n  kbdebug export decode.kbt -o decode.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("trace", metavar="TRACE", help="a .kbt trace file")
    p.add_argument(
        "-o", "--output", metavar="OUT.json", help="output file (default: TRACE with .json)"
    )


def run(args: argparse.Namespace) -> int:
    trace = Path(args.trace)
    output = Path(args.output) if args.output else trace.with_suffix(".json")
    if output.resolve() == trace.resolve():
        raise UserError(f"{output}: the output would overwrite the trace")
    replay = open_replay(trace)
    try:
        stats = write_chrome(replay, output)
    except OSError as e:
        raise UserError(f"cannot write {output}: {e.strerror or e}") from None
    print(
        f"wrote {output} ({stats.bytes:,} bytes, {stats.events:,} events) from "
        f"{replay.n_events:,} trace events at {stats.clock_mhz:g} MHz"
    )
    if stats.clock_assumed:
        print(f"note: the trace names no clock; assumed {stats.clock_mhz:g} MHz")
    if replay.status == "truncated":
        print(f"note: the trace is truncated; exported up to cycle {replay.end_time:,}")
    print("open it in https://ui.perfetto.dev or chrome://tracing")
    return 0


def open_replay(path: Path) -> Replay:
    """Open a trace, or raise UserError in one line naming the file and the problem."""
    try:
        replay = Replay.open(path)
    except TraceFormatError as e:
        raise UserError(" ".join(str(e).split())) from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a trace") from None
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror or e}") from None
    if not replay.index.header:
        raise UserError(f"{path}: no header: not a trace, or one cut off before its first record")
    return replay
