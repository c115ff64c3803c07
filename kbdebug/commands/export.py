"""`kbdebug export TRACE -o OUT.json`: a trace as Chrome Trace Event JSON for Perfetto or
chrome://tracing; `-o OUT.pftrace` as Perfetto's protobuf; `--parquet DIR` as Parquet tables."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from emulator.trace.errors import TraceFormatError
from kbdebug.errors import UserError
from kbdebug.export.chrome import export_chrome
from kbdebug.export.parquet import ParquetExists, ParquetMissing, export_parquet
from kbdebug.export.perfetto import PerfettoMissing, export_perfetto, is_perfetto_export
from kbdebug.outputs import Output, names_stdout, status_lines
from kbdebug.replay.replay import Replay

DESCRIPTION = """\
Write a trace as Chrome Trace Event JSON, for https://ui.perfetto.dev (Open trace
file) or chrome://tracing (Load).

One process per PE, one lane per kernel, DMA channel and engine; slices for
every transfer and compute command and every stalled wait; an async slice per
future from issue to resolution; a flow arrow from each transfer to the wait it
made stall; scratch in use as a counter; findings as instants. Times are in
microseconds at the trace's clock (cycle / clock_mhz).

OUT appears only once the export is whole (it is written to OUT.partial-PID
beside it, then renamed). An existing OUT is replaced only if kbdebug export
wrote it (or it is empty); --force replaces anything. A device or FIFO is
written directly. -o - (or /dev/stdout) writes the JSON to stdout, and every
status line to stderr.

-o OUT.pftrace writes Perfetto's own protobuf format instead (TrackEvent: a track
per PE's kernel, channel, scratch counter and futures; flows from each future's
issue to its wait, by id; interned names and source locations), several times
smaller than the JSON. It needs the perfetto package: pip install 'kbdebug[perfetto]'.

--parquet DIR writes Parquet tables for SQL and dataframes (DuckDB, pandas, polars)
into DIR: events, futures (issue, grant, complete, wait, stall, line, PE, tensor
slice), findings, pes (per-PE figures) and locations; docs/sql.md has queries. An
existing table file there is replaced only with --force. It needs pyarrow:
pip install 'kbdebug[parquet]'.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export",
        help="write a trace as Chrome/Perfetto trace JSON",
        description=DESCRIPTION,
        epilog="examples:\n  kbdebug export decode.kbt -o decode.json\n"
        "  kbdebug export decode.kbt -o decode.pftrace\n"
        "  kbdebug export decode.kbt --parquet decode-tables/",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("trace", metavar="TRACE", help="a .kbt trace file")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT.json",
        help="output file (default: TRACE with .json); - for stdout; "
        "OUT.pftrace: Perfetto's protobuf format",
    )
    p.add_argument(
        "--parquet",
        metavar="DIR",
        help="write Parquet tables (events, futures, findings, pes, locations) into DIR",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace OUT even if kbdebug export did not write it (or the tables in DIR)",
    )


def run(args: argparse.Namespace) -> int:
    # -o - (or /dev/stdout): stdout carries the JSON, so every status line goes to stderr.
    with status_lines(args.output):
        return _export(args)


