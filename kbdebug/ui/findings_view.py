"""FindingsView: the serialisation findings of the trace; Enter jumps to one."""

from __future__ import annotations

import textwrap

from rich.segment import Segment
from rich.style import Style
from textual.reactive import reactive
from textual.strip import Strip

from kbdebug.replay.findings import Finding
from kbdebug.ui.messages import FindingChosen
from kbdebug.ui.queries import cycles, short_loc
from kbdebug.ui.rowview import RowView


class FindingsView(RowView):
    """One line per finding (rule, where, cost, title); the highlighted one's message and
    suggestion under the list."""

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

    findings: reactive[list[Finding] | None] = reactive(None, always_update=True)
    """The findings, or None while they are being computed."""

    note = reactive("")
    """Shown instead of the list when there is nothing to list (computing, failed, none)."""

    #: Screen lines under the list for the highlighted finding's message and suggestion.
    DETAIL_ROWS = 3

    def row_count(self) -> int:
        return len(self.findings) if self.findings else 0

    @property
    def detail_rows(self) -> int:
        return self.DETAIL_ROWS if self.size.height > 2 * self.DETAIL_ROWS else 0

    @property
    def page_rows(self) -> int:
        return max(1, self.size.height - self.detail_rows)

    def render_row(self, row: int, width: int, base: Style) -> list[Segment]:
        finding = self.findings[row]
        where = short_loc(finding.loc) if finding.loc else ""
        cost = f"~{cycles(finding.cycles)} cycles" if finding.cycles else ""
        rule = base + self.component_style("findings-view--rule")
        return [
            Segment(f" {finding.rule:<6}", rule),
            Segment(f"{where:<18} PE{finding.pe:<3} {cost:>14}  {finding.title}", base),
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
        finding = self.findings[self.cursor]
        lines = textwrap.wrap(finding.message, max(width - 2, 10))
        suggestion = textwrap.wrap("→ " + finding.suggestion, max(width - 2, 10))
        lines = lines[: self.DETAIL_ROWS - min(len(suggestion), 1)]
        style = self.base_style
        if k < len(lines):
            return Strip([Segment(" " + lines[k], style)]).adjust_cell_length(width, style)
        k -= len(lines)
        style = style + self.component_style("findings-view--suggestion")
        text = suggestion[k] if k < len(suggestion) else ""
        return Strip([Segment(" " + text, style)]).adjust_cell_length(width, style)

    def watch_cursor(self) -> None:
        self.refresh()

    def chosen(self, row: int) -> None:
        self.post_message(FindingChosen(self.findings[row]))
