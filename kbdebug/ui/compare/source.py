"""CompareSource: the kernel source with two stall gutters (A, B) and the change, lines aligned."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.reactive import reactive

from kbdebug.analysis.align import LineMap
from kbdebug.analysis.summary import stall_by_pe_line
from kbdebug.replay import Replay, SourceLine
from kbdebug.safe_text import escape
from kbdebug.ui.messages import LineChosen
from kbdebug.ui.panes.rowview import RowView
from kbdebug.ui.panes.source_view import MAX_SOURCE_LINES, source_text
from kbdebug.ui.queries import cycles, kernel_def

#: (A's line, B's line) of one screen row; None where that run has no such line.
AlignedRow = tuple[int | None, int | None]


def aligned_rows(forward: dict[int, int], n_a: int, n_b: int) -> list[AlignedRow]:
    """Rows of two versions of a file: paired lines side by side, a deleted line with
    None for B, an added one with None for A, in A's order (B's lines that only B has
    come where they stand among the pairs)."""
    paired_b = set(forward.values())
    rows: list[AlignedRow] = []
    next_b = 1
    for a in range(1, n_a + 1):
        b = forward.get(a)
        if b is not None and b >= next_b:
            rows += [(None, x) for x in range(next_b, b) if x not in paired_b]
            next_b = b + 1
        rows.append((a, b))
    rows += [(None, x) for x in range(next_b, n_b + 1) if x not in paired_b]
    return rows


class CompareSource(RowView):
    """The focused run's file beside its counterpart in the other run: A's and B's line
    numbers, the stall of the focused PE's waits per line in A and in B, B - A, the code
    (the focused run's text; a line only the other run has is dimmed)."""

    COMPONENT_CLASSES = {
        "compare-source--current",
        "compare-source--other",
        "compare-source--breakpoint",
        "compare-source--stall",
        "compare-source--better",
        "compare-source--worse",
        "compare-source--gutter",
    }

    DEFAULT_CSS = """
    CompareSource > .compare-source--current { background: $warning 25%; }
    CompareSource > .compare-source--other { color: $accent; text-style: bold; }
    CompareSource > .compare-source--breakpoint { color: $error; text-style: bold; }
    CompareSource > .compare-source--stall { color: $error-lighten-1; }
    CompareSource > .compare-source--better { color: $success; }
    CompareSource > .compare-source--worse { color: $error; }
    CompareSource > .compare-source--gutter { color: $text-muted; }
    """

    HAS_HEADER = True

    position_a = reactive(0)
    """Events applied in A."""

    position_b = reactive(0)
    """Events applied in B."""

    side = reactive("a")
    """The focused run: its file is shown, its current line is the cursor."""

    focused_pe = reactive(0)
    """The PE whose current lines are marked and whose stalls fill the gutters."""

    breakpoint_generation = reactive(0)
    """Bumped by the app when breakpoints change."""

    kernel_view_at = reactive(("", -1, -1))
    """("A: " or "B: ", PE, position) where that run's PE's current tl call is seen from
    its kernel (a helper call stepped over): its line is the kernel's calling line."""

    def __init__(self, a: Replay, b: Replay, lines: LineMap, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.replays = {"a": a, "b": b}
        self.line_map = lines
        self._stalls = {"a": stall_by_pe_line(a.index), "b": stall_by_pe_line(b.index)}
        self._text: dict[tuple[str, str], list[Text]] = {}
        self._rows_of: dict[tuple[str | None, str | None], list[AlignedRow]] = {}
        self._segments: dict[tuple[str, str, int], list[Segment]] = {}
        #: (A's file, B's file) shown; either None when only one run has the file.
        self.files: tuple[str | None, str | None] = (None, None)
        self.rows: list[AlignedRow] = []
        self._row_index: tuple[dict[int, int], dict[int, int]] = ({}, {})
        first = next(iter(a.index.sources), None)
        if first is not None:
            self._show(first, "a")

    # --- what is shown -------------------------------------------------------------------

    def current_line(self, run: str) -> tuple[str, int] | None:
        """(file, line) of the focused PE's latest tl call in ``run`` (the kernel's calling
        line where it is seen from the kernel)."""
        replay = self.replays[run]
        pes = replay.state.pes
        if not 0 <= self.focused_pe < len(pes):
            return None
        loc = replay.index.loc(pes[self.focused_pe].loc)
        if loc is not None and loc.caller is not None:
            if self.kernel_view_at == (f"{run.upper()}: ", self.focused_pe, replay.position):
                loc = loc.caller
        return None if loc is None else (loc.file, loc.line)

    def _lines(self, run: str, file: str) -> list[Text]:
        key = (run, file)
        text = self._text.get(key)
        if text is None:
            text = self._text[key] = source_text(self.replays[run], file)
        return text

    def _count(self, run: str, file: str | None) -> int:
        """Lines of ``file`` in ``run`` shown (as LineMap counts them: no empty last line
        after the final newline); 0 when the run has no such file."""
        if file is None:
            return 0
        code = self.replays[run].index.sources.get(file)
        n = len(code.splitlines()) if isinstance(code, str) else len(self._lines(run, file))
        return min(n, len(self._lines(run, file)), MAX_SOURCE_LINES)

    def _show(self, file: str, run: str) -> None:
        """Show ``file`` of ``run`` with its counterpart in the other run."""
        lines = self.line_map
        pair = (file, lines.b_file(file)) if run == "a" else (lines.a_file(file), file)
        if pair == self.files:
            return
        rows = self._rows_of.get(pair)
        if rows is None:
            a_file, b_file = pair
            n_a = self._count("a", a_file)
            n_b = self._count("b", b_file)
            if a_file and b_file:
                forward = {
                    x: there[1]
                    for x in range(1, n_a + 1)
                    if (there := lines.b_line(a_file, x)) is not None and there[1] <= n_b
                }
                rows = aligned_rows(forward, n_a, n_b)
            elif a_file:
                rows = [(x, None) for x in range(1, n_a + 1)]
            else:
                rows = [(None, x) for x in range(1, n_b + 1)]
            self._rows_of[pair] = rows
        self.files, self.rows = pair, rows
        self._row_index = (
            {a: row for row, (a, _) in enumerate(rows) if a is not None},
            {b: row for row, (_, b) in enumerate(rows) if b is not None},
        )
        name = pair[0] if run == "a" else pair[1]
        other = pair[1] if run == "a" else pair[0]
        title = escape(name or "", 200)
        if other != name:
            title += f"  (in {'B' if run == 'a' else 'A'}: {escape(other or 'none', 200)})"
        self.border_title = Text(title)

    def row_of(self, run: str, line: int) -> int | None:
        """The row showing ``run``'s ``line`` of the file shown, None if it is not there."""
        return self._row_index[0 if run == "a" else 1].get(line)

    @property
    def cursor_line(self) -> tuple[str, int] | None:
        """(file, line) of the focused run under the cursor; None on a line it lacks."""
        if not self.rows:
            return None
        k = 0 if self.side == "a" else 1
        line, file = self.rows[self.cursor][k], self.files[k]
        return None if line is None or file is None else (file, line)

    def row_count(self) -> int:
        return len(self.rows)

    def follow(self) -> None:
        """Show the focused run's current line, cursor on it (before the run's first tl
        call, its kernel's ``def``, as the one-run app does)."""
        here = self.current_line(self.side) or kernel_def(self.replays[self.side], self.focused_pe)
        if here is None:
            return
        self._show(here[0], self.side)
        row = self.row_of(self.side, here[1])
        if row is not None:
            self.cursor = row
            self.show_row(row)

    def _moved(self) -> None:
        self.follow()
        self.refresh()

    watch_position_a = watch_position_b = watch_side = watch_focused_pe = _moved
    watch_kernel_view_at = _moved

    def watch_breakpoint_generation(self) -> None:
        self.refresh()

    def watch_cursor(self) -> None:
        self.refresh()

    def on_mount(self) -> None:
        self.follow()

    def chosen(self, row: int) -> None:
        here = self.cursor_line
        if here is not None:
            self.post_message(LineChosen(*here))

    # --- drawing -------------------------------------------------------------------------

    def _marks(self, run: str) -> dict[int, bool]:
        file = self.files[0 if run == "a" else 1]
        marks: dict[int, bool] = {}
        if file is None:
            return marks
        for bp in self.replays[run].breakpoints:
            if isinstance(bp, SourceLine) and (
                bp.file is None or file == bp.file or file.endswith("/" + bp.file)
            ):
                marks[bp.line] = marks.get(bp.line, False) or bp.enabled
        return marks

    def _stall(self, run: str, line: int | None) -> int:
        file = self.files[0 if run == "a" else 1]
        if line is None or file is None:
            return 0
        return self._stalls[run].get(self.focused_pe, {}).get((file, line), 0)

    def render_header(self, width: int, base: Style) -> list[Segment]:
        return [
            Segment("  A   B    stall A stall B   B-A │ ▶ this run's line, ▷ the other's", base)
        ]

    def render_row(self, row: int, width: int, base: Style) -> list[Segment]:
        a_line, b_line = self.rows[row]
        run = self.side
        own, other_run = (a_line, "b") if run == "a" else (b_line, "a")
        other = b_line if run == "a" else a_line
        here = self.current_line(run)
        there = self.current_line(other_run)
        k = 0 if run == "a" else 1
        is_current = here is not None and own is not None and here == (self.files[k], own)
        is_other = there is not None and other is not None and there == (self.files[1 - k], other)
        if is_current:
            base = base + self.component_style("compare-source--current")
        gutter = base + self.component_style("compare-source--gutter")
        marks = self._marks(run)
        mark = {True: "●", False: "○"}.get(marks.get(own)) if own in marks else " "
        stall_a, stall_b = self._stall("a", a_line), self._stall("b", b_line)
        delta = stall_b - stall_a
        delta_style = base + self.component_style(
            "compare-source--better" if delta < 0 else "compare-source--worse"
        )
        stall_style = base + self.component_style("compare-source--stall")
        change = f"{'+' if delta > 0 else '-'}{cycles(abs(delta), 5)}" if delta else ""
        segments = [
            Segment(f"{a_line if a_line else '':>3} {b_line if b_line else '':>3}", gutter),
            Segment(mark, base + self.component_style("compare-source--breakpoint")),
            Segment("▶" if is_current else " ", base + Style(bold=True)),
            Segment("▷" if is_other else " ", base + self.component_style("compare-source--other")),
            Segment(f"{cycles(stall_a, 5) if stall_a else '':>5} ", stall_style),
            Segment(f"{cycles(stall_b, 5) if stall_b else '':>5} ", stall_style),
            Segment(f"{change:>6} ", delta_style),
            Segment("│ ", gutter),
        ]
        shown_run, shown = (run, own) if own is not None else (other_run, other)
        if shown is None:
            return segments
        file = self.files[0 if shown_run == "a" else 1]
        key = (shown_run, file, shown)
        code = self._segments.get(key)
        if code is None:
            lines = self._lines(shown_run, file)
            text = lines[shown - 1] if shown - 1 < len(lines) else Text("")
            code = self._segments[key] = list(text.render(self.app.console))
        if shown_run != run:
            dim = base + self.component_style("rowview--dim")
            return segments + [Segment(s.text, dim) for s in code]
        return segments + [Segment(s.text, base + s.style if s.style else base) for s in code]