def _export(args: argparse.Namespace) -> int:
    trace = Path(args.trace)
    if args.parquet is not None:
        if args.output is not None:
            raise UserError("give -o OUT or --parquet DIR, not both")
        return _export_parquet(open_replay(trace), Path(args.parquet), args.force)
    output = Path(args.output) if args.output else trace.with_suffix(".json")
    # Open the trace first: it names a bad input (a symlink loop, a FIFO) in one line.
    replay = open_replay(trace)
    if not names_stdout(output):
        try:
            same = output.resolve() == trace.resolve()
        except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop in the output path
            raise UserError(f"{output}: cannot resolve the path: {e}") from None
        if same:
            raise UserError(f"{output}: the output would overwrite the trace")
    if output.suffix == PERFETTO_SUFFIX:
        return _export_perfetto(replay, trace, output, args.force)
    out = Output(output, what="a kbdebug export", ours=_is_export, force=args.force, stdout=True)
    if out.stdout and os.path.samestat(os.fstat(1), os.stat(trace)):
        # Stdout opened on the trace itself (>> TRACE) would append the JSON to it.
        raise UserError(f"{out.name}: the output would overwrite the trace")
    f = out.open("w", encoding="utf-8", newline="\n")
    try:
        stats = export_chrome(replay, f)
    except OSError as e:
        out.discard()
        raise UserError(f"cannot write {out.name}: {e.strerror or e}", status=1) from None
    except BaseException:
        out.discard()  # a half-written JSON is of no use to anyone
        raise
    out.commit()  # flushes the last bytes: a full disk may only show here
    stats.path = os.fspath(output)
    stats.bytes = 0 if out.stream else output.stat().st_size
    size = "" if out.stream else f"{stats.bytes:,} bytes, "
    print(
        f"wrote {out.name} ({size}{stats.events:,} events) from "
        f"{replay.n_events:,} trace events at {stats.clock_mhz:g} MHz"
    )
    if stats.clock_assumed:
        print(f"note: the trace names no usable clock; assumed {stats.clock_mhz:g} MHz")
    if replay.status == "truncated":
        print(f"note: the trace is truncated; exported up to cycle {replay.end_time:,}")
    print("open it in https://ui.perfetto.dev or chrome://tracing")
    return 0


#: The suffix of OUT that selects Perfetto's protobuf format.
PERFETTO_SUFFIX = ".pftrace"


def _export_perfetto(replay: Replay, trace: Path, output: Path, force: bool) -> int:
    out = Output(output, what="a kbdebug export", ours=is_perfetto_export, force=force, binary=True)
    f = out.open("wb")
    try:
        stats = export_perfetto(replay, f)
    except PerfettoMissing as e:
        out.discard()
        raise UserError(str(e)) from None
    except OSError as e:
        out.discard()
        raise UserError(f"cannot write {out.name}: {e.strerror or e}", status=1) from None
    except BaseException:
        out.discard()
        raise
    out.commit()
    size = "" if out.stream else f"{output.stat().st_size:,} bytes, "
    print(
        f"wrote {out.name} ({size}{stats.packets:,} packets: {stats.futures:,} futures, "
        f"{stats.flows:,} flows) from {replay.n_events:,} trace events "
        f"at {stats.clock_mhz:g} MHz"
    )
    if stats.clock_assumed:
        print(f"note: the trace names no usable clock; assumed {stats.clock_mhz:g} MHz")
    if replay.status == "truncated":
        print(f"note: the trace is truncated; exported up to cycle {replay.end_time:,}")
    print("open it in https://ui.perfetto.dev")
    return 0


def _export_parquet(replay: Replay, directory: Path, force: bool) -> int:
    try:
        stats = export_parquet(replay, directory, force=force)
    except (ParquetMissing, ParquetExists, NotADirectoryError) as e:
        raise UserError(str(e)) from None
    except OSError as e:
        raise UserError(f"cannot write {directory}: {e.strerror or e}", status=1) from None
    rows = ", ".join(f"{name} {count:,}" for name, count in stats.rows.items())
    tables = f"{len(stats.files)} Parquet tables"
    print(f"wrote {tables} to {directory} ({stats.bytes:,} bytes; rows: {rows})")
    if replay.status == "truncated":
        print(f"note: the trace is truncated; exported up to cycle {replay.end_time:,}")
    return 0


def _is_export(path: Path) -> bool:
    """Whether ``path`` is a JSON document kbdebug export wrote: its first key is
    displayTimeUnit, then otherData with kbdebug_version (see chrome.py's write)."""
    prefix = '{"displayTimeUnit":"ns","otherData":'
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(1 << 16)
        other, _ = json.JSONDecoder().raw_decode(head, len(prefix))
    except (OSError, ValueError):
        return False
    return head.startswith(prefix) and isinstance(other, dict) and "kbdebug_version" in other


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
