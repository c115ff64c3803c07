"""BreakpointDialog: list, add, remove, enable and disable breakpoints."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from kbdebug.replay import Breakpoint, Replay
from kbdebug.safe_text import escape
from kbdebug.ui.screens.bpspec import SYNTAX, parse_breakpoint

#: Characters the list acts on itself (its bindings) rather than passing to the box.
_LIST_KEYS = (" ", "a", "d")


class BreakpointDialog(ModalScreen[bool]):
    """Edits ``replay.breakpoints`` in place; dismissed with whether anything changed."""

    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("space", "toggle", "Enable/disable"),
        Binding("d,delete", "remove", "Remove"),
        Binding("a", "add", "Add"),
        Binding("up", "to_list", "Back to the list", show=False),
    ]

    DEFAULT_CSS = """
    BreakpointDialog {
        align: center middle;
    }
    BreakpointDialog > Vertical {
        width: 100;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $accent;
        border-title-color: $accent;
        background: $panel;
        padding: 0 1;
    }
    BreakpointDialog OptionList {
        height: auto;
        max-height: 12;
        min-height: 0;
        border: none;
        padding: 0;
    }
    BreakpointDialog OptionList:focus {
        border: none;
    }
    BreakpointDialog Input {
        margin: 1 0 0 0;
        border: none;
        height: 1;
        padding: 0 1;
        background: $boost;
    }
    BreakpointDialog Input:focus {
        border: none;
        background: $accent 20%;
    }
    BreakpointDialog Label {
        width: 100%;
    }
    BreakpointDialog .hint {
        color: $text-muted;
    }
    BreakpointDialog #error {
        color: $error;
    }
    BreakpointDialog #empty {
        color: $text-muted;
    }
    """

    #: The keys line, for the list and for the input box.
    LIST_KEYS = "space enable/disable · d remove · a add · esc close"
    INPUT_KEYS = "Enter adds · ↑ or Tab back to the list · esc close"

    def __init__(self, replay: Replay) -> None:
        super().__init__()
        self.replay = replay
        self.changed = False

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Breakpoints"
            yield Label("no breakpoints yet: type one (or a, then one) and press Enter", id="empty")
            yield OptionList(*self._options())
            yield Label(self.LIST_KEYS, id="keys", classes="hint", markup=False)
            yield Input(
                placeholder="add: wait >= 500 pe 0   line 86   future 12 ready",
                select_on_focus=False,
            )
            # Not markup: the syntax's [optional parts] would vanish as style tags.
            yield Label(SYNTAX, classes="hint", markup=False)
            yield Label("", id="error", markup=False)

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        self._show_empty()
        if options.option_count:
            options.highlighted = 0
        # The list has the keyboard whether or not it is empty: "a" then a condition adds
        # a breakpoint either way (in the box, that "a" was the condition's first letter).
        options.focus()

    def on_key(self, event: events.Key) -> None:
        # A condition typed straight away (no "a" first) goes into the box all the same.
        box = self.query_one(Input)
        if (
            isinstance(self.focused, OptionList)
            and event.is_printable
            and event.character not in _LIST_KEYS
        ):
            event.stop()
            event.prevent_default()
            box.focus()
            box.insert_text_at_cursor(event.character)

    def _show_empty(self) -> None:
        self.query_one("#empty").display = not self.replay.breakpoints
        self._show_keys(self.focused)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        self._show_keys(event.widget)

    def _show_keys(self, focused: object) -> None:
        # The keys that work depend on where the keyboard is: typing "a" into the box
        # must not look like the way to add.
        keys = self.LIST_KEYS if self.replay.breakpoints else "a add (or just type) · esc close"
        if isinstance(focused, Input):
            keys = self.INPUT_KEYS if self.replay.breakpoints else "Enter adds · esc close"
        self.query_one("#keys", Label).update(keys)

    def _options(self) -> list[Option]:
        rows = []
        for bp in self.replay.breakpoints:
            hits = len(bp.hits(self.replay))
            mark = "●" if bp.enabled else "○"
            rows.append(
                Option(Text(f"{mark} {escape(bp.describe(self.replay), 500)}  ({hits} hits)"))
            )
        return rows

    def _refresh_list(self, highlight: int | None = None) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        options.add_options(self._options())
        self._show_empty()
        if options.option_count:
            options.highlighted = min(highlight or 0, options.option_count - 1)

    def _highlighted(self) -> Breakpoint | None:
        k = self.query_one(OptionList).highlighted
        bps = self.replay.breakpoints
        return bps[k] if k is not None and k < len(bps) else None

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.action_toggle()

    def action_toggle(self) -> None:
        bp = self._highlighted()
        if bp is not None:
            bp.enabled = not bp.enabled
            self.changed = True
            self._refresh_list(self.query_one(OptionList).highlighted)

    def action_remove(self) -> None:
        bp = self._highlighted()
        if bp is not None:
            k = self.replay.breakpoints.index(bp)
            self.replay.breakpoints.remove(bp)
            self.changed = True
            self._refresh_list(max(k - 1, 0))

    def action_add(self) -> None:
        self.query_one(Input).focus()

    def action_to_list(self) -> None:
        options = self.query_one(OptionList)
        if options.option_count:
            options.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        error = self.query_one("#error", Label)
        try:
            bp = parse_breakpoint(event.value)
        except ValueError as e:
            error.update(escape(str(e), 500))
            return
        self.replay.breakpoints.append(bp)
        self.changed = True
        error.update("")
        event.input.value = ""
        self._refresh_list(len(self.replay.breakpoints) - 1)
        self.query_one(OptionList).focus()

    def action_close(self) -> None:
        self.dismiss(self.changed)
