"""The report as a Markdown summary (``kbdebug report --format markdown``), for a CI job's
summary page (``>> "$GITHUB_STEP_SUMMARY"``): the run's figures and a table of findings.

Text from the trace is never markup here: Markdown's emphasis, code, link, table and
heading marks are backslash-escaped
and ``<``, ``>``, ``&`` become entities, so a kernel's names cannot add links, HTML or
table cells.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kbdebug.analysis.across_pes import short_id
from kbdebug.analysis.gate import one_line
from kbdebug.export import review
from kbdebug.safe_text import escape

if TYPE_CHECKING:
    from kbdebug.analysis import Analysis
    from kbdebug.analysis.finding import Finding

#: Findings the table lists at most (the rest are counted below it).
TABLE_ROWS = 50
#: Characters of one cell of trace text at most.
CELL_CHARS = 400

# Cells and list items never start a line, so the punctuation that only acts there
# (``-``, ``+``, ``.``, ``!``) is left alone; ``[`` escaped leaves no link to open.
_MARKUP = re.compile(r"([\\`*_\[\]|~#])")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def md_text(text: object, limit: int = CELL_CHARS) -> str:
    """``text`` as plain Markdown on one line: control characters shown, punctuation
    backslash-escaped, ``<``, ``>`` and ``&`` as entities."""
    plain = escape(one_line(str(text)), limit)
    plain = "".join(_ENTITIES.get(c, c) for c in plain)
    return _MARKUP.sub(r"\\\1", plain)


def summary_markdown(analysis: Analysis, trace: str) -> str:
    """The Markdown summary of ``analysis`` (the trace ``trace``)."""
    summary = analysis.summary
    bound, efficiency = analysis.launch_efficiency
    reason = analysis.incomplete
    found = [*review.hazards(analysis), *review.ranked(analysis)]
    lines = [
        f"### kbdebug: {md_text(summary.kernel or '?', 256)}",
        "",
        f"- trace: `{_code(trace)}`",
    ]
    if reason is not None:
        lines.append(f"- **the run did not complete**: {md_text(reason)}")
    else:
        lines.append(f"- status: ok, end cycle {summary.end_time:,}")
        eff = "-" if efficiency is None else f"{efficiency:.1%}"
        lines.append(f"- launch bound {bound:,} cycles, efficiency {eff}")
    hazards = sum(review.is_hazard_rule(f.rule) for f in found)
    lines.append(
        f"- {len(found) - hazards} finding{'s' if len(found) - hazards != 1 else ''}"
        + (f", {hazards} hazard{'s' if hazards != 1 else ''}" if hazards else "")
    )
    if not found:
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "| rule | line | where | est. saving | what happened | fix |",
        "|------|------|-------|------------:|---------------|-----|",
    ]
    lines += [_row(f, analysis) for f in found[:TABLE_ROWS]]
    if len(found) > TABLE_ROWS:
        lines += ["", f"{len(found) - TABLE_ROWS} more: `kbdebug report {_code(trace)}` lists all."]
    return "\n".join(lines) + "\n"


def _row(f: Finding, analysis: Analysis) -> str:
    saving = "hazard" if review.is_hazard_rule(f.rule) else f"{f.saving:,} cycles"
    cells = [
        f"{md_text(f.rule, 16)} {md_text(f.title, 64)}",
        md_text(short_id(f).partition(" ")[2], 256),
        md_text(review.pes_text(f), 64),
        saving,
        md_text(f.message),
        md_text(f.suggestion),
    ]
    return "| " + " | ".join(cells) + " |"


def _code(text: str) -> str:
    """``text`` inside a code span: backticks cannot close it, nor a newline end it."""
    return escape(one_line(text), 512).replace("`", "'")
