"""`kbdebug report TRACE`: a run's numbers, its futures and its findings, as text or JSON.

Exit status:

0
    the report was printed (and the ``--fail-on`` gate, if given, passed);
1
    ``--fail-on`` selects a finding present in the trace whose estimated saving
    reaches ``--min-saving`` of its PE's kernel time (the matches are listed on stderr);
2
    bad input: not a trace (unreadable, corrupt, empty, cut off inside its header),
    a bad selector or a bad ``--min-saving``; one line on stderr, nothing on stdout;
3
    ``--fail-on`` was given and the run did not complete (kernel error, deadlock,
    interrupted, truncated, no events): its findings cover only what ran, so the gate
    fails whatever the selector; stderr says why. Without ``--fail-on`` such a trace
    is reported (status line first) with exit 0.

``--fail-on`` takes ``any``, a rule code (``KB102``, any case), a finding id
(``'KB102:qk.py::decode::tl.wait(kf)#0'``, quoted: see
:mod:`kbdebug.analysis.identity`) or the line form ``KB102:qk.py:27``; an id
without its ``:peN`` suffix selects that site on every PE. Repeat it or give a
comma list (``--fail-on kb102,kb104``).

``--min-saving`` (default 3 %, given as ``3%`` or ``0.03``): only findings whose
estimated saving is at least that share of their PE's kernel time fail the gate,
so a 300-cycle prologue hiccup in a 4,096-tile kernel does not fail CI while a
10 % stall does. The default is the share from which findings are reported at
all (``kbdebug.analysis.findings.MIN_SHARE``): below it, a fix is within what
the first load's latency and the prologue move on short kernels, so the default
gate counts every reported finding; raise it to gate only on larger ones.

JSON schema ``kbdebug.report/3`` (``--json``); cycles are integers, a cycle is
null when the event is not in the trace, a location is null or
``{"file", "line", "function"}``; strings from the trace are as recorded (JSON
escapes them)::

    {
      "schema": "kbdebug.report/3",
      "trace": str,                     # the path given
      "status": "ok" | "error" | "deadlock" | "interrupted" | "truncated",
      "complete": bool,                 # status ok and at least one event
      "incomplete": str | null,         # why not: "deadlock on PE 1: ..."
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
      "efficiency": [{"pe", "start", "end", "achieved",
                      "bound": int,      # critical-path lower bound of the kernel time
                      "efficiency": float | None,   # bound / achieved; None: did not complete
                      "savings": int}],  # sum of the PE's findings' gains on this PE
                                         # (pe_saving; they may overlap)
      "stall_by_line": [{"loc": loc, "waits": int, "stall_cycles": int}],
      "futures": [{"id", "op", "pe", "addr" (int | null), "nbytes",
                   "channel" (str | null), "issued", "granted", "done",
                   "waited", "resolved" (int | null), "stall": int,
                   "loc": loc, "wait_loc": loc}],   # every future, by id
      "findings": [{"id",               # edit-proof: RULE:FILE::FUNCTION::TEXT#N[:peN]
                    "line_id",          # RULE:FILE:LINE[:peN]
                    "rule", "title", "pe", "loc",
                    "call_loc": loc,    # the kernel line that called the helper, or null
                    "start", "end", "count",
                    "saving": int,      # cycles the launch's end moves earlier when it is
                                        # fixed (on every PE that has it), re-timed
                    "pe_saving": int,   # cycles this PE's own kernel saves
                    "also": [loc],      # other lines the same fix changes
                    "share": float,     # saving / the PE's kernel time
                    "stall", "message", "suggestion", "events": [int]}],
                                        # largest saving first
      "gate": {"selectors": [str], "min_saving": float,
               "failed": bool, "exit": int,
               "matched": [id],          # selected, saving at or above min_saving
               "below_min_saving": [id]} # selected, but too small to count
    }
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from emulator.trace.errors import TraceFormatError
from emulator.trace.schema import SourceLoc
from kbdebug.analysis import Analysis
from kbdebug.analysis.findings import MIN_SHARE, Finding
from kbdebug.analysis.model import PEBound
from kbdebug.analysis.select import matches, parse_selectors, share_of
from kbdebug.analysis.summary import FutureRow, Summary
from kbdebug.cli import UserError
from kbdebug.replay import Replay
from kbdebug.safe_text import escape

SCHEMA = "kbdebug.report/3"
#: Exit statuses (module docstring).
EXIT_OK, EXIT_GATE, EXIT_BAD_INPUT, EXIT_INCOMPLETE = 0, 1, 2, 3
#: Default --min-saving: a finding must be worth this share of its PE's kernel time
#: (the share findings are reported from).
MIN_SAVING = MIN_SHARE
#: Futures the text report lists in issue order, then the worst stalls.
FIRST_FUTURES = 20
WORST_STALLS = 10
#: Wait lines the text report lists.
STALL_LINES = 10
#: Matched findings the gate names on stderr.
GATE_LINES = 20


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="summarise a trace: busy channels, critical-path bound, stalls, futures, findings",
        description="Summarise a trace: end cycle and status, busy share of every channel "
        "and engine, each PE's time against its critical-path bound, stalls by source "
        "line, the futures table and the serialisation findings, largest estimated "
        "saving first.",
        epilog="exit status: 0 ok; 1 --fail-on matched a finding worth --min-saving; "
        "2 bad input (not a trace, bad selector); 3 --fail-on given and the run did not "
        "complete (error, deadlock, interrupted, truncated, no events)",
    )
    p.add_argument("trace", help="a .kbt trace file")
    p.add_argument("--json", action="store_true", help=f"print JSON (schema {SCHEMA})")
    p.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="SEL",
        help="exit 1 if a finding matches: 'any', a rule code (KB102, kb102), a finding id "
        "(quote it) or RULE:FILE:LINE; comma lists and repeats add up. Exit 3 if the run "
        "did not complete, whatever the selector",
    )
    p.add_argument(
        "--min-saving",
        default=f"{MIN_SAVING:.0%}",
        metavar="SHARE",
        help="only findings whose estimated saving reaches this share of their PE's kernel "
        "time fail --fail-on: '3%%' or '0.03' (default %(default)s; 0 counts every finding)",
    )


def parse_share(text: str) -> float:
    """``"2%"`` or ``"0.02"`` as 0.02; UserError for anything else or outside 0..1."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise UserError(
            f"--min-saving {text!r}: expected a share of the PE's kernel time, "
            "as a percentage (2%) or a fraction from 0 to 1 (0.02)"
        )
    return value


