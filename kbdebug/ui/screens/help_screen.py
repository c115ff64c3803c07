"""HelpScreen: the mode's introduction, every key and what it does, then each pane's own keys."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

#: The single-run mode's introduction (markup).
INTRO = (
    "[b]kbdebug[/b] steps through a kernel's trace both ways, as gdb's single-key mode does: "
    "lower case moves forward, upper case backward. The cursor is the current event (▼ on "
    "the timeline, ▶ in the source and the events). The timeline shows each PE's kernel "
    "(━ running, ╱ stalled in a tl.wait, ╍ partly stalled, ╳ after an error or a deadlock), "
    "each channel (▁▂▃▄▅▆▇█: the share of the column it was busy) and the scratch level "
    "against the scratch capacity; each label gives the lane's busy share over the visible "
    "cycles (the scratch lane: its peak/capacity); the selected future's span is "
    "highlighted. The source gutter adds up the cycles each line's waits stalled; the "
    "futures table lists the focused PE's futures (a: every PE's), times the cursor has not "
    "reached blank, stalls still ahead dimmed, ∞ a wait a deadlock never ends. The mesh (6) "
    "has a row per PE: its end, efficiency, stall share and a strip of its stall over the "
    "launch (─ running, ▁ to █ stalled). The number keys 1 to 6 focus the panes (the focused "
    "one's title is marked ▶ and its keys come first at the bottom); Tab moves between them "
    "too; arrows scroll them, Enter acts (a breakpoint on a source line, a future, an event, a "
    "finding or a PE to focus).\n"
)


class HelpScreen(ModalScreen[None]):
    """The key list, built from the app's keys: the same layout in both modes."""

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

    def __init__(
        self,
        keys: list[tuple[str, str]],
        *,
        intro: str = INTRO,
        panes: list[tuple[str, list[tuple[str, str]]]] | None = None,
    ) -> None:
        super().__init__()
        self.keys = keys
        #: What comes before the keys (markup: the app's own text, never a trace's).
        self.intro = intro
        #: Per pane: its title (``[3] futures``) and its own keys.
        self.panes = panes or []

    def compose(self) -> ComposeResult:
        pane_keys = [key for _, keys in self.panes for key, _ in keys]
        width = max((len(key) for key in [k for k, _ in self.keys] + pane_keys), default=4) + 2
        text = Text.from_markup(self.intro)
        text.append("\n")
        for key, description in self.keys:
            text.append(key.ljust(width), style="bold")
            text.append(description + "\n")
        for title, keys in self.panes:
            text.append(f"\n{title}\n", style="bold underline")
            for key, description in keys:
                text.append(key.ljust(width), style="bold")
                text.append(description + "\n")
        text.append("\nEsc, q or ? closes this.", style="dim")
        with VerticalScroll() as scroll:
            scroll.border_title = "Keys"
            yield Static(text)

    def action_close(self) -> None:
        self.dismiss(None)
