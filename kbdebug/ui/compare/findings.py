"""FindingGroupsView: hazards, then findings, fixed, new and still there; Enter jumps."""

from __future__ import annotations

from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip

from kbdebug.analysis.across_pes import short_id, where_text
from kbdebug.analysis.compare import FindingGroups
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.hazards import Hazard, hazard_kind
from kbdebug.safe_text import escape
from kbdebug.ui.panes.rowview import RowView
from kbdebug.ui.queries import cycles


@dataclass
class RunFindingChosen(Message):
    """Enter on a finding: go to it in ``run`` ("a" or "b")."""

    run: str
    finding: Finding


@dataclass(frozen=True)
class Row:
    """A group's title (finding None) or one finding (or hazard) of it."""

    text: str
    #: The run Enter jumps in ("" for a title); for a finding in both, the focused run.
    run: str = ""
    finding: Finding | Hazard | None = None
    other: Finding | Hazard | None = None


def _saving(f: Finding) -> str:
    n = f.saving
    return f"~{n:,} ({f.share:.0%})" if n < 1_000_000 else f"~{cycles(n)} ({f.share:.0%})"


class FindingGroupsView(RowView):
    """Three groups (fixed in B, new in B, still there), largest saving first, after the
    hazards' three groups when either run has a hazard (they are wrong, not slow)."""

    COMPONENT_CLASSES = {"finding-groups--title", "finding-groups--rule"}

    DEFAULT_CSS = """
    FindingGroupsView > .finding-groups--title { color: $text-muted; text-style: bold; }
    FindingGroupsView > .finding-groups--rule { color: $warning; text-style: bold; }
    """

    groups: reactive[FindingGroups | None] = reactive(None, always_update=True)
    """The grouped findings, or None while they are computed."""

    side = reactive("a")
    """The focused run: Enter on a finding both runs have jumps there."""

    note = reactive("looking for serialisation in both runs…")
    """Shown while there is nothing to list."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: list[Row] = []
        #: PEs of each run ("a", "b"): where a finding holds is said against them.
        self.n_pes: dict[str, int] = {}

    def watch_groups(self, groups: FindingGroups | None) -> None:
        rows: list[Row] = []
        if groups is not None:
            hazards = groups.hazards
            if hazards.fixed or hazards.new or hazards.still:
                for title, found, run in (
                    ("hazards fixed in B", [(h, None) for h in hazards.fixed], "a"),
                    ("hazards new in B", [(h, None) for h in hazards.new], "b"),
                    ("hazards still there", [(b, a) for a, b in hazards.still], ""),
                ):
                    rows.append(Row(f"{title} ({len(found) or 'none'})"))
                    rows += [Row("", run, h, other) for h, other in found]
            sections = (
                ("fixed in B", [(f, None) for f in groups.fixed], "a"),
                ("new in B", [(f, None) for f in groups.new], "b"),
                ("still there", [(b, a) for a, b in groups.still], ""),
            )
            for title, found, run in sections:
                total = sum(f.saving for f, _ in found)
                what = f"{len(found)}, est. saving ~{total:,} cycles" if found else "none"
                rows.append(Row(f"{title} ({what})"))
                rows += [Row("", run, f, other) for f, other in found]
        self._rows = rows
        first = next((k for k, r in enumerate(rows) if r.finding is not None), 0)
        self.cursor = first
        self.refresh()

    def watch_cursor(self) -> None:
        self.refresh()

    def row_count(self) -> int:
        return len(self._rows)

    def render_row(self, row: int, width: int, base: Style) -> list[Segment]:
        r = self._rows[row]
        if r.finding is None:
            return [Segment(f" {r.text}", base + self.component_style("finding-groups--title"))]
        f = r.finding
        # The short id and where it holds, as report and the single-run findings say them.
        rule, _, site = escape(short_id(f), 200).partition(" ")
        where = where_text(f, self.n_pes.get(r.run or "b", 1))
        if isinstance(f, Hazard):  # no saving: wrong, not slow
            saving = f"hazard: {hazard_kind(f.rule)}"
        elif r.other is not None:
            saving = f"A saves {_saving(r.other)}, B {_saving(f)}"
        else:
            saving = f"saves {_saving(f)}"
        return [
            Segment(f"   {rule:<6}", base + self.component_style("finding-groups--rule")),
            Segment(f"{site:<18} {where} {saving}  {escape(f.title, 64)}", base),
        ]

    def render_line(self, y: int) -> Strip:
        if not self._rows:
            dim = self.base_style + self.component_style("rowview--dim")
            text = f" {self.note}" if y == 0 else ""
            return Strip([Segment(text, dim)]).adjust_cell_length(self.size.width, dim)
        return super().render_line(y)

    def chosen(self, row: int) -> None:
        r = self._rows[row]
        if r.finding is None:
            return
        if r.other is None:
            self.post_message(RunFindingChosen(r.run, r.finding))
        else:
            # In both runs: go to it in the focused one.
            finding = r.finding if self.side == "b" else r.other
            self.post_message(RunFindingChosen(self.side, finding))
