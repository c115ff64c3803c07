"""HelpScreen: every key of the debugger and what it does."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

INTRO = (
    "[b]kbdebug[/b] steps through a kernel's trace both ways, as gdb's single-key mode does: "
    "lower case moves forward, upper case backward. The cursor is the current event (▼ on "
    "the timeline, ▶ in the source and the events). The timeline shows each PE's kernel "
    "(━ running, █ stalled in a tl.wait, ▒ partly stalled, ╳ after an error or a deadlock), "
    "each channel (░▒▓█: how busy it is in that column) and the scratch level; the selected "
    "future's span is highlighted. The source gutter adds up the cycles each line's waits "
    "stalled; in the futures table, times still ahead of the cursor are dimmed and ∞ is a "
    "wait a deadlock never ends. Tab moves between panes; arrows scroll them, Enter acts "
    "(a breakpoint on a source line, a future, an event or a finding).\n"
)


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
        text = Text.from_markup(INTRO)
        text.append("\n")
        for key, description in self.keys:
            text.append(key.ljust(width), style="bold")
            text.append(description + "\n")
        text.append("\nEsc, q or ? closes this.", style="dim")
        with VerticalScroll() as scroll:
            scroll.border_title = "Keys"
            yield Static(text)

    def action_close(self) -> None:
        self.dismiss(None)
