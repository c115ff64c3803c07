"""FuturesTable: every future's lifecycle in cycles and its phase at the cursor, drawn on demand."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual.reactive import reactive
from textual.strip import Strip

from kbdebug.replay import PHASES, Replay
from kbdebug.replay.state import future_phases
from kbdebug.ui.messages import FutureChosen
from kbdebug.ui.queries import cycles
from kbdebug.ui.rowview import RowView


@dataclass(frozen=True)
class Column:
    title: str
    width: int
    #: Lower numbers stay longest when the table is narrow.
    priority: int
    right: bool = True


COLUMNS = (
    Column("future", 6, 0),
    Column("pe", 3, 4),
    Column("op", 11, 1, right=False),
    Column("address", 10, 7),
    Column("bytes", 7, 5),
    Column("issued", 7, 2),
    Column("granted", 7, 6),
    Column("done", 7, 3),
    Column("waited", 7, 4),
    Column("resolved", 8, 3),
    Column("stall", 6, 1),
    Column("phase", 12, 0, right=False),
)
_WIDTH = {c.title: c.width for c in COLUMNS}

#: What the table says when the trace has no futures at all.
EMPTY = (
    "no futures in this trace: only tl.load,",
    "load_async, store, send and recv_async",
    "make them (a tl.composite's own",
    "transfers do not: see the events)",
)


class FuturesTable(RowView):
    """One row per future (id order); times after the cursor are dimmed."""

    COMPONENT_CLASSES = {
        "futures-table--selected",
        "futures-table--stall",
        "futures-table--pending",
        "futures-table--resolved",
    }

    DEFAULT_CSS = """
    FuturesTable > .futures-table--selected {
        background: $accent 30%;
        text-style: bold;
    }
    FuturesTable > .futures-table--stall {
        color: $error-lighten-1;
    }
    FuturesTable > .futures-table--pending {
        color: $warning;
    }
    FuturesTable > .futures-table--resolved {
        color: $text-muted;
    }
    """

    HAS_HEADER = True

    position = reactive(0)
    """Events applied: phases and dimming are relative to it."""

    selected_future = reactive(-1)
    """The future highlighted here and on the timeline."""

    def __init__(self, replay: Replay, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.replay = replay
        index = replay.index
        f, k, time = index.futures, index.commands, index.columns.time
        cmd = np.maximum(f.cmd, 0)
        known = f.cmd >= 0

        def events(raw: np.ndarray) -> np.ndarray:
            return np.where(known, raw, -1)

        #: Per future: event indices of issue, grant, complete, wait begin, wait end.
        self._events = np.stack(
            [
                events(k.issue[cmd]) if len(k.issue) else events(cmd),
                events(k.grant[cmd]) if len(k.grant) else events(cmd),
                events(k.complete[cmd]) if len(k.complete) else events(cmd),
                f.wait_begin,
                f.wait_end,
            ],
            axis=1,
        )
        self._times = np.where(self._events >= 0, time[np.maximum(self._events, 0)], -1)
        self._phase_key: tuple[int, int, int] | None = None
        self._phases = np.empty(0, dtype=np.int8)
        self._columns: tuple[Column, ...] = COLUMNS
        self._columns_width = -1
        if index.n_pes == 1:
            self._all_columns = tuple(c for c in COLUMNS if c.title != "pe")
        else:
            self._all_columns = COLUMNS

    def row_count(self) -> int:
        return len(self.replay.index.futures.cmd)

    def watch_position(self) -> None:
        self.refresh()

    def watch_selected_future(self, future: int) -> None:
        if future >= 0:
            self.cursor = future
            self.show_row(future)
        self.refresh()

    def moved(self, row: int) -> None:
        self.post_message(FutureChosen(row))

    def chosen(self, row: int) -> None:
        self.post_message(FutureChosen(row))

    def columns(self, width: int) -> tuple[Column, ...]:
        """The columns that fit in ``width``, dropping the least important first."""
        if width != self._columns_width:
            columns = list(self._all_columns)
            while len(columns) > 2 and sum(c.width + 1 for c in columns) > width:
                columns.remove(max(columns, key=lambda c: (c.priority, columns.index(c))))
            self._columns, self._columns_width = tuple(columns), width
        return self._columns

    def render_header(self, width: int, base: Style) -> list[Segment]:
        text = " ".join(
            c.title.rjust(c.width) if c.right else c.title.ljust(c.width)
            for c in self.columns(width)
        )
        return [Segment(text, base)]

    def _phase(self, future: int) -> int:
        page = self.page_rows
        key = (self.position, self.top, page)
        if key != self._phase_key:
            ids = np.arange(self.top, min(self.top + page, self.row_count()))
            self._phases = future_phases(self.replay.index, self.position, ids)
            self._phase_key = key
        k = future - self.top
        if 0 <= k < len(self._phases):
            return int(self._phases[k])
        return int(future_phases(self.replay.index, self.position, np.array([future]))[0])

    def render_row(self, row: int, width: int, base: Style) -> list[Segment]:
        index = self.replay.index
        f, k = index.futures, index.commands
        cmd = int(f.cmd[row])
        if row == self.selected_future:
            base = base + self.component_style("futures-table--selected")
        phase = self._phase(row)
        dim = base + self.component_style("rowview--dim")
        events, times = self._events[row], self._times[row]
        stall = int(f.stall[row])

        def when(j: int, column: str) -> tuple[str, Style]:
            if events[j] < 0:
                return "", dim
            text = cycles(int(times[j]), _WIDTH[column])
            return text, (base if events[j] < self.position else dim)

        values: dict[str, tuple[str, Style]] = {
            "future": (str(row), base),
            "pe": (str(int(k.pe[cmd])) if cmd >= 0 else "", base),
            "op": (index.string(int(k.op[cmd])) if cmd >= 0 else "?", base),
            "address": (f"{int(k.addr[cmd]):#x}" if cmd >= 0 and k.addr[cmd] >= 0 else "", dim),
            "bytes": (str(int(k.nbytes[cmd])) if cmd >= 0 else "", base),
            "issued": when(0, "issued"),
            "granted": when(1, "granted"),
            "done": when(2, "done"),
            "waited": when(3, "waited"),
            "resolved": when(4, "resolved"),
            "stall": self._stall_cell(stall, events[3], events[4], base, dim),
            "phase": self._phase_cell(phase, base),
        }
        segments: list[Segment] = []
        for column in self.columns(width):
            text, style = values[column.title]
            text = text[: column.width]
            text = text.rjust(column.width) if column.right else text.ljust(column.width)
            segments.append(Segment(text + " ", style))
        return segments

    def _stall_cell(
        self, stall: int, begin: int, end: int, base: Style, dim: Style
    ) -> tuple[str, Style]:
        """Stalled cycles, dimmed until the wait is over; ∞ for a wait a deadlock never ends
        and ? for one the trace stops in the middle of."""
        if begin >= 0 and end < 0:
            text = "∞" if self.replay.status == "deadlock" else "?"
            return text, (base if begin < self.position else dim)
        if not stall:
            return "", dim
        if end >= self.position:
            return cycles(stall, _WIDTH["stall"]), dim
        return cycles(stall, _WIDTH["stall"]), base + self.component_style("futures-table--stall")

    def render_line(self, y: int) -> Strip:
        if self.row_count() or y == 0:
            return super().render_line(y)
        dim = self.base_style + self.component_style("rowview--dim")
        text = EMPTY[y - 1] if y - 1 < len(EMPTY) else ""
        return Strip([Segment(f" {text}", dim)]).adjust_cell_length(self.size.width, dim)

    def _phase_cell(self, phase: int, base: Style) -> tuple[str, Style]:
        if phase < 0:
            return "not issued", base + self.component_style("rowview--dim")
        name = PHASES[phase]
        if name == "resolved":
            return name, base + self.component_style("futures-table--resolved")
        return name, base + self.component_style("futures-table--pending")
