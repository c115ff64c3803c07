"""`kbdebug report TRACE`: a run's numbers, its futures and its findings, as text or JSON.

Exit status:

0
    the report was printed (and the ``--fail-on`` gate, if given, passed);
1
    ``--fail-on`` selects a finding present in the trace whose estimated saving
    reaches ``--min-saving`` of its PE's kernel time (of the launch's time for a finding
    on several PEs; the matches are listed on stderr);
2
    bad input: not a trace (unreadable, corrupt, empty, cut off inside its header),
    a bad selector or a bad ``--min-saving``; one line on stderr, nothing on stdout;
3
    ``--fail-on`` was given and the run did not complete (kernel error, deadlock,
    interrupted, truncated, no events): its findings cover only what ran, so the gate
    fails whatever the selector; stderr says why. Without ``--fail-on`` such a trace
    is reported (status line first) with exit 0.

``--fail-on`` takes ``any`` (every finding and hazard), ``hazard`` (every hazard:
KB201-KB203 fail the gate whatever ``--min-saving``, having no saving), a rule code
(``KB102``, any case), a finding id
(``'KB102:qk.py::decode::tl.wait(kf)#0'``, quoted: see
:mod:`kbdebug.analysis.identity`) or the line form ``KB102:qk.py:27``; an id
without its ``:peN`` suffix selects that site on every PE. Repeat it or give a
comma list (``--fail-on kb102,kb104``). An id, line form or short id that matches no
finding lets the gate pass (the finding was fixed) and is said on stderr, one line
each (a typo or a stale id); a rule code, ``any`` or ``hazard`` matching nothing is not.

``--min-saving`` (default 3 %, given as ``3%`` or ``0.03``): only findings whose
estimated saving is at least that share of their PE's kernel time fail the gate,
so a 300-cycle prologue hiccup in a 4,096-tile kernel does not fail CI while a
10 % stall does. The default is the share from which findings are reported at
all (``kbdebug.analysis.findings.MIN_SHARE``): below it, a fix is within what
the first load's latency and the prologue move on short kernels, so the default
gate counts every reported finding; raise it to gate only on larger ones.

JSON: :mod:`kbdebug.export.report_json` (schema ``kbdebug.report/4``); text:
:mod:`kbdebug.export.report_text`; ``--format sarif|github|junit|markdown``: the
code-review formats of :mod:`kbdebug.export.sarif`, ``github``, ``junit`` and
``markdown`` (exit status and ``--fail-on`` as with any format); the gate:
:mod:`kbdebug.analysis.gate`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from emulator.trace.errors import TraceFormatError
from kbdebug.analysis import Analysis
from kbdebug.analysis.gate import EXIT_GATE, EXIT_INCOMPLETE, MIN_SAVING, Gate, one_line
from kbdebug.analysis.perturbation import perturbation_of
from kbdebug.analysis.select import in_report_order, parse_selectors
from kbdebug.analysis.summary import FutureRow, iter_futures
from kbdebug.cli import UserError
from kbdebug.commands.hints import with_hint
from kbdebug.export.github import annotations
from kbdebug.export.junit import to_junit
from kbdebug.export.markdown import summary_markdown
from kbdebug.export.report_json import SCHEMA, write_json
from kbdebug.export.report_text import render
from kbdebug.export.sarif import to_sarif
from kbdebug.replay import Replay
from kbdebug.safe_text import escape

#: What ``--format`` takes.
FORMATS = ("text", "json", "sarif", "github", "junit", "markdown")

__all__ = ["EXIT_GATE", "EXIT_INCOMPLETE", "add_parser", "open_trace", "run"]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="summarise a trace: busy channels, critical-path bound, stalls, futures, hazards, "
        "findings",
        description="Summarise a trace: end cycle and status, busy share of every channel "
        "and engine, each PE's time against its critical-path bound, stalls by source "
        "line, the futures table, the hazards (pairs of accesses to the same HBM bytes "
        "that no wait orders: results that depend on timing) and the serialisation "
        "findings, largest estimated saving first.",
        epilog="exit status: 0 ok; 1 --fail-on matched a finding worth --min-saving; "
        "2 bad input (not a trace, bad selector); 3 --fail-on given and the run did not "
        "complete (error, deadlock, interrupted, truncated, no events)",
    )
    p.add_argument("trace", help="a .kbt trace file")
    p.add_argument("--json", action="store_true", help=f"print JSON (schema {SCHEMA})")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="text (default); json (as --json); sarif (SARIF 2.1.0, for code scanning); "
        "github (Actions annotations of the largest findings); junit (JUnit XML, a test "
        "case per PE); markdown (a summary table, for $GITHUB_STEP_SUMMARY)",
    )
    p.add_argument(
        "--per-pe",
        action="store_true",
        help="list every PE and every channel (on 9 PEs or more the tables are summarised "
        "as min / median / max, with the PEs outside the spread named)",
    )
    p.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="SEL",
        help="exit 1 if a finding or hazard matches: 'any', 'hazard' (every hazard, whatever "
        "--min-saving), a rule code (KB102, kb102), a finding id "
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
    form = output_format(args)
    analysis = Analysis(open_trace(args.trace))
    # The futures table (a row per future) is made after the findings, so that their
    # re-timings' working memory and the table are never held at once (on a 256-PE ring
    # of 7.8M events, some 100 MB off the report's peak).
    bounds = analysis.bounds
    findings = in_report_order(analysis.findings, bounds)
    summary = analysis.summary
    # JSON writes each future once, as it is made: no table of 262,144 rows on the ring.
    futures = FutureRows(analysis.replay) if form == "json" else analysis.futures
    reason = analysis.incomplete
    hazards = analysis.hazards
    gate = Gate.check(selectors, min_saving, findings, bounds, reason, hazards)
    figures = (args.trace, summary, futures, findings, bounds, reason)
    more = {
        "hazards": hazards,
        "chains": analysis.worst_wait_chains,
        "launch": analysis.launch_efficiency,
        "contention": analysis.contention,
        "perturbation": perturbation_of(analysis.replay.index.header),
    }
    if form == "json":
        # Written as it is encoded, each future made a dict only as it is written.
        write_json(sys.stdout, *figures, gate, **more)
    elif form != "text":
        sys.stdout.write(review_document(form, analysis, args.trace, gate))
    else:
        sys.stdout.write(render(*figures, per_pe=args.per_pe, **more))
    sys.stdout.flush()
    for line in [*gate.unmatched_lines(args.trace), *gate.explain()]:
        print(f"kbdebug report: {line}", file=sys.stderr)
    return gate.exit


class FutureRows:
    """Every future's row (:func:`iter_futures`), made each time it is iterated."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay

    def __len__(self) -> int:
        return int(np.count_nonzero(self.replay.index.futures.cmd >= 0))

    def __iter__(self) -> Iterator[FutureRow]:
        return iter_futures(self.replay)