def run(args: argparse.Namespace) -> int:
    try:
        selectors = parse_selectors(args.fail_on)
    except ValueError as e:
        raise UserError(f"--fail-on: {e}") from None
    min_saving = parse_share(args.min_saving)
    analysis = Analysis(open_trace(args.trace))
    summary, futures, bounds = analysis.summary, analysis.futures, analysis.bounds
    findings = sort_findings(analysis.findings, bounds)
    reason = analysis.incomplete
    gate = Gate.check(selectors, min_saving, findings, bounds, reason)
    if args.json:
        doc = to_json(args.trace, summary, futures, findings, bounds, reason, gate)
        sys.stdout.write(json.dumps(doc, indent=2))
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(args.trace, summary, futures, findings, bounds, reason))
    sys.stdout.flush()
    for line in gate.explain():
        print(f"kbdebug report: {line}", file=sys.stderr)
    return gate.exit


def open_trace(path: str | Path) -> Replay:
    """Open ``path`` for reporting; UserError (one line naming the file) if it cannot be,
    or if it is not a trace: empty, or cut off inside its header."""
    shown = escape(str(path), 512)
    try:
        replay = Replay.open(path)
    except TraceFormatError as e:
        raise UserError(escape(_one_line(str(e)), 1024)) from None
    except IsADirectoryError:
        raise UserError(f"{shown}: is a directory, not a trace") from None
    except FileNotFoundError:
        raise UserError(f"{shown}: no such file") from None
    except OSError as e:
        raise UserError(f"{shown}: cannot read: {e.strerror or e}") from None
    if not replay.index.header:
        raise UserError(f"{shown}: no header: not a trace, or one cut off before its first record")
    return replay


def sort_findings(findings: list[Finding], bounds: list[PEBound]) -> list[Finding]:
    """Largest estimated saving first (then share, PE and id, for a stable order)."""
    return sorted(findings, key=lambda f: (-f.saving, -share_of(f, bounds), f.pe, f.id))


