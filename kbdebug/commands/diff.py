"""`kbdebug diff A B`: two runs side by side, and whether B regressed.

Exit status: 0; 1 with ``--fail-on-regression`` when B ends later than A or has
a finding A has not; 2 for a bad trace file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kbdebug.analysis import findings_of
from kbdebug.commands.export import open_replay
from kbdebug.export.diff import SCHEMA, Change, RunDiff, compare, to_json
from kbdebug.replay.summary import Summary, summarize

#: Source lines the text lists (largest stall first); --json has them all.
STALL_LINES = 15

DESCRIPTION = """\
Compare two traces, A (before) and B (after): end cycle, stall cycles,
dma_read_count and overlap efficiency per PE; busy share of every channel and
engine; findings removed and added (by id); stall per source line (matched by
file and line). Each with both values and the change, absolute and in percent
of A.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "diff",
        help="compare two traces: did B fix A's serialisation?",
        description=DESCRIPTION,
        epilog="example:\n"
        "  kbdebug run decode_blocking -o blocking.kbt\n"
        "  kbdebug run decode_prefetch -o prefetch.kbt\n"
        "  kbdebug diff blocking.kbt prefetch.kbt --fail-on-regression",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", metavar="A", help="the trace before (baseline)")
    p.add_argument("b", metavar="B", help="the trace after")
    p.add_argument("--json", action="store_true", help=f"print JSON (schema {SCHEMA})")
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when B ends later than A or adds a finding",
    )


def run(args: argparse.Namespace) -> int:
    a, b = open_replay(Path(args.a)), open_replay(Path(args.b))
    diff = compare(summarize(a), summarize(b), findings_of(a), findings_of(b))
    if args.json:
        sys.stdout.write(json.dumps(to_json(diff, args.a, args.b), indent=2) + "\n")
    else:
        sys.stdout.write(render(diff, args.a, args.b))
    return 1 if args.fail_on_regression and diff.regression else 0


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
    return [
        [c.name, _value(c.a, c.unit), _value(c.b, c.unit), _change(c), c.verdict] for c in changes
    ]


def _run_line(label: str, path: str, s: Summary) -> str:
    status = s.status if s.status == "ok" else s.status.upper()
    return f"{label}: {path}  ({s.kernel or 'kernel'}, {status}, {s.n_events:,} events)"


def render(diff: RunDiff, a_path: str, b_path: str) -> str:
    """The diff as text: runs, headline numbers, busy shares, findings, stalls, verdict."""
    lines = [_run_line("A", a_path, diff.a), _run_line("B", b_path, diff.b), ""]
    lines += _table(["run", "A", "B", "change", ""], _rows(diff.headline))
    if diff.busy:
        lines += ["", *_table(["busy share", "A", "B", "change", ""], _rows(diff.busy))]

    lines += ["", _findings_line(diff)]
    for label, findings in (("removed", diff.removed), ("added", diff.added)):
        lines += [f"  {label:<8} {f.id}  {f.title}" for f in findings]

    stalled = [r for r in diff.stall_by_line if r.stall.a or r.stall.b]
    if stalled:
        rows = [
            [
                f"{r.where} ({r.function})" if r.function else r.where,
                _value(r.stall.a, "cycles"),
                _value(r.stall.b, "cycles"),
                _change(r.stall),
                r.stall.verdict,
            ]
            for r in stalled[:STALL_LINES]
        ]
        lines += ["", *_table(["stall by source line", "A", "B", "change", ""], rows)]
        if len(stalled) > STALL_LINES:
            lines.append(f"  ... {len(stalled) - STALL_LINES} more lines (--json lists all)")
    lines += ["", _verdict(diff)]
    return "\n".join(lines) + "\n"


def _findings_line(diff: RunDiff) -> str:
    if not (diff.added or diff.removed or diff.kept):
        return "findings: none in either run"
    return (
        f"findings: {len(diff.removed)} removed, {len(diff.added)} added, {len(diff.kept)} in both"
    )


def _verdict(diff: RunDiff) -> str:
    end = diff.headline[0]
    if diff.regression:
        return "REGRESSION: " + "; ".join(diff.regressions)
    if end.delta:
        speed = f"B is faster: {-end.delta:,} fewer cycles ({end.percent:+.1f}%)"
    else:
        speed = "B takes as long as A"
    removed = len(diff.removed)
    if removed:
        speed += f", {removed} finding{'s' if removed != 1 else ''} fewer"
    return speed
