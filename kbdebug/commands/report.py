"""`kbdebug report TRACE`: a run's numbers, its futures and its findings, as text or JSON.

Exit status: 0, or 1 when ``--fail-on`` selects a finding that is present, or 2
for a bad trace file or a bad selector. A truncated trace or a failed run is
reported (status line first), not refused.

``--fail-on`` takes ``any``, a rule code (``KB102``) or a finding id
(``KB101:emulator/kernels/attention.py:46``; an id without its ``:peN`` suffix
selects that line on every PE); it may be repeated.

JSON schema ``kbdebug.report/1`` (``--json``); cycles are integers, a cycle is
null when the event is not in the trace, a location is null or
``{"file", "line", "function"}``::

    {
      "schema": "kbdebug.report/1",
      "trace": str,                     # the path given
      "status": "ok" | "error" | "deadlock" | "truncated",
      "error": str | null,              # the footer's error message
      "error_loc": loc | null,
      "kernel": str, "grid": [int], "pes": int,
      "events": int,                    # event records in the trace
      "end_time": int,                  # the run's end cycle
      "stall_cycles": int,              # sum of every wait's stalled cycles
      "dma_read_count": int,            # OP_LOG memory/dma_read count
      "counts": {"dma_read_count", "dma_write_count", "gemm_count", "math_count",
                 "ipcq_send_count", "ipcq_recv_count": int},
      "channels": [{"id", "name", "kind", "pe", "busy_cycles": int,
                    "share": float}],    # busy_cycles / end_time
      "efficiency": [{"pe", "start", "end", "achieved", "dma_read_cycles",
                      "compute_cycles", "bound": int, "efficiency": float}],
      "stall_by_line": [{"loc": loc, "waits": int, "stall_cycles": int}],
      "futures": [{"id", "op", "pe", "addr" (int | null), "nbytes",
                   "channel" (str | null), "issued", "granted", "done",
                   "waited", "resolved" (int | null), "stall": int,
                   "loc": loc, "wait_loc": loc}],   # every future, by id
      "findings": [{"id", "rule", "title", "pe", "loc", "start", "end",
                    "count", "cycles", "stall", "message", "suggestion",
                    "events": [int]}]
    }
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from emulator.trace.errors import TraceFormatError
from emulator.trace.schema import SourceLoc
from kbdebug.analysis import findings_of
from kbdebug.analysis.findings import RULES, Finding, matches
from kbdebug.cli import UserError
from kbdebug.replay import Replay
from kbdebug.replay.summary import FutureRow, Summary, futures_table, summarize

SCHEMA = "kbdebug.report/1"
#: Futures the text report lists in issue order, then the worst stalls.
FIRST_FUTURES = 20
WORST_STALLS = 10
#: Wait lines the text report lists.
STALL_LINES = 10


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="summarise a trace: busy channels, efficiency, stalls, futures, findings",
        description="Summarise a trace: end cycle and status, busy share of every channel "
        "and engine, overlap efficiency per PE, stalls by source line, the futures table "
        "and the serialisation findings.",
    )
    p.add_argument("trace", help="a .kbt trace file")
    p.add_argument("--json", action="store_true", help=f"print JSON (schema {SCHEMA})")
    p.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="ID",
        help="exit 1 if a finding matches: 'any', a rule code (KB102) or a finding id; repeatable",
    )


def run(args: argparse.Namespace) -> int:
    for selector in args.fail_on:
        _check_selector(selector)
    replay = open_trace(args.trace)
    summary = summarize(replay)
    futures = futures_table(replay)
    findings = findings_of(replay)
    if args.json:
        sys.stdout.write(json.dumps(to_json(args.trace, summary, futures, findings), indent=2))
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(args.trace, summary, futures, findings))
    failing = [f for f in findings if any(matches(f, s) for s in args.fail_on)]
    return 1 if failing else 0


def open_trace(path: str) -> Replay:
    """Open ``path`` for reporting; UserError (one line naming the file) if it cannot be."""
    try:
        return Replay.open(path)
    except TraceFormatError as e:
        raise UserError(_one_line(str(e))) from None
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror or e}") from None


def _check_selector(selector: str) -> None:
    rule = selector.split(":", 1)[0]
    if selector != "any" and rule not in RULES:
        raise UserError(
            f"--fail-on {selector!r}: expected 'any', a rule code ({', '.join(RULES)}) "
            f"or a finding id such as KB101:path/to/kernel.py:42"
        )


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- JSON -----------------------------------------------------------------------------


def _loc(loc: SourceLoc | None) -> dict[str, Any] | None:
    return None if loc is None else {"file": loc.file, "line": loc.line, "function": loc.function}


def to_json(
    path: str, summary: Summary, futures: list[FutureRow], findings: list[Finding]
) -> dict[str, Any]:
    """The report as a ``kbdebug.report/1`` document."""
    return {
        "schema": SCHEMA,
        "trace": str(path),
        "status": summary.status,
        "error": summary.error,
        "error_loc": _loc(summary.error_loc),
        "kernel": summary.kernel,
        "grid": list(summary.grid),
        "pes": summary.n_pes,
        "events": summary.n_events,
        "end_time": summary.end_time,
        "stall_cycles": summary.stall_cycles,
        "dma_read_count": summary.counts["dma_read_count"],
        "counts": dict(summary.counts),
        "channels": [
            {
                "id": ch.channel,
                "name": ch.name,
                "kind": ch.kind,
                "pe": ch.pe,
                "busy_cycles": ch.busy_cycles,
                "share": ch.share,
            }
            for ch in summary.channels
        ],
        "efficiency": [asdict(pe) for pe in summary.pes],
        "stall_by_line": [
            {"loc": _loc(s.loc), "waits": s.waits, "stall_cycles": s.stall_cycles}
            for s in summary.stall_by_line
        ],
        "futures": [
            {**asdict(row), "loc": _loc(row.loc), "wait_loc": _loc(row.wait_loc)} for row in futures
        ],
        "findings": [
            {
                "id": f.id,
                "rule": f.rule,
                "title": f.title,
                "pe": f.pe,
                "loc": _loc(f.loc),
                "start": f.start,
                "end": f.end,
                "count": f.count,
                "cycles": f.saving,
                "stall": f.stall,
                "message": f.message,
                "suggestion": f.suggestion,
                "events": list(f.events),
            }
            for f in findings
        ],
    }


# --- text -----------------------------------------------------------------------------


def _status_line(summary: Summary) -> str:
    if summary.status == "ok":
        return "status: ok"
    if summary.status == "truncated":
        if not summary.n_events:
            return "status: TRUNCATED: the trace holds no events (cut off before its first one)"
        return (
            f"status: TRUNCATED: the trace ends after {summary.n_events:,} events at cycle "
            f"{summary.end_time:,} without its footer; the numbers below cover what was recorded"
        )
    error = _one_line(summary.error or "no message")
    loc = summary.error_loc
    where = f" at {loc}" if loc is not None and str(loc) not in error else ""
    return f"status: {summary.status.upper()}: {error}{where}"


def _cycle(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def _futures_rows(rows: list[FutureRow]) -> list[str]:
    header = [
        "id",
        "op",
        "PE",
        "addr",
        "bytes",
        "issued",
        "granted",
        "done",
        "waited",
        "resolved",
        "stall",
        "line",
    ]
    body = [
        [
            str(r.id),
            r.op,
            str(r.pe),
            "-" if r.addr is None else f"{r.addr:#x}",
            f"{r.nbytes:,}",
            _cycle(r.issued),
            _cycle(r.granted),
            _cycle(r.done),
            _cycle(r.waited),
            _cycle(r.resolved),
            f"{r.stall:,}",
            str(r.loc) if r.loc is not None else "-",
        ]
        for r in rows
    ]
    return _table([header, *body], right={0, 2, 4, 5, 6, 7, 8, 9, 10})


def render(path: str, summary: Summary, futures: list[FutureRow], findings: list[Finding]) -> str:
    """The report as text, the status line first."""
    lines = [_status_line(summary), f"trace: {path}"]
    grid = "x".join(str(g) for g in summary.grid) or "?"
    lines.append(
        f"kernel: {summary.kernel or '?'} (grid {grid}, {summary.n_pes} PE"
        f"{'s' if summary.n_pes != 1 else ''})"
    )
    lines.append(f"end cycle: {summary.end_time:,}  events: {summary.n_events:,}")
    lines.append(
        f"stall cycles: {summary.stall_cycles:,}  dma_read_count: "
        f"{summary.counts['dma_read_count']:,}"
    )
    if summary.channels:
        lines += ["", "busy (grant to release cycles / end cycle):"]
        lines += _table(
            [[ch.name, f"{ch.busy_cycles:,}", f"{ch.share:.1%}"] for ch in summary.channels],
            right={1, 2},
        )
    if summary.pes:
        lines += ["", "overlap efficiency (max(DMA read, compute) / achieved cycles):"]
        lines += _table(
            [
                [
                    f"PE{pe.pe}",
                    f"{pe.efficiency:.0%}",
                    f"achieved {pe.achieved:,}",
                    f"DMA read {pe.dma_read_cycles:,}",
                    f"compute {pe.compute_cycles:,}",
                ]
                for pe in summary.pes
            ],
            right={1},
        )
    if summary.stall_by_line:
        shown = summary.stall_by_line[:STALL_LINES]
        more = len(summary.stall_by_line) - len(shown)
        lines += ["", "stall by wait line:" + (f" ({more} more in --json)" if more else "")]
        lines += _table(
            [
                [
                    str(s.loc) if s.loc is not None else "?",
                    f"{s.waits:,} wait{'s' if s.waits != 1 else ''}",
                    f"{s.stall_cycles:,} cycles",
                ]
                for s in shown
            ],
            right={1, 2},
        )
    if futures:
        first = futures[:FIRST_FUTURES]
        if len(futures) > len(first):
            title = f"futures (first {len(first)} of {len(futures):,} by id; --json lists all):"
        else:
            title = f"futures ({len(futures)}):"
        lines += ["", title]
        lines += _futures_rows(first)
        worst = sorted((r for r in futures if r.stall > 0), key=lambda r: (-r.stall, r.id))
        worst = worst[:WORST_STALLS]
        if worst:
            lines += ["", f"worst stalls ({len(worst)} futures):"]
            lines += _futures_rows(worst)
    lines += ["", f"findings ({len(findings)}):" if findings else "findings: none"]
    for f in findings:
        lines.append(f"  {f.id}  {f.title} (PE{f.pe}, {f.count:,}x, ~{f.saving:,} cycles)")
        lines.append(f"      {f.message}")
        lines.append(f"      fix: {f.suggestion}")
    return "\n".join(lines) + "\n"
