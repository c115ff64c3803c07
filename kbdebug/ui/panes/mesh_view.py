"""MeshView: every PE of the launch on one screen, one row each: its stall over the launch
as a heat strip, its end and efficiency; sorted by PE, end, stall or efficiency."""

from __future__ import annotations

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.reactive import reactive

from kbdebug.analysis.model import PEBound
from kbdebug.replay import Replay
from kbdebug.ui.messages import PeChosen
from kbdebug.ui.panes.mesh_data import SORTS, MeshData
from kbdebug.ui.panes.rowview import RowView
from kbdebug.ui.queries import cycles

#: A strip cell by the stall share of its cycles: the kernel not running, running
#: without a stall, then eighths of stall (any stall shows at least one).
NOT_RUNNING, RUNNING = " ", "─"
STALL_EIGHTHS = "▁▂▃▄▅▆▇█"
#: From this many eighths of stall a cell is drawn hot.
HOT_EIGHTHS = 4
#: The column each sort marks in the header.
_SORT_COLUMN = {"pe": "PE", "end": "end", "stall": "stall", "efficiency": "eff"}
#: Characters of a row's figures: end (7), efficiency (4) and stall share (6), spaced.
FIGURES_WIDTH = 19
#: Columns of a grid row's label (``r12``) before its PEs.
GRID_LABEL = 5
#: What marks the focused PE's row.
FOCUSED_PE = "▸"
#: The narrowest strip drawn; below it the row shows its figures only.
MIN_STRIP = 8


def strip_codes(shares: np.ndarray) -> np.ndarray:
    """A cell code per stall share: -1 not running, 0 running, 1..8 eighths of stall."""
    codes = np.rint(8 * np.nan_to_num(shares, nan=0.0).clip(0.0, 1.0)).astype(np.int8)
    codes[(codes == 0) & (np.nan_to_num(shares, nan=0.0) > 0)] = 1
    codes[np.isnan(shares)] = -1
    return codes


def _efficiency_text(efficiency: float | None, known: bool) -> str:
    """``97%``; ``…`` while the analysis computes it; ``-`` where it claims none (a run
    that did not complete)."""
    if not known:
        return "…"
    return "-" if efficiency is None else f"{efficiency:.0%}"


def share_text(share: float) -> str:
    """A share as a percentage, ``<1%`` for a little that would round to nothing."""
    return "<1%" if 0 < share < 0.005 else f"{share:.0%}"


