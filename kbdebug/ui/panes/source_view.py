"""SourceView: the embedded kernel source, the focused PE's line, breakpoints, stall cycles."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.syntax import Syntax
from rich.text import Text
from textual.binding import Binding
from textual.reactive import reactive
from textual.strip import Strip

from kbdebug.analysis.summary import stall_by_pe_line
from kbdebug.replay import Replay, SourceLine
from kbdebug.safe_text import escape
from kbdebug.ui.messages import LineChosen
from kbdebug.ui.panes.rowview import RowView
from kbdebug.ui.panes.styles import pane_title
from kbdebug.ui.queries import cycles, kernel_def

#: Columns ←/→ scroll the code by.
SCROLL_COLUMNS = 8


class SourceView(RowView):
    """One source file of the trace; the focused PE's current line marked with ▶.

    Before the focused PE's first tl call the cursor is on its kernel's ``def``. Long
    lines scroll sideways (←/→) under a gutter that stays put."""

    BINDINGS = [
        Binding("left", "scroll_code(-1)", "scroll", key_display="←→", tooltip="Scroll the code"),
        Binding("right", "scroll_code(1)", "scroll right", show=False),
        Binding("enter", "choose", "break", tooltip="Toggle a breakpoint on the line"),
        Binding(
            "W", "app.widen_source", "widen", tooltip="The whole width for the source (again: back)"
        ),
    ]

    COMPONENT_CLASSES = {
        "source-view--current",
        "source-view--breakpoint",
        "source-view--stall",
        "source-view--gutter",
    }

    DEFAULT_CSS = """
    SourceView > .source-view--current {
        background: $warning 25%;
    }
    SourceView > .source-view--breakpoint {
        color: $error;
        text-style: bold;
    }
    SourceView > .source-view--stall {
        color: $error-lighten-1;
    }
    SourceView > .source-view--gutter {
        color: $text-muted;
    }
    """

    position = reactive(0, repaint=False)
    """Events applied: the focused PE's current line is its latest tl call."""

    focused_pe = reactive(0)
    """The PE whose line is marked and whose stall cycles fill the gutter."""

    breakpoint_generation = reactive(0)
    """Bumped by the app whenever breakpoints change, to redraw the marks."""

    kernel_view_at = reactive(("", -1, -1), repaint=False)
    """("", PE, position) where the PE's current tl call is seen from its kernel (a
    helper call stepped over): its line is the kernel's line that called the helper."""

    file = reactive("")
    """The source file shown (a key of the trace's embedded sources)."""

    code_left = reactive(0)
    """The first column of the code shown (scrolled sideways by ←/→)."""

    def __init__(self, replay: Replay, *, id: str | None = None, pane: int | None = None) -> None:
        super().__init__(id=id)
        self.replay = replay
        #: The number key that focuses this pane (shown in its title), if any.
        self.pane = pane
        self._stalls = stall_by_pe_line(replay.index)
        self._lines: dict[str, list[Text]] = {}
        self._segments: dict[tuple[str, int], list[Segment]] = {}
        self.set_reactive(SourceView.file, next(iter(replay.index.sources), ""))
        #: The focused PE's line when the view last followed it.
        self._shown_line: tuple[str, int] | None = None

    # --- what is shown -------------------------------------------------------------------

    @property
    def current_line(self) -> tuple[str, int] | None:
        """(file, line) of the focused PE's latest tl call (the kernel's calling line where
        it is seen from the kernel), None before its first."""
        pes = self.replay.state.pes
        if not 0 <= self.focused_pe < len(pes):
            return None
        loc = self.replay.index.loc(pes[self.focused_pe].loc)
        if loc is not None and loc.caller is not None:
            if self.kernel_view_at == ("", self.focused_pe, self.position):
                loc = loc.caller
        return None if loc is None else (loc.file, loc.line)

    @property
    def cursor_line(self) -> tuple[str, int]:
        """(file, line) under the cursor: where ``b`` toggles a breakpoint."""
        return self.file, self.cursor + 1

    def lines(self, file: str) -> list[Text]:
        text = self._lines.get(file)
        if text is None:
            text = self._lines[file] = source_text(self.replay, file)
        return text

    def row_count(self) -> int:
        return len(self.lines(self.file)) if self.file else 0

    @property
    def gutter_width(self) -> int:
        """Cells before the code: line number, breakpoint, ▶, stall cycles, bar."""
        return len(str(self.row_count())) + 1 + 1 + 1 + 5 + 2

    @property
    def code_width(self) -> int:
        """Cells the longest line of the file needs, gutter included."""
        longest = max((t.cell_len for t in self.lines(self.file)), default=0) if self.file else 0
        return self.gutter_width + longest

    def follow(self) -> None:
        """Show the focused PE's current line's file with the cursor on that line (its
        kernel's ``def`` before its first tl call)."""
        here = self.current_line or kernel_def(self.replay, self.focused_pe)
        if here is None:
            return
        file, line = here
        self.file = file  # a file not embedded shows a note saying so
        self.cursor = line - 1
        self.show_row(self.cursor)

    def watch_position(self) -> None:
        # Most moves stay on the same line: repaint only when the focused PE's line
        # changed (the gutter's stalls and marks do not depend on the position).
        here, before = self.current_line, self._shown_line
        if here != before:
            self._shown_line = here
            self.follow()
            # The ▶ moves from one line to another (a new file repaints everything).
            for line in (before, here):
                if line is not None and line[0] == self.file:
                    self.refresh_rows(line[1] - 1)

    def watch_kernel_view_at(self) -> None:
        self.watch_position()

    def watch_focused_pe(self) -> None:
        self._shown_line = self.current_line
        self.follow()
        self.refresh()

    def watch_breakpoint_generation(self) -> None:
        self.refresh()

    def watch_file(self) -> None:
        self._retitle()
        self.code_left = 0
        self.refresh()

    def watch_code_left(self) -> None:
        self.refresh()

    def validate_code_left(self, left: int) -> int:
        longest = self.code_width - self.gutter_width
        return max(0, min(int(left), longest - (self.size.width - self.gutter_width) + 1))

    def action_scroll_code(self, direction: int) -> None:
        self.code_left += direction * SCROLL_COLUMNS

    def _retitle(self, focused: bool | None = None) -> None:
        focused = self.has_focus if focused is None else focused
        if self.pane is None:
            self.border_title = _title(self.file)
        else:
            self.border_title = pane_title(self.pane, self.file, focused)

    def on_focus(self) -> None:
        self._retitle(focused=True)

    def on_blur(self) -> None:
        self._retitle(focused=False)

    def on_mount(self) -> None:
        self._retitle()
        self.follow()

    def chosen(self, row: int) -> None:
        self.post_message(LineChosen(self.file, row + 1))

    # --- drawing -------------------------------------------------------------------------

    def _breakpoint_lines(self) -> dict[int, bool]:
        """Line -> enabled, for the source-line breakpoints on this file."""
        marks: dict[int, bool] = {}
        for bp in self.replay.breakpoints:
            if isinstance(bp, SourceLine) and (
                bp.file is None or self.file == bp.file or self.file.endswith("/" + bp.file)
            ):
                marks[bp.line] = marks.get(bp.line, False) or bp.enabled
        return marks

    def render_row(self, row: int, width: int, base: Style) -> list[Segment]:
        line = row + 1
        here = self.current_line
        is_current = here is not None and here == (self.file, line)
        if is_current:
            base = base + self.component_style("source-view--current")
        marks = self._breakpoint_lines()
        mark = {True: "●", False: "○"}.get(marks.get(line), " ") if line in marks else " "
        stall = self._stalls.get(self.focused_pe, {}).get((self.file, line), 0)
        gutter = base + self.component_style("source-view--gutter")
        digits = len(str(self.row_count()))
        segments = [
            Segment(f"{line:>{digits}} ", gutter),
            Segment(mark, base + self.component_style("source-view--breakpoint")),
            Segment("▶" if is_current else " ", base + Style(bold=True)),
            Segment(
                f"{cycles(stall, 5) if stall else '':>5}",
                base + self.component_style("source-view--stall"),
            ),
            Segment("│ ", gutter),
        ]
        key = (self.file, row)
        code = self._segments.get(key)
        if code is None:
            text = self.lines(self.file)[row]
            code = self._segments[key] = list(text.render(self.app.console))
        code = [Segment(s.text, base + s.style if s.style else base) for s in code]
        if self.code_left:
            cut = Strip(code)
            code = list(cut.crop(self.code_left, max(cut.cell_length, self.code_left)))
            segments.append(Segment("‹", gutter))
        return segments + code


