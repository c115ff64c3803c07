"""PromptScreen: a one-line input at the bottom of the screen, for ``:`` and ``/``."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class PromptScreen(ModalScreen[str | None]):
    """Ask for one line; dismissed with the text (Enter) or None (Escape)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    DEFAULT_CSS = """
    PromptScreen {
        align: left bottom;
        background: $background 0%;
    }
    PromptScreen > Horizontal {
        height: 2;
        width: 100%;
        background: $panel;
        border-top: solid $accent;
        padding: 0 1;
    }
    PromptScreen Label {
        width: auto;
        padding: 0 1 0 0;
        color: $accent;
        text-style: bold;
    }
    PromptScreen Input, PromptScreen Input:focus {
        border: none;
        height: 1;
        width: 1fr;
        padding: 0;
    }
    PromptScreen #hint {
        color: $text-muted;
        width: auto;
        padding: 0 0 0 1;
    }
    """

    def __init__(self, prompt: str, value: str = "", hint: str = "") -> None:
        super().__init__()
        self.prompt = prompt
        self.value = value
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Label(self.prompt)
            yield Input(value=self.value, select_on_focus=True)
            yield Label(self.hint, id="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
