"""`kbdebug diff A B`: two runs side by side, and whether B regressed.

Exit status: 0; with ``--fail-on-regression``, 1 when B has a hazard A has not (as
report's gate, whatever the speed), B's recorded output check failed where A's did not,
B ends later than A, or has a
finding A has not without ending earlier (findings matched by their edit-proof id, so
moving lines or renaming the kernel file is no regression; a faster B's new findings
are listed, not failed), and 3 when B did not complete (kernel error, deadlock, interrupted,
truncated, no events: its numbers cover only what ran, and a run cut short is never
"better"); 2 for a bad trace file (not a trace, empty, cut off inside its header).
The reasons are listed at the end of the text and on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from kbdebug.analysis.across_pes import short_id, where_text
from kbdebug.analysis.compare import diff_replays
from kbdebug.analysis.gate import EXIT_GATE, EXIT_INCOMPLETE
from kbdebug.analysis.hazards import hazards_are
from kbdebug.analysis.run_diff import Change, RunDiff
from kbdebug.analysis.summary import Summary
from kbdebug.commands.report import open_trace
from kbdebug.export.diff_json import SCHEMA, to_json
from kbdebug.export.diff_spread import spread_busy, spread_headline
from kbdebug.safe_text import escape

#: Source lines the text lists (largest stall first); --json has them all.
STALL_LINES = 15
#: Longest channel or figure name shown (escaped; longer is cut with an ellipsis).
NAME_LIMIT = 256
#: Longest line of text: every line is escaped once more on its way out, whatever built it.
LINE_LIMIT = 1 << 16

DESCRIPTION = """\
Compare two traces, A (before) and B (after): end cycle, stall cycles,
dma_read_count and efficiency (critical-path bound / achieved) per PE; busy share
of every channel and engine; findings removed and added (matched by their
edit-proof id: file, function, call text and ordinal, so unrelated edits do not
count), after the hazards fixed, new and still there (paired by rule and both lines,
aligned across edits); stall per source line (lines aligned across edits: qk.py:28 → qk.py:29).
Each with both values and the change, absolute and in percent of A. A run that did
not complete is said so, and its numbers get no verdict.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "diff",
        help="compare two traces: did B fix A's serialisation?",
        description=DESCRIPTION,
        epilog="example:\n"
        "  kbdebug run decode_blocking -o blocking.kbt\n"
        "  kbdebug run decode_prefetch -o prefetch.kbt\n"
        "  kbdebug diff blocking.kbt prefetch.kbt --fail-on-regression\n\n"
        "exit status: 0; with --fail-on-regression 1 when B adds a hazard, fails its\n"
        "output check where A did not, is slower, or adds a finding without being faster\n"
        "(neither of the last two when B fixes a hazard of A and adds none: the fix's\n"
        "cost); 3 when B did not complete; 2 for a bad trace file",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", metavar="A", help="the trace before (baseline)")
    p.add_argument("b", metavar="B", help="the trace after")
    p.add_argument("--json", action="store_true", help=f"print JSON (schema {SCHEMA})")
    p.add_argument(
        "--per-pe",
        action="store_true",
        help="list every PE's efficiency and every channel's busy share (on 9 PEs or more "
        "the text gives their median and lowest instead)",
    )
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when B adds a hazard, its recorded output check failed where A's did "
        "not, it ends later than A, or adds a finding without ending earlier; "
        "3 when B did not complete",
    )


def diff_runs(a_path: str, b_path: str) -> RunDiff:
    """Open both traces and compare them (UserError for a bad file): the comparison
    ``kbdebug compare`` shows, from :mod:`kbdebug.analysis.compare`."""
    return diff_replays(open_trace(a_path), open_trace(b_path))


