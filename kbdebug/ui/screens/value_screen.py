"""ValueScreen: what ``p`` prints, the value of a future's tensor, in a modal over the app."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class ValueScreen(ModalScreen[None]):
    """Plain lines (already escaped, never markup) under a title; Esc, q or p closes it."""

    BINDINGS = [
        Binding("escape,q,p", "close", "Close"),
    ]

    DEFAULT_CSS = """
    ValueScreen {
        align: center middle;
    }
    ValueScreen > VerticalScroll {
        width: auto;
        min-width: 40;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $accent;
        border-title-color: $accent;
        background: $panel;
        padding: 0 1;
    }
    """

    def __init__(self, title: str, lines: list[str]) -> None:
        super().__init__()
        self.title_text = title
        #: The lines shown, in order (what a test reads).
        self.lines = lines

    def compose(self) -> ComposeResult:
        text = Text("\n".join(self.lines), no_wrap=True, overflow="ellipsis")
        text.append("\n\nEsc, q or p closes this.", style="dim")
        with VerticalScroll() as scroll:
            scroll.border_title = self.title_text
            # As wide as its longest line (border and padding: 4 more), the screen at most.
            scroll.styles.width = max(len(line) for line in [*self.lines, " " * 36]) + 4
            yield Static(text, markup=False)

    def action_close(self) -> None:
        self.dismiss(None)
