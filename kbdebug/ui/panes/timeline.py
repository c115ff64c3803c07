"""Timeline: lanes per PE (kernel, channels, scratch) over cycles, with the cursor and a future.

Drawn with the Line API: each refresh asks every visible lane what its columns
show (a few ``searchsorted`` calls per lane) and run-length encodes the answer
into a handful of segments, so a frame costs the same on any trace.
"""

from __future__ import annotations

import math

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from kbdebug.replay import Replay
from kbdebug.safe_text import escape
from kbdebug.ui.messages import CycleClicked
from kbdebug.ui.panes import lanes as L
from kbdebug.ui.panes.styles import component_style, pane_title
from kbdebug.ui.queries import cycles

_GLYPHS = {
    L.IDLE: " ",
    L.LIGHT: "░",
    L.MEDIUM: "▒",
    L.HEAVY: "▓",
    L.FULL: "█",
    # The kernel row draws lines, not blocks: a stalled kernel must not look like a
    # channel that is busy (good) in the rows below it.
    L.NOT_STARTED: " ",
    L.RUNNING: "━",
    L.STALLING: "╍",
    L.STALLED: "╱",
    L.ENDED: " ",
    L.FAILED: "╳",
    **{L.LEVEL + e: " ▁▂▃▄▅▆▇█"[e] for e in range(9)},
}
#: The legend under the lanes, longest first: the first that fits is shown.
LEGENDS = (
    "kernel: ━ running  ╍ partly stalled  ╱ stalled in tl.wait   channels: ▁▄█ busy share of "
    "the column   scratch: ▁▄█ of capacity   %: busy in view",
    "kernel ━ running ╍ partly stalled ╱ stalled   channels ▁▄█ busy share   "
    "scratch ▁▄█ of capacity   % busy in view",
    "━ running ╱ stalled  ▁▄█ busy share  % busy in view",
)
#: Screen rows from which the legend gets a line of its own.
LEGEND_MIN_SCREEN_ROWS = 30
#: Foreground class of each cell: lane kind for channels and scratch, state for the kernel.
_KERNEL_FG = {
    L.RUNNING: "running",
    L.STALLING: "stalled",
    L.STALLED: "stalled",
    L.FAILED: "failed",
}
_FG = ("axis", "running", "stalled", "failed", "dma_read", "dma_write", "gemm", "math", "ipcq")
_FG += ("scratch", "future", "label", "label-focused", "legend")
_BG = ("none", "span", "cursor")


