"""FindingsView: the serialisation findings of the trace; Enter jumps to one."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.reactive import reactive
from textual.strip import Strip

from kbdebug.replay.findings import Finding
from kbdebug.ui.messages import FindingChosen
from kbdebug.ui.queries import cycles, short_loc
from kbdebug.ui.rowview import RowView


class FindingsView(RowView):
    """One line per finding: rule, where, what happened and what to change."""

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

    def row_count(self) -> int:
        return len(self.findings) if self.findings else 0

    def render_row(self, row: int, width: int, base: Style) -> list[Segment]:
        finding = self.findings[row]
        where = f"{short_loc(finding.loc)} PE{finding.pe}" if finding.loc else f"PE{finding.pe}"
        cost = f" ~{cycles(finding.cycles)} cycles" if finding.cycles else ""
        rule = base + self.component_style("findings-view--rule")
        return [
            Segment(f" {finding.rule:<6}", rule),
            Segment(f"{where:<22} {finding.message}{cost}  ", base),
            Segment(
                f"→ {finding.suggestion}",
                base + self.component_style("findings-view--suggestion"),
            ),
        ]

    def render_line(self, y: int) -> Strip:
        if not self.row_count():
            text = self.note if y == 0 else ""
            style = self.base_style + self.component_style("rowview--dim")
            return Strip([Segment(f" {text}", style)]).adjust_cell_length(self.size.width, style)
        return super().render_line(y)

    def chosen(self, row: int) -> None:
        self.post_message(FindingChosen(self.findings[row]))