def output_format(args: argparse.Namespace) -> str:
    """The format asked for: ``--format``, or json for ``--json``; UserError when both
    are given and disagree."""
    if args.json and args.format not in (None, "json"):
        raise UserError(f"--json and --format {args.format}: give one of them")
    return "json" if args.json else args.format or "text"


def review_document(form: str, analysis: Analysis, trace: str, gate: Gate) -> str:
    """The report in a code-review format: sarif, github, junit or markdown."""
    if form == "sarif":
        return json.dumps(to_sarif(analysis, trace), indent=2) + "\n"
    if form == "github":
        return annotations(analysis, trace)
    if form == "junit":
        return to_junit(analysis, trace, gate)
    return summary_markdown(analysis, trace)


def open_trace(path: str | Path) -> Replay:
    """Open ``path`` for reporting; UserError (one line naming the file) if it cannot be,
    or if it is not a trace: empty, or cut off inside its header."""
    shown = escape(str(path), 512)
    try:
        replay = Replay.open(path)
    except TraceFormatError as e:
        raise UserError(escape(with_hint(one_line(str(e)), path), 1024)) from None
    except IsADirectoryError:
        raise UserError(f"{shown}: is a directory, not a trace") from None
    except FileNotFoundError:
        raise UserError(f"{shown}: no such file") from None
    except OSError as e:
        raise UserError(f"{shown}: cannot read: {e.strerror or e}") from None
    if not replay.index.header:
        raise UserError(f"{shown}: no header: not a trace, or one cut off before its first record")
    return replay