class MeshView(RowView):
    """One row per PE: number (and place in a 2-D mesh), end, efficiency, stall share and
    a heat strip of its stall over the launch; Enter focuses the PE in the other panes."""

    BINDINGS = [
        Binding("o", "cycle_sort", "sort", tooltip="Sort by PE, end, stall or efficiency"),
        Binding("enter", "choose", "focus PE", tooltip="Focus the PE: the other panes follow"),
        Binding(
            "v", "toggle_grid", "grid", tooltip="A 2-D mesh as its rows and columns, or a list"
        ),
        Binding("left", "column(-1)", "Left", show=False),
        Binding("right", "column(1)", "Right", show=False),
    ]

    COMPONENT_CLASSES = {
        "mesh-view--running",
        "mesh-view--warm",
        "mesh-view--hot",
        "mesh-view--focused",
    }

    DEFAULT_CSS = """
    MeshView > .mesh-view--running { color: $success-darken-1; }
    MeshView > .mesh-view--warm { color: $warning; }
    MeshView > .mesh-view--hot { color: $error-lighten-1; }
    MeshView > .mesh-view--focused { text-style: bold; }
    """

    HAS_HEADER = True

    sort = reactive("pe")
    """The row order: ``pe``, ``end`` (latest first), ``stall`` (most first) or
    ``efficiency`` (least first)."""

    focused_pe = reactive(0, repaint=False)
    """The PE the other panes show (marked on its row)."""

    grid = reactive(False)
    """Whether a 2-D mesh is drawn as its rows and columns (a row of strips per mesh row)."""

    column = reactive(0)
    """In the grid, the mesh column of the highlighted PE (``cursor`` is its mesh row)."""

    def __init__(self, replay: Replay, *, id: str | None = None) -> None:
        super().__init__(id=id)
        #: The figures of each trace shown so far (compare flips between two), by index.
        self._built: dict[int, MeshData] = {}
        self._use(self._data_of(replay))

    def _data_of(self, replay: Replay) -> MeshData:
        data = self._built.get(id(replay.index))
        if data is None or data.index is not replay.index:
            data = self._built[id(replay.index)] = MeshData(replay)
        return data

    def _use(self, data: MeshData) -> None:
        self.data = data
        if self.grid and data.shape[0] < 2:
            self.grid = False  # another run's PEs in a row: the list is their mesh
        # By number until ``_reorder`` applies the sort (the sort's watcher, at mount).
        self._order = data.order("pe")
        self._rank = np.argsort(self._order)
        label = max(len(str(data.n_pes - 1)), 3)  # "PE▼" heads it
        place = max((len(data.position(p)) for p in range(data.n_pes)), default=0)
        #: Characters of the PE column: its number, and its place in a 2-D mesh.
        self._label_width = label + (place + 1 if place else 0)

    def show(self, replay: Replay, bounds: list[PEBound] | None) -> None:
        """Show ``replay``'s PEs (another run's, or a reloaded trace), with ``bounds``."""
        if replay.index is not self.data.index:
            self._use(self._data_of(replay))
            self.cursor = 0
        self.data.use_bounds(bounds)
        self._reorder()

    def use_bounds(self, bounds: list[PEBound] | None) -> None:
        """The analysis is in: ends and efficiencies from its bounds."""
        self.data.use_bounds(bounds)
        self._reorder()

    def row_count(self) -> int:
        if self.grid:
            rows, cols = self.data.shape
            return min(rows, -(-self.data.n_pes // cols))
        return self.data.n_pes

    def pe_at(self, row: int) -> int:
        """The PE on ``row`` in the current order (in the grid: at the highlighted column)."""
        if self.grid:
            return min(row * self.data.shape[1] + self.column, self.data.n_pes - 1)
        return int(self._order[row])

    def row_of(self, pe: int) -> int:
        """The row PE ``pe`` is on in the current order (in the grid: its mesh row)."""
        if self.grid:
            return pe // self.data.shape[1]
        return int(self._rank[pe])

    # --- the grid ------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "toggle_grid" and self.data.shape[0] < 2:
            return False  # a row of PEs: the list is the mesh
        if action == "cycle_sort" and self.grid:
            return None  # the grid is the mesh's own order
        return True

    def action_toggle_grid(self) -> None:
        pe = self.pe_at(self.cursor) if self.row_count() else 0
        self.grid = not self.grid
        if self.grid:
            self.column = pe % self.data.shape[1]
        self.cursor = self.row_of(pe)
        self.show_row(self.cursor)
        self.refresh_bindings()

    def action_column(self, delta: int) -> None:
        if self.grid:
            self.column = max(0, min(self.column + delta, self.data.shape[1] - 1))
            self.refresh_rows(self.cursor)

    def validate_column(self, column: int) -> int:
        return max(0, min(int(column), self.data.shape[1] - 1))

    # --- order -------------------------------------------------------------------------

    def action_cycle_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]

    def validate_sort(self, sort: str) -> str:
        return sort if sort in SORTS else "pe"

    def watch_sort(self) -> None:
        self._reorder(first=True)

    def _reorder(self, first: bool = False) -> None:
        """Rows in the current sort; the cursor on its first row (a new sort: what the
        sort puts first is what was asked for) or kept on its PE."""
        pe = self.pe_at(self.cursor) if self.row_count() else 0
        self._order = self.data.order(self.sort)
        self._rank = np.argsort(self._order)
        self.cursor = 0 if first else self.row_of(pe)
        self.show_row(self.cursor)
        if first:
            self.top = 0
        self.refresh()

    def watch_focused_pe(self, old: int, new: int) -> None:
        for pe in (old, new):
            if 0 <= pe < self.data.n_pes:
                self.refresh_rows(self.row_of(pe))

    def chosen(self, row: int) -> None:
        self.post_message(PeChosen(self.pe_at(row)))

    # --- drawing -----------------------------------------------------------------------

    def _strip_width(self, width: int) -> int:
        """Columns left for the strip after the mark, the PE and its figures."""
        return width - (1 + self._label_width + 1 + FIGURES_WIDTH + 1)

    def _cell_width(self, width: int) -> int:
        """Columns of one PE in the grid (its mesh row's label first)."""
        return max((width - GRID_LABEL) // self.data.shape[1], 1)

    def render_header(self, width: int, base: Style) -> list[Segment]:
        if self.grid:
            cell = self._cell_width(width)
            cols = self.data.shape[1]
            text = " " * GRID_LABEL + "".join(f" c{c}".ljust(cell)[:cell] for c in range(cols))
            return [Segment(text, base)]
        marked = _SORT_COLUMN[self.sort]

        def title(name: str, size: int) -> str:
            return (name + ("▼" if name == marked else "")).rjust(size)

        text = (
            f" {title('PE', self._label_width)} {title('end', 7)} {title('eff', 4)} "
            f"{title('stall', 6)} "
        )
        strip = self._strip_width(width)
        if strip >= MIN_STRIP:
            end = f"{self.data.end_time:,}"
            axis = "stall over the launch"
            inner = strip - len(end) - 2
            middle = f" {axis} " if inner >= len(axis) + 2 else ""
            text += "0" + middle.center(max(inner, 0), "╌") + " " + end
        return [Segment(text, base)]

    def render_row(self, row: int, width: int, base: Style) -> list[Segment]:
        if self.grid:
            return self._grid_row(row, width, base)
        data = self.data
        pe = self.pe_at(row)
        focused = pe == self.focused_pe
        if focused:
            base = base + self.component_style("mesh-view--focused")
        figures = data.figures(pe)
        place = data.position(pe)
        label = f"{pe} {place}" if place else str(pe)
        if data.ran[pe]:
            eff = _efficiency_text(figures.efficiency, data.bounds_in)
            end = f"{figures.end:,}" if figures.end < 10_000_000 else cycles(figures.end, 7)
            text = f"{end:>7} {eff:>4} {share_text(figures.stall_share):>6} "
        else:
            text = f"{'no kernel':>{FIGURES_WIDTH}} "
        mark = FOCUSED_PE if focused else " "
        segments = [Segment(f"{mark}{label:>{self._label_width}} {text}", base)]
        strip = self._strip_width(width)
        if strip >= MIN_STRIP:
            segments += self._strip(pe, strip, base)
        return segments

    def _grid_row(self, row: int, width: int, base: Style) -> list[Segment]:
        """Mesh row ``row``: each PE's number and its strip (and efficiency, given room)."""
        data = self.data
        rows_, cols = data.shape
        cell = self._cell_width(width)
        digits = len(str(data.n_pes - 1))
        eff_room = 5 if cell >= 24 else 0
        strip = cell - (1 + digits + 1) - eff_room - 1
        segments = [Segment(f" r{row:<{GRID_LABEL - 2}}", base)]
        for c in range(cols):
            pe = row * cols + c
            if pe >= data.n_pes:
                break
            style = base
            if pe == self.focused_pe:
                style = style + self.component_style("mesh-view--focused")
            mark = FOCUSED_PE if pe == self.focused_pe else " "
            number = Segment(f"{pe:>{digits}}", style)
            if row == self.cursor and c == self.column and self.has_focus:
                number = Segment(number.text, style + Style(reverse=True))
            segments += [Segment(mark, style), number, Segment(" ", style)]
            if not data.ran[pe]:
                segments.append(Segment("-".ljust(max(strip, 1) + eff_room), style))
            else:
                segments += self._strip(pe, max(strip, 1), style)
                if eff_room:
                    eff = _efficiency_text(data.figures(pe).efficiency, data.bounds_in)
                    segments.append(Segment(f" {eff:>4}", style))
            segments.append(Segment(" ", style))
        return segments

    def _strip(self, pe: int, width: int, base: Style) -> list[Segment]:
        """PE ``pe``'s heat strip: runs of equal cells, one segment each."""
        codes = strip_codes(self.data.shares(width)[pe])
        segments = []
        start = 0
        for end in [*(np.flatnonzero(np.diff(codes)) + 1).tolist(), len(codes)]:
            code = int(codes[start])
            if code < 0:
                text, style = NOT_RUNNING * (end - start), base
            elif code == 0:
                text = RUNNING * (end - start)
                style = base + self.component_style("mesh-view--running")
            else:
                text = STALL_EIGHTHS[code - 1] * (end - start)
                hot = "mesh-view--hot" if code >= HOT_EIGHTHS else "mesh-view--warm"
                style = base + self.component_style(hot)
            segments.append(Segment(text, style))
            start = end
        return segments

    def describe(self, pe: int) -> str:
        """PE ``pe``'s figures in words, for the status line."""
        data = self.data
        if not data.ran[pe]:
            return "it ran no kernel"
        figures = data.figures(pe)
        place = data.position(pe)
        text = f"ends at cycle {figures.end:,}, stalled {share_text(figures.stall_share)}"
        if figures.efficiency is not None:
            text += f", {figures.efficiency:.0%} efficient"
        return f"{text} (mesh {place})" if place else text

    def summary(self) -> str:
        """Which PE ends last, which stalls most and which is least efficient, in words
        (or that every PE that ran is alike)."""
        data = self.data
        ran = np.flatnonzero(data.ran)
        if not len(ran):
            return "no PE ran a kernel"
        shares = data.stall_shares()[ran]
        eff = data.efficiency[ran]
        figures = [
            (data.end[ran], f"{int(data.end[ran].max()):,}", "{pe} ends last ({v})", "end {v}"),
            (shares, share_text(float(shares.max())), "{pe} stalls most ({v})", "stall {v}"),
        ]
        if not np.isnan(eff).any():
            least = f"{float(eff.min()):.0%}"
            figures.append((-eff, least, "{pe} is least efficient ({v})", "{v} efficient"))
        alike = [(key == key.max()).all() for key, *_ in figures]
        if len(ran) > 1 and all(alike):
            return f"all {len(ran)} PEs alike: " + ", ".join(
                every.format(v=value) for _, value, _, every in figures
            )
        parts = []
        for (key, value, one, every), same in zip(figures, alike, strict=True):
            if same and len(ran) > 1:
                parts.append(f"all PEs {every.format(v=value)}")
                continue
            top = ran[key == key.max()]
            pe = f"PE {int(top[0])}" + (f" (+{len(top) - 1})" if len(top) > 1 else "")
            parts.append(one.format(pe=pe, v=value))
        return ", ".join(parts)
