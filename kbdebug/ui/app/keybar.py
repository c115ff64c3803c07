"""KeyBar: the bottom line: the focused pane's keys, then the app's; ^p, ? and q always shown."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import App
from textual.screen import Screen
from textual.widget import Widget

from kbdebug.ui.app.keys import PINNED
from kbdebug.ui.panes.styles import component_style

#: Gap between two keys.
_GAP = "  "


class KeyBar(Widget):
    """One line of ``key action`` pairs, cut to the width without losing ``^p``, ``?``, ``q``.

    The focused pane's own keys come first (bold), then the mode's keys in the
    order they are declared, until the line is full; the palette, help and quit
    keys stay at the right end at any width, so a narrow terminal still says how
    to find every action, how to get help and how to leave.
    """

    COMPONENT_CLASSES = {"key-bar--key", "key-bar--pane", "key-bar--pane-key"}

    DEFAULT_CSS = """
    KeyBar {
        height: 1;
        dock: bottom;
        background: $panel;
        color: $text-muted;
    }
    KeyBar > .key-bar--key { color: $accent; text-style: bold; }
    KeyBar > .key-bar--pane { color: $text; }
    KeyBar > .key-bar--pane-key { color: $warning; text-style: bold; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        #: (start column, end column, action, namespace) of each key drawn, for clicks.
        self._spans: list[tuple[int, int, str, object]] = []

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen) -> None:
        if self.is_attached and screen is self.screen:
            self.refresh()

    def items(self) -> tuple[list[tuple], list[tuple], list[tuple]]:
        """(pane keys, debugger keys, pinned keys) as ``(key text, description, action,
        namespace)``, each key once; only keys shown in the footer (``show``)."""
        pane: list[tuple] = []
        general: list[tuple] = []
        pinned: dict[str, tuple] = {}
        seen: set[str] = set()
        for active in self.screen.active_bindings.values():
            binding, node = active.binding, active.node
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            item = (self.app.get_key_display(binding), binding.description, binding.action, node)
            if binding.key in PINNED:
                pinned[binding.key] = item
            elif isinstance(node, (App, Screen)):
                general.append(item)
            else:
                pane.append(item)
        return pane, general, [pinned[key] for key in PINNED if key in pinned]

    def render(self) -> Text:
        width = self.size.width
        pane, general, pinned = self.items()
        key_style = component_style(self, "key-bar--key")
        pane_style = component_style(self, "key-bar--pane")
        pane_key = component_style(self, "key-bar--pane-key")
        tail = _GAP.join(f"{key} {text}" for key, text, _, _ in pinned)
        room = width - len(tail) - 1
        line = Text(no_wrap=True, overflow="crop")
        spans: list[tuple[int, int, str, object]] = []
        line.append(" ")
        for n, items in enumerate((pane, general)):
            for key, text, action, node in items:
                piece = len(key) + 1 + len(text) + len(_GAP)
                if len(line) + piece > room:
                    break
                spans.append((len(line), len(line) + len(key) + 1 + len(text), action, node))
                line.append(key, pane_key if n == 0 else key_style)
                line.append(" " + text, pane_style if n == 0 else None)
                line.append(_GAP)
            if n == 0 and pane and len(line) + 2 <= room:
                line.append("│ ")
        line.append(" " * max(room - len(line) + 1, 0))
        for key, text, action, node in pinned:
            spans.append((len(line), len(line) + len(key) + 1 + len(text), action, node))
            line.append(key, key_style)
            line.append(" " + text)
            line.append(_GAP)
        line.truncate(width)
        self._spans = spans
        return line

    @property
    def text(self) -> str:
        """What the bar shows, as plain text."""
        return self.render().plain

    async def on_click(self, event: events.Click) -> None:
        for start, end, action, node in self._spans:
            if start <= event.x < end:
                await self.app.run_action(action, node)
                return
