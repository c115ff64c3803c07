"""HelpScreen: every key of the debugger and what it does."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

INTRO = """\
[b]kbdebug[/b]: step through a kernel's trace both ways, as in gdb's single-key mode:
lower case moves forward, upper case backward. The cursor is the current event;
the timeline shows each PE's kernel (━ running, █ stalled in tl.wait), its
channels (░▒▓█ busy share of the column) and its scratch level.
"""


class HelpScreen(ModalScreen[None]):
    """The key list, built from the app's bindings."""

    BINDINGS = [
        Binding("escape,q,question_mark", "close", "Close"),
    ]

    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > VerticalScroll {
        width: 90;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $accent;
        border-title-color: $accent;
        background: $panel;
        padding: 0 1;
    }
    """

    def __init__(self, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        width = max((len(key) for key, _ in self.keys), default=4) + 2
        rows = "\n".join(f"[b $accent]{key.ljust(width)}[/]{text}" for key, text in self.keys)
        with VerticalScroll() as scroll:
            scroll.border_title = "Keys"
            yield Static(INTRO + "\n" + rows + "\n\n[dim]Esc, q or ? closes this.[/dim]")

    def action_close(self) -> None:
        self.dismiss(None)