class Gate:
    """The outcome of ``--fail-on``: the exit status and what made it."""

    def __init__(
        self,
        selectors: list[str],
        min_saving: float,
        matched: list[tuple[Finding, float]],
        below: list[tuple[Finding, float]],
        reason: str | None,
    ):
        self.selectors = selectors
        self.min_saving = min_saving
        self.matched = matched
        self.below = below
        self.reason = reason

    @classmethod
    def check(
        cls,
        selectors: list[str],
        min_saving: float,
        findings: list[Finding],
        bounds: list[PEBound],
        reason: str | None,
    ) -> Gate:
        matched, below = [], []
        if selectors:
            for f in findings:
                if any(matches(f, s) for s in selectors):
                    share = share_of(f, bounds)
                    (matched if share >= min_saving else below).append((f, share))
        return cls(selectors, min_saving, matched, below, reason)

    @property
    def exit(self) -> int:
        if not self.selectors:
            return EXIT_OK
        if self.reason is not None:
            return EXIT_INCOMPLETE
        return EXIT_GATE if self.matched else EXIT_OK

    def explain(self) -> list[str]:
        """Lines for stderr: why the gate failed (none when it passed or was not asked)."""
        if self.exit == EXIT_INCOMPLETE:
            return [f"--fail-on: the run did not complete: {escape(_one_line(self.reason))}"]
        if self.exit != EXIT_GATE:
            return []
        n = len(self.matched)
        lines = [
            f"--fail-on {escape(','.join(self.selectors), 512)} matched {n} finding"
            f"{'s' if n != 1 else ''} worth at least {_pct(self.min_saving)} of its PE's time:"
        ]
        for f, share in self.matched[:GATE_LINES]:
            lines.append(
                f"  {escape(f.id, 512)}  ({escape(f.line_id or '-', 512)}, PE{f.pe}, "
                f"est. saving {f.saving:,} cycles, {_pct(share)})"
            )
        if n > GATE_LINES:
            lines.append(f"  ... {n - GATE_LINES} more (--json lists all)")
        if self.below:
            lines.append(
                f"  ({len(self.below)} more matched below --min-saving {_pct(self.min_saving)}"
                " and do not count)"
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "selectors": list(self.selectors),
            "min_saving": self.min_saving,
            "failed": self.exit != EXIT_OK,
            "exit": self.exit,
            "matched": [f.id for f, _ in self.matched],
            "below_min_saving": [f.id for f, _ in self.below],
        }


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _pct(share: float) -> str:
    """``18 %``; ``<1 %`` for a share that rounds to nothing but is not zero."""
    if 0 < share < 0.005:
        return "<1 %"
    return f"{100 * share:.0f} %"


# --- JSON -----------------------------------------------------------------------------


def _loc(loc: SourceLoc | None) -> dict[str, Any] | None:
    return None if loc is None else {"file": loc.file, "line": loc.line, "function": loc.function}


def _savings(findings: list[Finding]) -> dict[int, int]:
    """Per PE, the sum of its findings' gains on that PE (a finding's ``saving`` is the
    launch's, with the line fixed on every PE: summed per PE it would count it twice)."""
    out: dict[int, int] = {}
    for f in findings:
        out[f.pe] = out.get(f.pe, 0) + (f.pe_saving or f.saving)
    return out


def to_json(
    path: str,
    summary: Summary,
    futures: list[FutureRow],
    findings: list[Finding],
    bounds: list[PEBound] | None = None,
    reason: str | None = None,
    gate: Gate | None = None,
) -> dict[str, Any]:
    """The report as a ``kbdebug.report/3`` document."""
    bounds = bounds or []
    gate = gate or Gate([], MIN_SAVING, [], [], reason)
    savings = _savings(findings)
    return {
        "schema": SCHEMA,
        "trace": str(path),
        "status": summary.status,
        "complete": reason is None,
        "incomplete": reason,
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
        "efficiency": [{**asdict(b), "savings": savings.get(b.pe, 0)} for b in bounds],
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
                "line_id": f.line_id,
                "rule": f.rule,
                "title": f.title,
                "pe": f.pe,
                "loc": _loc(f.loc),
                "call_loc": _loc(f.call_loc or getattr(f.loc, "caller", None)),
                "start": f.start,
                "end": f.end,
                "count": f.count,
                "saving": f.saving,
                "pe_saving": f.pe_saving,
                "also": [_loc(x) for x in f.also],
                "share": share_of(f, bounds),
                "stall": f.stall,
                "message": f.message,
                "suggestion": f.suggestion,
                "events": list(f.events),
            }
            for f in findings
        ],
        "gate": gate.to_json(),
    }


