"""FindingsView: the hazards and serialisation findings of the trace; Enter jumps to one."""

from __future__ import annotations

import textwrap

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.reactive import reactive
from textual.strip import Strip

from kbdebug.analysis.across_pes import short_id, where_text
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.hazards import HAZARD_RULES, Hazard, hazard_kind
from kbdebug.safe_text import escape
from kbdebug.ui.messages import FindingChosen, FindingHighlighted
from kbdebug.ui.panes.rowview import RowView
from kbdebug.ui.queries import cycles


class FindingsView(RowView):
    """One line per finding (its short id, the PEs where it holds, cost, title); the
    highlighted one's message and suggestion under the list."""

    BINDINGS = [
        Binding("enter", "choose", "go to", tooltip="Go to the finding's line in the run"),
    ]

    COMPONENT_CLASSES = {"findings-view--rule", "findings-view--suggestion"}

    DEFAULT_CSS = """
    FindingsView > .findings-view--rule {
        color: $warning;
        text-style: bold;
    }
    FindingsView > .findings-view--suggestion {
        color: $success;
    }
    """

    findings: reactive[list[Finding | Hazard] | None] = reactive(None, always_update=True)
    """The hazards, then the findings; None while they are being computed."""

    note = reactive("")
    """Shown instead of the list when there is nothing to list (computing, failed, none)."""

    #: Screen lines under the list for the highlighted finding's message and suggestion:
    #: at least these, and up to DETAIL_ROWS_WANTED (what a message and its fix take,
    #: wrapped at 80 columns) taken from the list on a short pane.
    DETAIL_ROWS = 3
    DETAIL_ROWS_WANTED = 7

    def __init__(self, n_pes: int = 1, *, id: str | None = None) -> None:
        """A findings list for a trace of ``n_pes`` PEs (which says where each holds)."""
        super().__init__(id=id)
        #: PEs of the trace: ``on 64 of 64 PEs`` says where a finding holds.
        self.n_pes = n_pes

    def row_count(self) -> int:
        return len(self.findings) if self.findings else 0

    @property
    def detail_rows(self) -> int:
        """Lines for the details: what the list leaves (after a blank line); on a short
        pane the list gives up rows, down to the highlighted finding's, until the details
        have DETAIL_ROWS_WANTED; none on a pane too small for both."""
        height = self.size.height
        if height <= self.DETAIL_ROWS:
            return 0
        spare = height - self.row_count() - 1
        return max(spare, min(self.DETAIL_ROWS_WANTED, height - 1))

    @property
    def page_rows(self) -> int:
        return max(1, self.size.height - self.detail_rows)

    def render_row(self, row: int, width: int, base: Style) -> list[Segment]:
        finding = self.findings[row]
        # The short id as report prints it (KB107 pipeline.py:54 ← attention.py:113), the
        # rule set apart; then where it holds, as report says it.
        ident = escape(short_id(finding), 200)
        rule, _, site = ident.partition(" ")
        where = where_text(finding, self.n_pes)
        n = finding.saving
        amount = f"{n:,}" if n < 1_000_000 else cycles(n)
        # The estimated saving of the fix and its share of the PE's time: what to fix first.
        cost = f"saves ~{amount} ({finding.share:.0%})" if n else ""
        if finding.rule in HAZARD_RULES:
            cost = f"hazard: {hazard_kind(finding.rule)}"
        title = escape(finding.title, 64)
        return [
            Segment(f" {rule:<6}", base + self.component_style("findings-view--rule")),
            Segment(f"{site:<18} {where:<10} {cost:>20}  {title}", base),
        ]

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        dim = self.base_style + self.component_style("rowview--dim")
        if not self.row_count():
            text = self.note if y == 0 else ""
            return Strip([Segment(f" {text}", dim)]).adjust_cell_length(width, dim)
        detail = y - (self.size.height - self.detail_rows)
        if detail >= 0:
            return self._detail_line(detail, width)
        return super().render_line(y)

    def _detail_line(self, k: int, width: int) -> Strip:
        lines, suggestion = self._details(width)
        style = self.base_style
        if k < len(lines):
            return Strip([Segment(" " + lines[k], style)]).adjust_cell_length(width, style)
        k -= len(lines)
        style = style + self.component_style("findings-view--suggestion")
        text = suggestion[k] if k < len(suggestion) else ""
        return Strip([Segment(" " + text, style)]).adjust_cell_length(width, style)

    def _details(self, width: int) -> tuple[list[str], list[str]]:
        """The highlighted finding's message and suggestion, wrapped to ``width`` and cut
        (with …) to the detail rows, the suggestion keeping at least one."""
        finding = self.findings[self.cursor]
        wrap = max(width - 2, 10)
        pes = finding.pes or (finding.pe,)
        # The message is one PE's: say whose when the finding holds on several (as report).
        message = finding.message
        if len(pes) > 1 and not message.startswith("PE"):
            message = f"PE {pes[0]}: {message}"
        lines = textwrap.wrap(message, wrap)
        suggestion = textwrap.wrap("→ " + finding.suggestion, wrap)
        rows = self.detail_rows
        if len(lines) + len(suggestion) > rows:
            keep = max(rows - len(suggestion), min(len(lines), rows - 1))
            lines, suggestion = _cut(lines, keep, wrap), _cut(suggestion, rows - keep, wrap)
        return lines, suggestion

    def watch_cursor(self) -> None:
        self.refresh()

    def chosen(self, row: int) -> None:
        self.post_message(FindingChosen(self.findings[row]))

    def moved(self, row: int) -> None:
        # On a pane too short for the details the status line says them instead.
        if not self.detail_rows:
            self.post_message(FindingHighlighted(self.findings[row]))


def _cut(lines: list[str], n: int, width: int) -> list[str]:
    """The first ``n`` of ``lines``, the last one ending in … (within ``width``) if any
    were dropped."""
    if len(lines) <= n:
        return lines
    kept = lines[:n]
    if kept:
        kept[-1] = kept[-1][: width - 2].rstrip() + " …"
    return kept