class Timeline(Widget, can_focus=True):
    """Channel occupancy and kernel state per PE over time, with the cursor and a future's span."""

    BINDINGS = [
        Binding("left", "pan(-1)", "pan", key_display="←→", tooltip="Pan the timeline"),
        Binding("right", "pan(1)", "Pan right", show=False),
        Binding("plus", "app.zoom(1)", "zoom", key_display="+-", tooltip="Zoom in and out"),
        Binding("Z", "app.zoom_all", "whole", tooltip="Zoom out to the whole trace"),
        Binding("z", "app.zoom_future", "future", tooltip="Zoom to the selected future"),
        Binding("up", "scroll_lanes(-1)", "Lanes up", show=False),
        Binding("down", "scroll_lanes(1)", "Lanes down", show=False),
    ]

    COMPONENT_CLASSES = {f"timeline--{name}" for name in (*_FG, *_BG[1:])}

    DEFAULT_CSS = """
    Timeline {
        height: auto;
        max-height: 45%;
    }
    Timeline > .timeline--axis { color: $text-muted; }
    Timeline > .timeline--label { color: $text-muted; }
    Timeline > .timeline--label-focused { color: $text; text-style: bold; }
    Timeline > .timeline--legend { color: $text-muted; }
    Timeline > .timeline--running { color: $success; }
    Timeline > .timeline--stalled { color: $error; }
    Timeline > .timeline--failed { color: $error; text-style: bold; }
    Timeline > .timeline--dma_read { color: $primary-lighten-2; }
    Timeline > .timeline--dma_write { color: $secondary-lighten-1; }
    Timeline > .timeline--gemm { color: $warning; }
    Timeline > .timeline--math { color: $warning-darken-1; }
    Timeline > .timeline--ipcq { color: $accent; }
    Timeline > .timeline--scratch { color: $text-muted; }
    Timeline > .timeline--future { color: $accent-lighten-2; text-style: bold; }
    Timeline > .timeline--span { background: $accent 25%; }
    Timeline > .timeline--cursor { background: $foreground 30%; }
    """

    position = reactive(0)
    """Events applied; the cursor is at the current event's cycle."""

    focused_pe = reactive(0)
    """The PE whose lanes are kept on screen and labelled in bold."""

    selected_future = reactive(-1)
    """The future whose span (issue to resolution) is highlighted."""

    view_start = reactive(0.0)
    """The cycle at the left edge of the plot."""

    view_span = reactive(1.0)
    """Cycles across the plot."""

    lane_top = reactive(0)
    """The first lane on screen, when they do not all fit."""

    def __init__(
        self,
        replay: Replay,
        data: L.TimelineData,
        *,
        id: str | None = None,
        legend: bool = True,
        pane: int | None = None,
    ) -> None:
        super().__init__(id=id)
        self.replay = replay
        self.data = data
        #: The number key that focuses this pane (shown in its title), if any.
        self.pane = pane
        #: Whether a legend line is shown under the lanes when the screen is tall enough.
        self.legend = legend
        self.name_width = max((len(lane.label) for lane in data.lanes), default=6)
        #: Room for a lane's level after its name: ``100%``, or ``1.5M/16M`` for scratch.
        self.level_width = max(
            (
                len("1.5M/") + len(L.size_text(lane.capacity))
                for lane in data.lanes
                if isinstance(lane, L.ScratchLane)
            ),
            default=4,
        )
        self.label_width = self.name_width + 1 + self.level_width + 1
        self.view_span = float(max(data.end_time, 1) + 1)
        self._cells_key: tuple | None = None
        self._cells: dict[int, np.ndarray] = {}
        self._strips_key: tuple | None = None
        self._strips: list[Strip] = []
        self._styles: dict[tuple[int, int], Style] = {}

    # --- geometry ------------------------------------------------------------------------

    @property
    def plot_width(self) -> int:
        return max(self.size.width - self.label_width, 1)

    @property
    def legend_shown(self) -> bool:
        """Whether the last line is the legend: every lane fits above it."""
        return self.legend and self.size.height >= 2 + len(self.data.lanes)

    @property
    def lane_rows(self) -> int:
        """Lanes that fit under the axis (and above the legend)."""
        return max(self.size.height - 1 - self.legend_shown, 0)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        legend = self.legend and self.app.size.height >= LEGEND_MIN_SCREEN_ROWS
        return 1 + len(self.data.lanes) + legend

    def column_of(self, cycle: float) -> int:
        """The plot column showing ``cycle`` (may be off the plot)."""
        return math.floor((cycle - self.view_start) * self.plot_width / self.view_span)

    def cycle_at(self, column: int) -> int:
        """The cycle in the middle of plot column ``column``."""
        return int(self.view_start + (column + 0.5) * self.view_span / self.plot_width)

    # --- moving the view -----------------------------------------------------------------

    @property
    def axis_end(self) -> int:
        """The last cycle the axis covers: this trace's end."""
        return self.data.end_time

    def validate_view_span(self, span: float) -> float:
        full = float(max(self.data.end_time, 1) + 1)
        return min(max(float(span), float(min(self.plot_width, full)), 1.0), full)

    def validate_view_start(self, start: float) -> float:
        full = float(max(self.data.end_time, 1) + 1)
        return max(0.0, min(float(start), full - self.view_span))

    def validate_lane_top(self, top: int) -> int:
        return max(0, min(int(top), len(self.data.lanes) - self.lane_rows))

    def zoom(self, factor: float) -> None:
        """Zoom by ``factor`` (>1 in) keeping the cursor's cycle where it is on screen."""
        anchor = float(self.replay.time)
        if not self.view_start <= anchor < self.view_start + self.view_span:
            anchor = self.view_start + self.view_span / 2
        left = (anchor - self.view_start) / self.view_span
        self.view_span = self.view_span / factor
        self.view_start = anchor - left * self.view_span

    def fit(self, start: float, end: float) -> None:
        """Show cycles ``start`` .. ``end`` in the middle third of the plot."""
        self.view_span = 3.0 * max(end - start, 1.0)
        self.view_start = start - (self.view_span - (end - start)) / 2

    def show_all(self) -> None:
        """Zoom out to the whole trace."""
        self.view_span = float(max(self.data.end_time, 1) + 1)
        self.view_start = 0.0

    def pan(self, fraction: float) -> None:
        """Move the view by ``fraction`` of its width."""
        self.view_start = self.view_start + fraction * self.view_span

    def action_pan(self, direction: int) -> None:
        self.pan(0.25 * direction)

    def action_scroll_lanes(self, delta: int) -> None:
        self.lane_top += delta

    def follow(self) -> None:
        """Bring the cursor back on screen (centred) if it left the view."""
        t = float(self.replay.time)
        if not self.view_start <= t < self.view_start + self.view_span:
            self.view_start = t - self.view_span / 2

    def watch_position(self) -> None:
        self.follow()
        self.refresh()

    def _retitle(self, focused: bool | None = None) -> None:
        focused = self.has_focus if focused is None else focused
        if self.pane is not None:
            self.border_title = pane_title(self.pane, "timeline", focused)

    def on_mount(self) -> None:
        self._retitle()

    def on_focus(self) -> None:
        self._retitle(focused=True)

    def on_blur(self) -> None:
        self._retitle(focused=False)

    def watch_focused_pe(self, pe: int) -> None:
        rows = self.data.lanes_of(pe)
        if rows and not (
            self.lane_top <= rows[0] and rows[-1] < self.lane_top + max(self.lane_rows, 1)
        ):
            self.lane_top = rows[0]
        self.refresh()

    def on_resize(self) -> None:
        self.view_span = self.view_span
        self.view_start = self.view_start
        self.lane_top = self.lane_top

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()
        self._strips_key = None

    # --- mouse ---------------------------------------------------------------------------

    def on_click(self, event: events.Click) -> None:
        column = event.x - self.label_width
        if column >= 0:
            self.post_message(CycleClicked(max(self.cycle_at(column), 0)))

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        if len(self.data.lanes) > self.lane_rows:
            event.stop()
            self.lane_top += 1

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if len(self.data.lanes) > self.lane_rows:
            event.stop()
            self.lane_top -= 1

    # --- drawing -------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        key = (
            self.size,
            self.view_start,
            self.view_span,
            self.position,
            self.selected_future,
            self.focused_pe,
            self.lane_top,
        )
        if key != self._strips_key:
            self._strips = self._render_all()
            self._strips_key = key
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self._base())

    def _style(self, fg: int, bg: int) -> Style:
        style = self._styles.get((fg, bg))
        if style is None:
            style = self._base() + component_style(self, f"timeline--{_FG[fg]}")
            if bg:
                style += component_style(self, f"timeline--{_BG[bg]}")
            self._styles[(fg, bg)] = style
        return style

    def _base(self) -> Style:
        style = self._styles.get((-1, -1))
        if style is None:
            style = self._styles[(-1, -1)] = self.rich_style
        return style

    def _lane_cells(self, edges: np.ndarray) -> dict[int, np.ndarray]:
        key = (float(edges[0]), float(edges[-1]), len(edges))
        if key != self._cells_key:
            self._cells, self._cells_key = {}, key
        return self._cells

    def _render_all(self) -> list[Strip]:
        width, plot = self.size.width, self.plot_width
        edges = self.view_start + np.arange(plot + 1) * (self.view_span / plot)
        cells = self._lane_cells(edges)
        bg = np.zeros(plot, dtype=np.int16)
        span = L.future_span(self.replay, self.selected_future)
        if span is not None:
            lo, hi = self._columns(span[1], span[2])
            if lo <= hi:
                bg[lo : hi + 1] = 1
        cursor = self.column_of(self.replay.time) if self.position > 0 else -1
        lanes = self.data.lanes
        strips = [self._axis(bg if span is not None else None, cursor, width)]
        view_end = min(self.view_start + self.view_span, float(self.data.end_time))
        for row in range(self.lane_top, min(len(lanes), self.lane_top + self.lane_rows)):
            lane = lanes[row]
            codes = cells.get(row)
            if codes is None:
                codes = cells[row] = lane.cells(edges)
            fg = self._foreground(lane, codes)
            lane_bg = bg if span is not None and lane.pe == span[0] else np.zeros_like(bg)
            if span is not None and lane.channel >= 0 and lane.channel == span[5]:
                lo, hi = self._columns(span[3], span[4])
                if lo <= hi and span[3] >= 0:
                    codes = codes.copy()
                    fg = fg.copy()
                    codes[lo : hi + 1] = L.FULL
                    fg[lo : hi + 1] = _FG.index("future")
            if 0 <= cursor < plot:
                lane_bg = lane_bg.copy()
                lane_bg[cursor] = 2
            label_fg = _FG.index("label-focused" if lane.pe == self.focused_pe else "label")
            name = escape(lane.label, self.name_width).ljust(self.name_width)
            level = lane.level(self.view_start, view_end)[: self.level_width]
            label = f"{name} {level:>{self.level_width}} "
            segments = [Segment(label, self._style(label_fg, 0))]
            segments += self._runs(codes, fg, lane_bg)
            strips.append(Strip(segments, width).adjust_cell_length(width, self._base()))
        if self.legend_shown:
            strips.append(self._legend(width))
        return strips

    def _legend(self, width: int) -> Strip:
        text = next((t for t in LEGENDS if len(t) <= width - 1), LEGENDS[-1])
        style = self._style(_FG.index("legend"), 0)
        return Strip([Segment(" " + text, style)]).adjust_cell_length(width, self._base())

    def _columns(self, start: float, end: float) -> tuple[int, int]:
        lo = max(self.column_of(start), 0)
        hi = min(self.column_of(end), self.plot_width - 1)
        return lo, hi

    def _foreground(self, lane: L.Lane, codes: np.ndarray) -> np.ndarray:
        if lane.kind == "kernel":
            fg = np.full(len(codes), _FG.index("running"), dtype=np.int16)
            for code, name in _KERNEL_FG.items():
                fg[codes == code] = _FG.index(name)
            return fg
        name = lane.kind if lane.kind in _FG else "axis"
        return np.full(len(codes), _FG.index(name), dtype=np.int16)

    def _runs(self, codes: np.ndarray, fg: np.ndarray, bg: np.ndarray) -> list[Segment]:
        key = codes.astype(np.int32) * 4096 + fg.astype(np.int32) * 8 + bg
        cuts = np.flatnonzero(np.diff(key)) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [len(key)]))
        return [
            Segment(_GLYPHS[int(codes[a])] * int(b - a), self._style(int(fg[a]), int(bg[a])))
            for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
        ]

    def _axis(self, span_bg: np.ndarray | None, cursor: int, width: int) -> Strip:
        plot = self.plot_width
        chars = [" "] * plot
        step = _nice_step(self.view_span * 12 / plot)
        first = math.ceil(self.view_start / step) * step
        tick = first
        while tick < self.view_start + self.view_span:
            col = self.column_of(tick)
            label = "╵" + tick_label(tick, step)
            # A label the cursor would land inside is left out (``╵50▼`` reads as 50, not
            # 500); on its tick mark the cursor replaces only the mark.
            hidden = col < cursor < col + len(label)
            fits = 0 <= col and col + len(label) <= plot and not hidden
            if fits and all(c == " " for c in chars[col:]):
                chars[col : col + len(label)] = label
            tick += step
        if 0 <= cursor < plot:
            chars[cursor] = "▼"
        axis = _FG.index("axis")
        bg = span_bg.copy() if span_bg is not None else np.zeros(plot, dtype=np.int16)
        if 0 <= cursor < plot:
            bg[cursor] = 2
        segments = [Segment("cycles".ljust(self.label_width), self._style(axis, 0))]
        cuts = [0, *(np.flatnonzero(np.diff(bg)) + 1).tolist(), plot]
        for a, b in zip(cuts, cuts[1:], strict=False):
            segments.append(Segment("".join(chars[a:b]), self._style(axis, int(bg[a]))))
        return Strip(segments).adjust_cell_length(width, self._base())


def tick_label(tick: float, step: float) -> str:
    """``tick`` as short as ``cycles`` writes it, with the decimals that tell it from the
    next tick ``step`` cycles on (6.4998M, 6.4999M rather than 6.5M twice)."""
    text = cycles(int(tick))
    if text == str(int(tick)):
        return text
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(tick) >= scale * 0.9995:
            digits = max(0, math.ceil(-math.log10(step / scale) - 1e-9))
            short = f"{tick / scale:.{digits}f}{suffix}"
            return short if len(short) < len(str(int(tick))) else str(int(tick))
    return text


def _nice_step(raw: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten at least ``raw`` (and at least 1)."""
    if raw <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * power >= raw:
            return float(m * power)
    return float(10 * power)
