"""LoadingPanel: what the screen shows while a large trace is read and indexed."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Label, ProgressBar

from kbdebug.safe_text import escape


class LoadingPanel(Vertical):
    """The file name, the stage and a progress bar."""

    DEFAULT_CSS = """
    LoadingPanel {
        align: center middle;
        height: 1fr;
    }
    LoadingPanel > Label {
        width: 100%;
        content-align: center middle;
    }
    LoadingPanel > ProgressBar {
        width: auto;
        margin: 1 0;
    }
    """

    fraction = reactive(0.0)
    """How much of the trace is loaded, 0..1."""

    stage = reactive("reading")
    """What is being done now."""

    def __init__(self, path: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.path = path

    def compose(self) -> ComposeResult:
        # The path is the user's, but shown as given: never as markup (a [/b] in it).
        yield Label(f"Opening {escape(self.path, 500)}", markup=False)
        yield ProgressBar(total=100, show_eta=False)
        yield Label(self.stage, id="stage")

    def watch_fraction(self, fraction: float) -> None:
        if self.is_mounted:
            self.query_one(ProgressBar).update(progress=round(100 * fraction, 1))

    def watch_stage(self, stage: str) -> None:
        if self.is_mounted:
            self.query_one("#stage", Label).update(stage)
