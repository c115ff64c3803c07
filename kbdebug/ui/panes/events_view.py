"""EventsView: the trace's events around the cursor, one line each, drawn only when on screen."""

from __future__ import annotations

import re

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.reactive import reactive

from emulator.trace.schema import Kind
from kbdebug.replay import Replay
from kbdebug.ui.messages import SeekRequested
from kbdebug.ui.panes.rowview import RowView

_PATH = re.compile(r" at (?:[^ ]*/)?([^ /]+:\d+)$")
_CACHE_LIMIT = 4096

#: Style class of each kind of event.
_KIND_CLASS = {
    Kind.ISSUE: "issue",
    Kind.WAIT_BEGIN: "wait",
    Kind.WAIT_END: "wait",
    Kind.COMPLETE: "complete",
    Kind.KERNEL_ERROR: "error",
    Kind.DEADLOCK: "error",
}


class EventsView(RowView):
    """Every event of the trace; the current one marked ▶, the list following the cursor."""

    BINDINGS = [
        Binding("enter", "choose", "go to", tooltip="Go to the event"),
    ]

    COMPONENT_CLASSES = {
        "events-view--current",
        "events-view--issue",
        "events-view--wait",
        "events-view--complete",
        "events-view--error",
        "events-view--future",
    }

    DEFAULT_CSS = """
    EventsView > .events-view--current {
        background: $warning 25%;
        text-style: bold;
    }
    EventsView > .events-view--issue { color: $primary-lighten-2; }
    EventsView > .events-view--wait { color: $warning; }
    EventsView > .events-view--complete { color: $success; }
    EventsView > .events-view--error { color: $error; text-style: bold; }
    EventsView > .events-view--future { text-style: underline; }
    """

    position = reactive(0, repaint=False)
    """Events applied: the current event is ``position - 1``."""

    selected_future = reactive(-1, repaint=False)
    """Events about this future are underlined."""

    def __init__(self, replay: Replay, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.replay = replay
        self._lines: dict[int, str] = {}

    def row_count(self) -> int:
        return self.replay.n_events

    def watch_position(self, old: int, position: int) -> None:
        # The rows of the old and the new current event (▶); a scroll repaints them all.
        self.cursor = position - 1
        self.show_row(self.cursor, center=not self.top <= self.cursor < self.top + self.page_rows)
        self.refresh_rows(old - 1, position - 1)

    def watch_selected_future(self, old: int, new: int) -> None:
        # Only the rows about the old or the new future change (their underline).
        futures = self.replay.index.columns.fut[self.top : self.top + self.page_rows]
        rows = np.flatnonzero((futures == old) | (futures == new)) + self.top
        self.refresh_rows(*rows.tolist())

    def on_mount(self) -> None:
        self.call_after_refresh(self.watch_position, self.position, self.position)

    def chosen(self, row: int) -> None:
        self.post_message(SeekRequested(row))

    def line(self, i: int) -> str:
        """Event ``i`` as shown: index, cycle, PE, kind and details, file paths shortened."""
        text = self._lines.get(i)
        if text is None:
            if len(self._lines) > _CACHE_LIMIT:
                self._lines.clear()
            number, time, pe, rest = self.replay.describe(i).split(" ", 3)
            # "complete cmd 15 future -1": a command without a future says nothing of one.
            rest = _PATH.sub(r" at \1", rest).replace(" future -1", "")
            text = f"{number:>8} {time[2:]:>9} {pe:<4} {rest}"
            self._lines[i] = text
        return text

    def render_row(self, row: int, width: int, base: Style) -> list[Segment]:
        current = row == self.position - 1
        if current:
            base = base + self.component_style("events-view--current")
        c = self.replay.index.columns
        kind = Kind(int(c.kind[row]))
        style = base
        name = _KIND_CLASS.get(kind)
        if name is not None:
            style = base + self.component_style(f"events-view--{name}")
        if self.selected_future >= 0 and int(c.fut[row]) == self.selected_future:
            style = style + self.component_style("events-view--future")
        text = self.line(row)
        pad = " " * max(width - 1 - len(text), 0)
        return [Segment("▶" if current else " ", base), Segment(text, style), Segment(pad, base)]
