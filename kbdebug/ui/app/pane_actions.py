"""The debugger's panes: number keys, focus marks, the help screen and the palette."""

from __future__ import annotations

from textual.binding import Binding
from textual.content import Content
from textual.widgets import TabbedContent

from kbdebug.analysis.findings import Finding
from kbdebug.ui.app.keys import DEBUGGER_ACTIONS, KEYS, PANES, Pane, pane_title
from kbdebug.ui.panes.events_view import EventsView
from kbdebug.ui.panes.findings_view import FindingsView
from kbdebug.ui.panes.futures_table import FuturesTable
from kbdebug.ui.panes.rowview import RowView
from kbdebug.ui.panes.source_view import SourceView
from kbdebug.ui.panes.timeline import Timeline
from kbdebug.ui.screens.help_screen import HelpScreen


class PaneActions:
    """KbdebugApp's pane keys, help and palette (a mixin: the app's state is the app's)."""

    def action_focus_pane(self, number: int) -> None:
        """Focus pane ``number`` (1 timeline .. 5 findings), showing its tab if it has one."""
        pane = PANES[number - 1]
        if pane.name == "futures" and self.source_wide:
            self.action_widen_source()  # the futures table comes back to be focused
        if pane.tab is not None:
            self.query_one(TabbedContent).active = pane.tab
        widget = self.query_one(f"#{pane.widget}")
        widget.focus()
        self.status = f"pane {number}: {pane.name} ({_PANE_HINTS[pane.name]})"
        if isinstance(widget, FindingsView) and widget.row_count():
            widget.moved(widget.cursor)  # the details, when the pane has no room for them

    def action_widen_source(self) -> None:
        """Give the source the whole middle row, hiding the futures table; again: back."""
        self.source_wide = not self.source_wide
        self._fit_panes()
        self.status = (
            "the source has the whole width (W again gives the futures table back)"
            if self.source_wide
            else "the futures table is back beside the source"
        )
        if not self.source_wide and isinstance(self.focused, FuturesTable):
            self.focused.refresh()

    def on_descendant_focus(self) -> None:
        self._retitle_tabs()

    def on_descendant_blur(self) -> None:
        self._retitle_tabs()

    def _retitle_tabs(self) -> None:
        """The tab labels: their pane numbers, the findings count, the focus mark."""
        if self.replay is None:
            return
        focused = self.focused
        for tabs in self.query(TabbedContent):
            for number, name, tab in ((4, "Events", "events-tab"), (5, "Findings", "findings-tab")):
                if name == "Findings" and self.findings is not None:
                    name = f"Findings ({len(self.findings)})"
                views = list(tabs.get_pane(tab).query(RowView))
                tabs.get_tab(tab).label = tab_label(number, name, focused in views)

    def action_help(self) -> None:
        keys = [
            (self.get_key_display(Binding(key.key.split(",")[0], key.action)), key.long)
            for key in KEYS
        ]
        keys.append(("tab", "Move the keyboard focus between panes (arrows scroll, Enter acts)"))
        panes = [
            (f"[{pane.number}] {pane.name}", [(k, text) for k, text, _ in self.pane_keys(pane)])
            for pane in PANES
        ]
        self.push_screen(HelpScreen(keys, panes=panes))

    def pane_keys(self, pane: Pane) -> list[tuple[str, str, str]]:
        """(key, what it does, action) of the keys pane ``pane`` has of its own."""
        widget = _PANE_CLASSES[pane.name]
        out = [("↑↓", "Move the highlighted row" if pane.number > 1 else "Scroll lanes", "")]
        for binding in widget.BINDINGS:
            if binding.show:
                key = binding.key_display or self.get_key_display(binding)
                out.append((key, binding.tooltip or binding.description, binding.action))
        return out

    # --- command palette -----------------------------------------------------------------

    def palette_actions(self) -> list[tuple[str, str, str]]:
        """(title, key, action) of every debugger key and every pane's own keys, for the
        command palette."""
        actions = [
            (key.long, self.get_key_display(Binding(key.key.split(",")[0], key.action)), key.action)
            for key in KEYS
            if key.action != "command_palette"
            and (self.replay is not None or key.action.split("(")[0] not in DEBUGGER_ACTIONS)
        ]
        if self.replay is not None:
            for pane in PANES:
                for key, text, action in self.pane_keys(pane):
                    if action and not action.startswith("app."):
                        title = f"{pane.name.capitalize()} pane [{pane.number}]: {text}"
                        actions.append((title, key, f"pane_action({pane.number}, {action!r})"))
        return actions

    async def action_pane_action(self, number: int, action: str) -> None:
        """Focus pane ``number`` and run one of its own actions (from the palette)."""
        self.action_focus_pane(number)
        await self.run_action(action, self.query_one(f"#{PANES[number - 1].widget}"))

    async def run_key_action(self, action: str) -> None:
        """Run a key's action from the palette, or say why it does not apply now."""
        name = action.split("(")[0]
        if not self.check_action(name, ()):
            self._refuse(self.why_not(name))
            return
        await self.run_action(action)

    def palette_findings(self) -> list[Finding]:
        return list(self.findings or [])


#: What each pane is for, said when a number key focuses it.
_PANE_HINTS = {
    "timeline": "← → pan, + - zoom, Z whole trace",
    "source": "b or Enter toggles a breakpoint, ← → scroll the code, W widens it",
    "futures": "↑↓ pick a future, o sorts by id, stall or issue",
    "events": "↑↓ and Enter go to an event",
    "findings": "biggest saving first; Enter goes to one",
}

#: The widget class of each pane, for its keys.
_PANE_CLASSES = {
    "timeline": Timeline,
    "source": SourceView,
    "futures": FuturesTable,
    "events": EventsView,
    "findings": FindingsView,
}


def tab_label(number: int, name: str, focused: bool = False) -> Content:
    """A tab's label: ``[4] Events``, marked when its pane has the keyboard."""
    return pane_title(number, name, focused)