#: Lines of an embedded source shown: highlighting two million lines would leave the
#: screen blank for minutes; a kernel file is a few hundred.
MAX_SOURCE_LINES = 5_000
#: Characters of one source line shown.
MAX_LINE_CHARS = 1_000


def source_text(replay: Replay, file: str) -> list[Text]:
    """The lines of ``file`` as the trace embeds it, highlighted (see _highlighted), or
    one line saying the trace does not have it."""
    code = replay.index.sources.get(file)
    if code is None:
        return [Text(f"(the source of {escape(file, 500)} is not embedded in this trace)")]
    return _highlighted(code)


def _highlighted(code: str) -> list[Text]:
    """The first MAX_SOURCE_LINES lines of ``code``, highlighted, control characters
    escaped, each cut to MAX_LINE_CHARS, and a note for the lines left out."""
    lines = code.split("\n", MAX_SOURCE_LINES)
    rest = lines.pop() if len(lines) > MAX_SOURCE_LINES else None
    shown = "\n".join(escape(line.expandtabs(4).rstrip("\r"), MAX_LINE_CHARS) for line in lines)
    text = Syntax(shown, "python", theme="ansi_dark").highlight(shown).split("\n", allow_blank=True)
    if rest is not None:
        more = rest.count("\n") + 1
        text.append(Text(f"({more:,} more lines not shown: the source is too long)"))
    return text


def _title(file: str) -> Text:
    """A file name as a border title: a Text, so that a [/b] in it is not markup."""
    return Text(escape(file, 200))