# --- text -----------------------------------------------------------------------------


def _status_line(summary: Summary, reason: str | None) -> str:
    if reason is None:
        return "status: ok"
    why = escape(_one_line(reason))
    line = f"status: {escape(summary.status.upper(), 32)}: the run did not complete: {why}"
    if summary.n_events:
        line += "; the numbers below cover what was recorded"
    return line


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


def _where(loc: SourceLoc | None) -> str:
    return "?" if loc is None else escape(f"{loc.file}:{loc.line}", 512)


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
            escape(r.op, 64),
            str(r.pe),
            "-" if r.addr is None else f"{r.addr:#x}",
            f"{r.nbytes:,}",
            _cycle(r.issued),
            _cycle(r.granted),
            _cycle(r.done),
            _cycle(r.waited),
            _cycle(r.resolved),
            f"{r.stall:,}",
            _where(r.loc) if r.loc is not None else "-",
        ]
        for r in rows
    ]
    return _table([header, *body], right={0, 2, 4, 5, 6, 7, 8, 9, 10})


def _finding_lines(f: Finding, share: float) -> list[str]:
    at = f"at {_where(f.loc)}"
    if f.loc is not None and f.loc.function:
        at += f" in {escape(f.loc.function, 256)}"
    call_loc = f.call_loc or (getattr(f.loc, "caller", None) if f.loc is not None else None)
    if call_loc is not None:
        at += f", called from {_where(call_loc)}"
    lines = [
        f"  {escape(f.id, 512)}  {escape(f.title, 64)}",
        f"      PE{f.pe}, {f.count:,}x, est. saving {f.saving:,} cycles ({_pct(share)})"
        + (
            f" with the line fixed on every PE that has it, {f.pe_saving:,} on this PE"
            if f.pe_saving and f.pe_saving != f.saving
            else ""
        ),
        f"      {at}" + (f"  [{escape(f.line_id, 512)}]" if f.line_id else ""),
        *(f"      with {_where(x)}" for x in f.also),
        f"      {escape(f.message)}",
        f"      fix: {escape(f.suggestion)}",
    ]
    return lines


def render(
    path: str,
    summary: Summary,
    futures: list[FutureRow],
    findings: list[Finding],
    bounds: list[PEBound] | None = None,
    reason: str | None = None,
) -> str:
    """The report as text, the status line first."""
    bounds = bounds or []
    lines = [_status_line(summary, reason), f"trace: {escape(str(path), 1024)}"]
    grid = "x".join(str(g) for g in summary.grid) or "?"
    lines.append(
        f"kernel: {escape(summary.kernel, 256) or '?'} (grid {grid}, {summary.n_pes} PE"
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
            [
                [escape(ch.name, 128), f"{ch.busy_cycles:,}", f"{ch.share:.1%}"]
                for ch in summary.channels
            ],
            right={1, 2},
        )
    if bounds:
        savings = _savings(findings)
        lines += [
            "",
            "per PE: kernel time, its critical-path bound (the least any placement of its "
            "issues allows) and the findings' estimated savings (they may overlap):",
        ]
        lines += _table(
            [
                [
                    f"PE{b.pe}",
                    f"achieved {b.achieved:,}",
                    f"bound {b.bound:,}",
                    "did not complete"
                    if b.efficiency is None
                    else f"efficiency {b.efficiency:.1%}",
                    f"findings save ~{savings.get(b.pe, 0):,}"
                    + (f" ({_pct(savings.get(b.pe, 0) / b.achieved)})" if b.achieved else ""),
                ]
                for b in bounds
            ],
            right=set(),
        )
    if summary.stall_by_line:
        shown = summary.stall_by_line[:STALL_LINES]
        more = len(summary.stall_by_line) - len(shown)
        lines += ["", "stall by wait line:" + (f" ({more} more in --json)" if more else "")]
        lines += _table(
            [
                [
                    _where(s.loc),
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
    if findings:
        lines += ["", f"findings ({len(findings)}, largest estimated saving first):"]
    else:
        lines += ["", "findings: none"]
    for f in findings:
        lines += _finding_lines(f, share_of(f, bounds))
    return "\n".join(lines) + "\n"
