"""FuturesTable: every future's lifecycle in cycles and its phase at the cursor, drawn on demand."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.reactive import reactive
from textual.strip import Strip

from kbdebug.replay import PHASES, Replay
from kbdebug.replay.state import future_phases
from kbdebug.replay.tables import position_dtype
from kbdebug.replay.values import Values
from kbdebug.safe_text import escape
from kbdebug.ui.messages import FutureChosen
from kbdebug.ui.panes.rowview import RowView
from kbdebug.ui.panes.styles import pane_title
from kbdebug.ui.queries import cycles, kernel_def
from kbdebug.ui.value_text import number


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
    Column("op", 11, 3, right=False),
    Column("line", 5, 2),
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
#: In a trace that names its tensors (format 1.5), the address column shows the slice
#: (``K[128:192, :]``) and a digest column (``μ0.02324 [-2.885, 2.885]``) is added;
#: both give way before the lifecycle's times (a priority above those the default
#: layouts keep, so the 80x24 and 160x48 screens list what they did).
TENSOR_COLUMN = Column("tensor", 16, 5, right=False)
DIGEST_COLUMN = Column("digest", 26, 4, right=False)
_WIDTH = {c.title: c.width for c in (*COLUMNS, TENSOR_COLUMN, DIGEST_COLUMN)}

#: The orders ``o`` cycles through, and the column each sorts by.
SORTS = ("id", "stall", "issue")
_SORT_COLUMN = {"id": "future", "stall": "stall", "issue": "issued"}
#: The widest a line cell grows for a call in another file (``pipeline.py:41``).
_MAX_LINE_WIDTH = 16

#: The PE column's priority when the table lists every PE's futures (it tells them apart)
#: and when it lists one PE's (its title names the PE).
_PE_PRIORITY_ALL, _PE_PRIORITY_ONE = 1, 4

#: What the table says when the trace has no futures at all.
EMPTY = (
    "no futures in this trace: only tl.load,",
    "load_async, store, send and recv_async",
    "make them (a tl.composite's own",
    "transfers do not: see the events)",
)


class FuturesTable(RowView):
    """One row per future of the focused PE (or of every PE), by id, by stall (largest
    first) or by issue; a future's times show once the cursor has reached them."""

    BINDINGS = [
        Binding("o", "cycle_sort", "sort", tooltip="Sort by id, stall or issue (cycles)"),
        Binding("enter", "choose", "pick", tooltip="Pick the future: f/F walk its lifecycle"),
        Binding(
            "a", "toggle_all_pes", "all PEs", tooltip="Show every PE's futures, or the focused PE's"
        ),
    ]

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

    position = reactive(0, repaint=False)
    """Events applied: phases and dimming are relative to it."""

    selected_future = reactive(-1, repaint=False)
    """The future highlighted here and on the timeline."""

    sort = reactive("id")
    """The row order: ``id``, ``stall`` (largest first) or ``issue`` (earliest first)."""

    focused_pe = reactive(0)
    """The PE whose futures are listed unless ``all_pes``."""

    all_pes = reactive(False)
    """Whether every PE's futures are listed (else the focused PE's only)."""

    def __init__(self, replay: Replay, *, id: str | None = None, pane: int | None = None) -> None:
        super().__init__(id=id)
        self.replay = replay
        #: The number key that focuses this pane (shown in its title), if any.
        self.pane = pane
        index = replay.index
        f, k = index.futures, index.commands
        cmd = np.maximum(f.cmd, 0)
        known = f.cmd >= 0
        # Event indices in the index's position dtype (int32 below 2**31 events): at ten
        # million events, int64 tables here cost 30 MB more at the first screen.
        position = position_dtype(index.n_events)
        lifecycle = np.empty((len(f.cmd), 9), dtype=position)
        for j, column in enumerate(
            (
                k.issue[cmd] if len(k.issue) else cmd,
                k.grant[cmd] if len(k.grant) else cmd,
                k.complete[cmd] if len(k.complete) else cmd,
            )
        ):
            lifecycle[:, j] = np.where(known, column, -1)
        for j, column in enumerate(
            (f.wait_begin, f.wait_end, f.issue, f.request, f.grant, f.complete), start=3
        ):
            lifecycle[:, j] = column
        #: Per future: every event index its row compares with the position; the first
        #: five are those its row shows the times of: issue, grant, complete, wait begin
        #: and wait end.
        self._lifecycle = lifecycle
        self._events = lifecycle[:, :5]
        self._lines = _line_cells(replay)
        #: Row -> future, and future -> row (-1: not listed), in the current sort.
        self.order = np.arange(len(f.cmd), dtype=np.int64)
        self.rank = self.order.copy()
        #: Each future's PE (-1: unknown), for listing one PE's.
        self._pe = np.asarray(f.pe, dtype=np.int64)
        self._phase_key: tuple[int, int, int] | None = None
        self._phases = np.empty(0, dtype=np.int8)
        self._columns: tuple[Column, ...] = COLUMNS
        self._columns_width = -1
        line_width = max((len(t) for t in self._lines.values()), default=0)
        columns = [
            Column(c.title, min(max(c.width, line_width), _MAX_LINE_WIDTH), c.priority)
            if c.title == "line"
            else c
            for c in COLUMNS
        ]
        if index.n_pes == 1:
            columns = [c for c in columns if c.title != "pe"]
        #: The trace's tensors and digests (none before format 1.5: addresses, as before).
        self.values = Values.of(replay)
        if len(self.values.tensors):
            columns = [TENSOR_COLUMN if c.title == "address" else c for c in columns]
        if self.values.has_digests:
            columns.append(DIGEST_COLUMN)
        self._every_column = tuple(columns)
        self._all_columns = self._every_column

    @property
    def filtered(self) -> bool:
        """Whether only the focused PE's futures are listed (never on a one-PE trace)."""
        return not self.all_pes and self.replay.index.n_pes > 1

    def row_count(self) -> int:
        return len(self.order)

    # --- order ---------------------------------------------------------------------------

    def action_cycle_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # One PE: its futures are every PE's, there is nothing to toggle.
        if action == "toggle_all_pes" and self.replay.index.n_pes < 2:
            return False
        return True

    def action_toggle_all_pes(self) -> None:
        self.all_pes = not self.all_pes

    def validate_sort(self, sort: str) -> str:
        return sort if sort in SORTS else "id"

    def watch_sort(self) -> None:
        self._reorder()

    def watch_focused_pe(self) -> None:
        if self.filtered:
            self._reorder()

    def watch_all_pes(self) -> None:
        priority = _PE_PRIORITY_ONE if self.filtered else _PE_PRIORITY_ALL
        self._all_columns = tuple(
            Column(c.title, c.width, priority, c.right) if c.title == "pe" else c
            for c in self._every_column
        )
        self._columns_width = -1
        self._reorder()

    def _reorder(self) -> None:
        """List the futures shown (the focused PE's, or all) in the current sort."""
        sort = self.sort
        f = self.replay.index.futures
        n = len(f.cmd)
        if sort == "stall":
            # Largest stall first; a wait that never ends (deadlock) before any finite one.
            never = (f.wait_begin >= 0) & (f.wait_end < 0)
            key = np.where(never, np.iinfo(np.int64).max, f.stall.astype(np.int64))
            self.order = np.lexsort((np.arange(n), -key)).astype(np.int64)
        elif sort == "issue":
            issued = self._events[:, 0].astype(np.int64)  # the key below is past int32
            self.order = np.lexsort((np.arange(n), np.where(issued >= 0, issued, n + 1 << 40)))
        else:
            self.order = np.arange(n, dtype=np.int64)
        if self.filtered:
            self.order = self.order[self._pe[self.order] == self.focused_pe]
        self.rank = np.full(n, -1, dtype=np.int64)
        self.rank[self.order] = np.arange(len(self.order))
        self._phase_key = None
        self._retitle()
        if 0 <= self.selected_future < n and self.rank[self.selected_future] >= 0:
            self.cursor = int(self.rank[self.selected_future])
            self.show_row(self.cursor, center=True)
        else:
            self.cursor = 0
            self.top = 0
        self.refresh()

    def future_at(self, row: int) -> int:
        """The future shown on ``row`` in the current order."""
        return int(self.order[row])

    # --- reacting ------------------------------------------------------------------------

    def _retitle(self, focused: bool | None = None) -> None:
        focused = self.has_focus if focused is None else focused
        if self.pane is not None:
            by = "" if self.sort == "id" else f" by {self.sort}"
            which = ""
            if self.replay.index.n_pes > 1:
                which = f" of PE {self.focused_pe}" if self.filtered else " of every PE"
            self.border_title = pane_title(self.pane, f"futures{which}{by}", focused)

    def on_mount(self) -> None:
        self.watch_all_pes()  # the focused PE's futures, its column's priority, the title
        if self.values.has_digests:
            # Read from the trace file on a thread: the column says … until they are in.
            self.run_worker(self._read_digests, thread=True, exit_on_error=False)

    def _read_digests(self) -> None:
        self.values.digests  # noqa: B018 - reads and keeps them
        self.app.call_from_thread(self.refresh)

    def on_focus(self) -> None:
        self._retitle(focused=True)

    def on_blur(self) -> None:
        self._retitle(focused=False)

    def watch_position(self, old: int, new: int) -> None:
        # A row changes only when the cursor crosses one of its events: most moves
        # cross none of the rows on screen, and repainting them would cost a frame.
        rows = self.order[self.top : self.top + self.page_rows]
        events = self._lifecycle[rows]
        lo, hi = min(old, new), max(old, new)
        crossed = np.flatnonzero(((events >= lo) & (events < hi)).any(axis=1))
        self.refresh_rows(*(self.top + crossed).tolist())

    def watch_selected_future(self, old: int, future: int) -> None:
        if 0 <= old < len(self.rank) and self.rank[old] >= 0:
            self.refresh_rows(int(self.rank[old]))
        if 0 <= future < len(self.rank) and self.rank[future] >= 0:
            self.cursor = int(self.rank[future])
            self.show_row(self.cursor)
            self.refresh_rows(self.cursor)

    def moved(self, row: int) -> None:
        self.post_message(FutureChosen(self.future_at(row)))

    def chosen(self, row: int) -> None:
        self.post_message(FutureChosen(self.future_at(row)))

    def columns(self, width: int) -> tuple[Column, ...]:
        """The columns that fit in ``width``, dropping the least important first."""
        if width != self._columns_width:
            columns = list(self._all_columns)
            while len(columns) > 2 and sum(c.width + 1 for c in columns) > width:
                columns.remove(max(columns, key=lambda c: (c.priority, columns.index(c))))
            self._columns, self._columns_width = tuple(columns), width
        return self._columns

    def render_header(self, width: int, base: Style) -> list[Segment]:
        sorted_by = _SORT_COLUMN[self.sort] if self.sort != "id" else ""
        titles = []
        for c in self.columns(width):
            title = c.title + ("▼" if c.title == sorted_by else "")
            titles.append(title.rjust(c.width) if c.right else title.ljust(c.width))
        return [Segment(" ".join(titles), base)]

    def _phase(self, row: int) -> int:
        """The phase at the cursor of the future on ``row``."""
        page = self.page_rows
        key = (self.position, self.top, page)
        if key != self._phase_key:
            ids = self.order[self.top : min(self.top + page, self.row_count())]
            self._phases = future_phases(self.replay.index, self.position, ids)
            self._phase_key = key
        k = row - self.top
        if 0 <= k < len(self._phases):
            return int(self._phases[k])
        future = np.array([self.future_at(row)])
        return int(future_phases(self.replay.index, self.position, future)[0])

    def render_row(self, row: int, width: int, base: Style) -> list[Segment]:
        index = self.replay.index
        f, k = index.futures, index.commands
        phase = self._phase(row)
        row = self.future_at(row)
        cmd = int(f.cmd[row])
        if row == self.selected_future:
            base = base + self.component_style("futures-table--selected")
        dim = base + self.component_style("rowview--dim")
        events, time = self._events[row], index.columns.time
        stall = int(f.stall[row])

        def when(j: int, column: str) -> tuple[str, Style]:
            # A time the cursor has not reached yet is not shown: at cycle 0 no future
            # has been issued, so none has an issue time.
            if not 0 <= events[j] < self.position:
                return "", dim
            return cycles(int(time[events[j]]), _WIDTH[column]), base

        values: dict[str, tuple[str, Style]] = {
            "future": (str(row), base),
            "pe": (str(int(k.pe[cmd])) if cmd >= 0 else "", base),
            "op": (index.string(int(k.op[cmd])) if cmd >= 0 else "?", base),
            "line": (self._lines.get(int(k.loc[cmd]), "") if cmd >= 0 else "", dim),
            "address": (f"{int(k.addr[cmd]):#x}" if cmd >= 0 and k.addr[cmd] >= 0 else "", dim),
            "tensor": (self._tensor_cell(row, cmd), dim),
            "digest": (self._digest_cell(row), dim),
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

    def _tensor_cell(self, future: int, cmd: int) -> str:
        """The slice the future moved, else its address; "…" where it is cut."""
        if cmd < 0:
            return ""
        k = self.replay.index.commands
        if k.addr[cmd] < 0:
            return ""
        found = self.values.slice_of_future(future)
        text = escape(str(found), 200) if found is not None else f"{int(k.addr[cmd]):#x}"
        width = _WIDTH["tensor"]
        return text if len(text) <= width else text[: width - 1] + "…"

    def _digest_cell(self, future: int) -> str:
        """``μ0.02324 [-2.885, 2.885]`` (and the NaN count), "…" while being read."""
        if not self.values.digests_ready:
            return "…"
        digest = self.values.digest(future)
        if digest is None:
            return ""
        text = f"μ{number(digest.mean)} [{number(digest.min)}, {number(digest.max)}]"
        if digest.nan:
            text += f" {digest.nan} NaN"
        return text

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
        empty = EMPTY
        if len(self.replay.index.futures.cmd):
            empty = (f"no futures on PE {self.focused_pe}:", "a lists every PE's")
        text = empty[y - 1] if y - 1 < len(empty) else ""
        return Strip([Segment(f" {text}", dim)]).adjust_cell_length(self.size.width, dim)

    def _phase_cell(self, phase: int, base: Style) -> tuple[str, Style]:
        """The phase at the cursor; "not issued" for a future the cursor is before."""
        if phase < 0:
            return "not issued", base + self.component_style("rowview--dim")
        name = PHASES[phase]
        if name == "resolved":
            return name, base + self.component_style("futures-table--resolved")
        return name, base + self.component_style("futures-table--pending")


def _line_cells(replay: Replay) -> dict[int, str]:
    """Per source location id of an issue: the kernel's line that made it (for a call
    inside a helper, the line that called the helper): ``85``, with the file's base name
    (``pipeline.py:41``) when that line is not in the kernel's own file."""
    index = replay.index
    k = index.commands
    used = np.unique(k.loc[k.loc >= 0]) if len(k.loc) else np.empty(0, np.int64)
    kernel = kernel_def(replay, 0)
    main = kernel[0] if kernel is not None else ""
    cells = {}
    for i in used.tolist():
        loc = index.loc(i)
        if loc is None:
            continue
        loc = loc.caller or loc
        base = escape(loc.file.rsplit("/", 1)[-1], 64)
        cells[i] = str(loc.line) if loc.file == main else f"{base}:{loc.line}"
    return cells
