"""RowView: the base of the list panes, a Line API widget drawing only the rows on screen.

A subclass says how many rows there are and draws one on demand, so a list of a
million events costs what the twenty visible rows cost.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from kbdebug.safe_text import escape
from kbdebug.ui.panes.styles import component_style

#: Characters of one segment of a row kept (a row is a line of the screen).
ROW_TEXT_LIMIT = 1000


class RowView(Widget, can_focus=True):
    """A virtual list: rows ``top`` .. ``top + height`` drawn by ``render_row``, one cursor row."""

    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "edge(-1)", "First", show=False),
        Binding("end", "edge(1)", "Last", show=False),
        Binding("enter", "choose", "Choose", show=False),
    ]

    COMPONENT_CLASSES = {
        "rowview--header",
        "rowview--cursor",
        "rowview--dim",
    }

    DEFAULT_CSS = """
    RowView {
        height: 1fr;
    }
    RowView > .rowview--header {
        color: $text-muted;
        text-style: bold;
    }
    RowView > .rowview--cursor {
        background: $boost;
    }
    RowView:focus > .rowview--cursor {
        background: $accent 35%;
    }
    RowView > .rowview--dim {
        color: $text-muted;
    }
    """

    top = reactive(0)
    """The first row on screen."""

    cursor = reactive(0, repaint=False)
    """The highlighted row: Enter acts on it (moving it repaints the two rows concerned)."""

    #: Whether the first screen line is a column header that does not scroll.
    HAS_HEADER = False

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._cached_component_styles: dict[str, Style] = {}
        self._cached_base_style: Style | None = None

    def row_count(self) -> int:
        """How many rows there are."""
        raise NotImplementedError

    def render_row(self, row: int, width: int, base: Style) -> list[Segment]:
        """The segments of ``row``; ``base`` carries the row's background (cursor or not)."""
        raise NotImplementedError

    def render_header(self, width: int, base: Style) -> list[Segment]:
        return []

    def chosen(self, row: int) -> None:
        """Enter (or a double click) on ``row``."""

    def moved(self, row: int) -> None:
        """The user moved the cursor to ``row``."""

    @property
    def page_rows(self) -> int:
        """Rows that fit on screen."""
        return max(1, self.size.height - (1 if self.HAS_HEADER else 0))

    def validate_top(self, top: int) -> int:
        return max(0, min(int(top), self.row_count() - self.page_rows))

    def validate_cursor(self, cursor: int) -> int:
        return max(0, min(int(cursor), self.row_count() - 1))

    def watch_cursor(self, old: int, new: int) -> None:
        self.refresh_rows(old, new)

    def refresh_rows(self, *rows: int) -> None:
        """Repaint only ``rows`` (those on screen): a move that changes two rows of a
        list need not cost a frame of the whole list."""
        width = self.size.width
        header = 1 if self.HAS_HEADER else 0
        for row in set(rows):
            y = row - self.top + header
            if header <= y < self.size.height:
                self.refresh(Region(0, y, width, 1))

    def show_row(self, row: int, center: bool = False) -> None:
        """Scroll so ``row`` is on screen (in the middle when ``center`` or when far off)."""
        page = self.page_rows
        if center or not self.top <= row < self.top + page:
            margin = min(2, page // 4)
            if not center and self.top - page <= row < self.top:
                self.top = row - margin
            elif not center and self.top + page <= row < self.top + 2 * page:
                self.top = row - page + 1 + margin
            else:
                self.top = row - page // 2

    def component_style(self, name: str) -> Style:
        """What component class ``name`` sets (see styles.component_style), cached."""
        style = self._cached_component_styles.get(name)
        if style is None:
            style = self._cached_component_styles[name] = component_style(self, name)
        return style

    @property
    def base_style(self) -> Style:
        """The widget's own style (``rich_style``), cached until the styles change."""
        if self._cached_base_style is None:
            self._cached_base_style = self.rich_style
        return self._cached_base_style

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cached_component_styles.clear()
        self._cached_base_style = None

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.base_style
        if self.HAS_HEADER:
            if y == 0:
                style = base + self.component_style("rowview--header")
                return self._fit(self.render_header(width, style), width, style)
            y -= 1
        row = self.top + y
        if row >= self.row_count():
            return Strip.blank(width, base)
        if row == self.cursor:
            base = base + self.component_style("rowview--cursor")
        return self._fit(self.render_row(row, width, base), width, base)

    @staticmethod
    def _fit(segments: list[Segment], width: int, style: Style) -> Strip:
        # Rows show trace strings: their control characters (an ESC that would retitle
        # or clear the terminal) are shown escaped, whatever the view that drew them.
        safe = [
            Segment(escape(s.text, ROW_TEXT_LIMIT), s.style) if not s.text.isprintable() else s
            for s in segments
        ]
        return Strip(safe).adjust_cell_length(width, style)

    def on_resize(self) -> None:
        self.top = self.top
        # A pane that shrinks (another tab took its rows) keeps its cursor on screen.
        if self.row_count():
            self.show_row(self.cursor)
        self.refresh()

    def action_move(self, delta: int) -> None:
        if not self.row_count():
            return
        self.cursor += delta
        self.show_row(self.cursor)
        self.moved(self.cursor)

    def action_page(self, direction: int) -> None:
        if not self.row_count():
            return
        self.top += direction * self.page_rows
        self.cursor += direction * self.page_rows
        self.moved(self.cursor)

    def action_edge(self, direction: int) -> None:
        if not self.row_count():
            return
        self.cursor = 0 if direction < 0 else self.row_count() - 1
        self.show_row(self.cursor)
        self.moved(self.cursor)

    def action_choose(self) -> None:
        if self.row_count():
            self.chosen(self.cursor)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        event.stop()
        self.top += 3

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        event.stop()
        self.top -= 3

    def on_click(self, event: events.Click) -> None:
        y = event.y - (1 if self.HAS_HEADER else 0)
        if y < 0:
            return
        row = self.top + y
        if row < self.row_count():
            self.cursor = row
            self.moved(row)
            if event.chain >= 2:
                self.chosen(row)