def run(args: argparse.Namespace) -> int:
    diff = diff_runs(args.a, args.b)
    if args.json:
        sys.stdout.write(json.dumps(to_json(diff, args.a, args.b), indent=2) + "\n")
    else:
        sys.stdout.write(render(diff, args.a, args.b, per_pe=args.per_pe))
    sys.stdout.flush()
    for warning in diff.warnings if args.json else ():
        print(f"kbdebug diff: warning: {escape(warning)}", file=sys.stderr)
    if not (args.fail_on_regression and diff.regression):
        return 0
    for reason in diff.regressions:
        print(f"kbdebug diff: regression: {escape(reason)}", file=sys.stderr)
    return EXIT_INCOMPLETE if diff.b_incomplete is not None else EXIT_GATE


# --- text -------------------------------------------------------------------------------


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("ratio", "share"):
        return f"{100 * value:.1f}%"
    return f"{value:,}"


def _change(c: Change) -> str:
    """``+1,234 (+5.6%)``: points for shares and ratios, "new" from zero, "0" for no change."""
    delta = c.delta
    if delta is None:
        return "only in A" if c.b is None else "only in B"
    if not delta:
        return "0" if c.unit in ("cycles", "count") else "0 pt"
    if c.unit in ("ratio", "share"):
        text = f"{100 * delta:+.1f} pt"
    else:
        text = f"{delta:+,}"
    return text + (f" ({c.percent:+.1f}%)" if c.percent is not None else " (new)")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Aligned text under a header whose first cell titles the section; rows indented."""
    table = [header, *(["  " + r[0], *r[1:]] for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    out = []
    for r in table:
        cells = [r[0].ljust(widths[0])]
        cells += [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        out.append("  ".join(cells).rstrip())
    return out


def _rows(changes: list[Change]) -> list[list[str]]:
    """Table rows of ``changes``; their names (channel names come from the traces) escaped."""
    return [
        [escape(c.name, NAME_LIMIT), _value(c.a, c.unit), _value(c.b, c.unit)]
        + [_change(c), c.verdict]
        for c in changes
    ]


def _run_line(label: str, path: str, s: Summary, reason: str | None) -> str:
    status = "ok" if reason is None else f"did not complete: {reason}"
    if reason is None and s.check is not None and not s.check.ok:
        status = "completed, output check failed"  # as report says it: "ok" reads as right
    kernel = s.kernel or "kernel"
    return escape(f"{label}: {path}  ({kernel}, {status}, {s.n_events:,} events)")


def render(diff: RunDiff, a_path: str, b_path: str, *, per_pe: bool = False) -> str:
    """The diff as text: runs, headline numbers, busy shares, findings, stalls, verdict.

    Every text read from a trace (paths, kernel, channel, file and function names, finding
    ids and titles, warnings) is escaped where it is placed, and every line once more at
    the end (escaping is idempotent), so no terminal escape of a trace reaches the screen.
    """
    lines = [
        _run_line("A", a_path, diff.a, diff.a_incomplete),
        _run_line("B", b_path, diff.b, diff.b_incomplete),
    ]
    lines += _check_lines(diff)
    lines += [f"warning: {escape(w)}" for w in diff.warnings]
    lines.append("")
    headline, busy = diff.headline, diff.busy
    if not per_pe:
        headline, busy = spread_headline(headline), spread_busy(busy)
    n_pes = max(diff.a.n_pes, diff.b.n_pes)
    if n_pes > 1:  # a total says what it adds up
        headline = [
            replace(c, name=f"{c.name} (sum of {n_pes} PEs)") if c.name == "stall cycles" else c
            for c in headline
        ]
    lines += _table(["run", "A", "B", "change", ""], _rows(headline))
    if busy:
        lines += ["", *_table(["busy share", "A", "B", "change", ""], _rows(busy))]

    lines += _hazard_lines(diff)
    lines += ["", _findings_line(diff)]
    for label, findings in (("removed", diff.removed), ("added", diff.added)):
        n_pes = (diff.a if label == "removed" else diff.b).n_pes
        for f in findings:
            lines.append(
                f"  {label:<8} {escape(short_id(f), 512)}  {escape(f.title, 64)}"
                + (f"  {where_text(f, n_pes)}" if n_pes > 1 else "")
            )
            lines.append(f"           id: {escape(f.id, 512)}")

    stalled = [r for r in diff.stall_by_line if r.stall.a or r.stall.b]
    if stalled:
        rows = [
            [
                f"stall {_value(r.stall.a, 'cycles')} → {_value(r.stall.b, 'cycles')} at "
                + escape(r.where, 1024)
                + (f" ({escape(r.function, 256)})" if r.function else ""),
                _change(r.stall),
                r.stall.verdict,
            ]
            for r in stalled[:STALL_LINES]
        ]
        lines += ["", *_table(["stall by source line (A → B)", "change", ""], rows)]
        if len(stalled) > STALL_LINES:
            lines.append(f"  ... {len(stalled) - STALL_LINES} more lines (--json lists all)")
    lines += ["", _verdict(diff)]
    return "\n".join(escape(line, LINE_LIMIT) for line in lines) + "\n"


def _check_lines(diff: RunDiff) -> list[str]:
    """``A: output check failed (first wrong block O[16:32, :])``: each run's recorded
    output check, when either failed (two passing runs say nothing)."""
    checks = (("A", diff.a.check), ("B", diff.b.check))
    if not any(c is not None and not c.ok for _, c in checks):
        return []
    return [escape(f"{label}: {c.text()}", 2048) for label, c in checks if c is not None]


def _hazard_lines(diff: RunDiff) -> list[str]:
    """Hazards fixed in B, new in B and still there, before the findings (they are wrong,
    not slow); nothing when neither run has one."""
    groups = diff.hazards
    if not (groups.fixed or groups.new or groups.still):
        return []
    all_hazards = [*groups.fixed, *groups.new, *(b for _, b in groups.still)]
    lines = [
        "",
        f"hazards ({hazards_are(h.rule for h in all_hazards)}): {len(groups.fixed)} fixed in B, "
        f"{len(groups.new)} new in B, {len(groups.still)} still there",
    ]
    rows = [("fixed", h, None, diff.a.n_pes) for h in groups.fixed]
    rows += [("new", h, None, diff.b.n_pes) for h in groups.new]
    rows += [("still", b, a, diff.b.n_pes) for a, b in groups.still]
    for label, h, in_a, n_pes in rows:
        site = short_id(h)
        if in_a is not None and short_id(in_a) != site:  # moved by the edit: A's line too
            site += f" (in A {short_id(in_a).partition(' ')[2]})"
        lines.append(
            f"  {label:<8} {escape(site, 1024)}  {escape(h.title, 64)}  "
            f"{where_text(h, n_pes)}; bytes {escape(h.where, 256)}"
        )
        lines.append(f"           id: {escape(h.id, 1024)}")
    return lines


def _findings_line(diff: RunDiff) -> str:
    if not (diff.added or diff.removed or diff.kept):
        return "findings: none in either run"
    return (
        f"findings: {len(diff.removed)} removed, {len(diff.added)} added, {len(diff.kept)} in both"
    )


def _verdict(diff: RunDiff) -> str:
    if diff.regression:
        return "REGRESSION: " + escape("; ".join(diff.regressions))
    if diff.a_incomplete is not None:
        return escape(
            f"A did not complete ({diff.a_incomplete}); B did: the numbers are not compared"
        )
    end = diff.headline[0]
    if end.delta and end.delta < 0:
        speed = f"B is faster: {-end.delta:,} fewer cycles ({end.percent:+.1f}%)"
    elif end.delta:
        speed = f"B is slower: {end.delta:,} more cycles ({end.percent:+.1f}%)"
    else:
        speed = "B takes as long as A"
    hazards = diff.hazards
    if hazards.fixed:
        n = len(hazards.fixed)
        speed += f", {n} hazard{'s' if n != 1 else ''} fixed"
    if hazards.still:
        n = len(hazards.still)
        speed += f", {n} hazard{'s' if n != 1 else ''} still there"
    fixed, new = len(diff.removed), len(diff.added)
    if fixed:
        speed += f", {fixed} finding{'s' if fixed != 1 else ''} gone"
    if new:  # findings (slow), never hazards (wrong): those are counted above
        speed += f", {new} new finding{'s' if new != 1 else ''} (listed above)"
    return speed
