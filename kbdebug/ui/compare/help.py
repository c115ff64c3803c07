"""CompareHelp: the compare app's keys, with an introduction to comparing two runs."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from kbdebug.ui.screens.help_screen import HelpScreen

INTRO = (
    "Run A (before) and run B (after) on one time axis at one scale, A's lanes above B's. "
    "The keys move the focused run (▸ in the header; x flips to the other one), and the other "
    "run follows call by call: the same source call, matched across edits, and the same "
    "occurrence. When the other run never made that call, the status line says 'not in B' "
    "(or A) and the other cursor stays. Breakpoints (w, b, B) belong to the focused run. "
    "The source shows A's and B's line numbers side by side (a line only one run has is "
    "blank in the other's column), the stall of each line's waits in A and in B and the "
    "change, ▶ the focused run's line and ▷ the other's. Below 120 columns only the focused "
    "run's lanes are shown. Tab moves between the panes; Enter on a finding goes to it in "
    "its run, on a source line toggles a breakpoint.\n"
)


class CompareHelp(HelpScreen):
    """HelpScreen with the compare app's introduction."""

    def compose(self) -> ComposeResult:
        width = max((len(key) for key, _ in self.keys), default=4) + 2
        text = Text(INTRO)
        text.append("\n")
        for key, description in self.keys:
            text.append(key.ljust(width), style="bold")
            text.append(description + "\n")
        text.append("\nEsc, q or ? closes this.", style="dim")
        with VerticalScroll() as scroll:
            scroll.border_title = "Keys"
            yield Static(text)
