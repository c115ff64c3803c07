"""The single-run mode's panes: number keys, W, tab labels, and their keys in help and palette."""

from __future__ import annotations

from textual.widgets import TabbedContent

from kbdebug.ui.app.keys import PANES
from kbdebug.ui.panes.events_view import EventsView
from kbdebug.ui.panes.findings_view import FindingsView
from kbdebug.ui.panes.futures_table import FuturesTable
from kbdebug.ui.panes.mesh_view import MeshView
from kbdebug.ui.panes.rowview import RowView
from kbdebug.ui.panes.source_view import SourceView
from kbdebug.ui.panes.styles import pane_title
from kbdebug.ui.panes.timeline import Timeline


class PaneActions:
    """KbdebugApp's pane keys and what help and palette say of its panes (a mixin)."""

    def action_focus_pane(self, number: int) -> None:
        """Focus pane ``number`` (1 timeline .. 6 mesh), showing its tab if it has one."""
        pane = PANES[number - 1]
        if pane.name == "futures" and self.source_wide:
            self.action_widen_source()  # the futures table comes back to be focused
        if pane.tab is not None:
            self.query_one(TabbedContent).active = pane.tab
        widget = self.query_one(f"#{pane.widget}")
        widget.focus()
        if isinstance(widget, MeshView):
            # What the mesh is for is what it says: which PE ends last, which stalls most.
            self.status = self.mesh_status()
        else:
            self.status = f"pane {number}: {pane.name} ({_PANE_HINTS[pane.name]})"
        if isinstance(widget, FindingsView) and widget.row_count():
            # The details, when the pane has no room for them: known once the tab shown
            # has its size.
            self.call_after_refresh(widget.moved, widget.cursor)

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
            for number, name, tab in TABS:
                if name == "Findings" and self.findings is not None:
                    name = f"Findings ({len(self.findings)})"
                views = list(tabs.get_pane(tab).query(RowView))
                tabs.get_tab(tab).label = pane_title(number, name, focused in views)

    def help_panes(self) -> list[tuple[str, type]]:
        return [
            (
                f"Pane [{pane.number}] {pane.name}: its number focuses it; then",
                _PANE_CLASSES[pane.name],
            )
            for pane in PANES
        ]

    def palette_pane_actions(self) -> list[tuple[str, str, str]]:
        actions = []
        for pane in PANES:
            for key, text, action in self.pane_keys(_PANE_CLASSES[pane.name]):
                if action and not action.startswith("app."):
                    title = f"{pane.name.capitalize()} pane [{pane.number}]: {text}"
                    actions.append((title, key, f"pane_action({pane.number}, {action!r})"))
        return actions

    async def action_pane_action(self, number: int, action: str) -> None:
        """Focus pane ``number`` and run one of its own actions (from the palette)."""
        self.action_focus_pane(number)
        await self.run_action(action, self.query_one(f"#{PANES[number - 1].widget}"))


#: The panes in tabs: number, label, tab id.
TABS = ((4, "Events", "events-tab"), (5, "Findings", "findings-tab"), (6, "Mesh", "mesh-tab"))

#: What each pane is for, said when a number key focuses it (the mesh says its summary).
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
    "mesh": MeshView,
}
