"""CompareHeader: where each run's cursor is, the two runs' headline figures, and the status."""

from __future__ import annotations

import os

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from kbdebug.analysis.check_verdict import CheckVerdict
from kbdebug.analysis.compare import Change
from kbdebug.analysis.select import incomplete
from kbdebug.replay import Replay
from kbdebug.safe_text import escape
from kbdebug.ui.app.header import status_kind

#: From this width both runs' places share the first line; below, only the focused one.
BOTH_RUNS_COLUMNS = 120


def change_text(change: Change) -> str:
    """``72,960 → 23,784 -67.4%`` (points for a ratio), ``-`` where a run lacks it."""

    def value(v: float | None) -> str:
        if v is None:
            return "-"
        return f"{100 * v:.1f}%" if change.unit in ("ratio", "share") else f"{int(v):,}"

    text = f"{value(change.a)} → {value(change.b)}"
    delta = change.delta
    if delta is None or not delta:
        return text + ("  same" if delta == 0 else "")
    if change.unit in ("ratio", "share"):
        return text + f"  {100 * delta:+.1f} pt"
    return text + (f"  {change.percent:+.1f}%" if change.percent is not None else f"  {delta:+,}")


class CompareHeader(Widget):
    """Line 1: each run's file, cycle, event, PE (the focused run marked ▸); line 2: end
    cycle, efficiency and stall for A and B and the change; line 3: the status."""

    COMPONENT_CLASSES = {
        "compare-header--title",
        "compare-header--value",
        "compare-header--better",
        "compare-header--worse",
        "compare-header--stopped",
        "compare-header--error",
    }

    DEFAULT_CSS = """
    CompareHeader {
        height: 3;
        background: $panel;
        color: $text;
    }
    CompareHeader > .compare-header--title { color: $accent; text-style: bold; }
    CompareHeader > .compare-header--value { text-style: bold; }
    CompareHeader > .compare-header--better { color: $success; text-style: bold; }
    CompareHeader > .compare-header--worse { color: $error; text-style: bold; }
    CompareHeader > .compare-header--stopped { color: $warning; text-style: bold; }
    CompareHeader > .compare-header--error { color: $error; text-style: bold; }
    """

    position_a = reactive(0)
    """Events applied in run A."""

    position_b = reactive(0)
    """Events applied in run B."""

    side = reactive("a")
    """The focused run: the keys move it, the other follows."""

    focused_pe = reactive(0)
    """The PE whose calls are linked."""

    status = reactive("")
    """What the last move did, or why it could not."""

    headline: reactive[list[Change] | None] = reactive(None)
    """End cycle, efficiency, stall (A, B, change); None while they are computed."""

    def __init__(self, a: Replay, b: Replay, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.replays = {"a": a, "b": b}

    def render(self) -> Text:
        width = max(self.size.width, 1)
        lines = [self._places(width), self._figures(width), self._status(width)]
        text = Text(no_wrap=True, overflow="ellipsis")
        for k, line in enumerate(lines):
            if k:
                text.append("\n")
            line.truncate(width, overflow="ellipsis")
            text.append_text(line)
        return text

    def _place(self, run: str, short: bool) -> Text:
        replay = self.replays[run]
        value = self.get_component_rich_style("compare-header--value")
        title = self.get_component_rich_style("compare-header--title")
        name = escape(os.path.basename(replay.path or "trace"), 120)
        position = self.position_a if run == "a" else self.position_b
        pes = replay.state.pes
        pe = pes[self.focused_pe] if self.focused_pe < len(pes) else None
        mark = "▸" if run == self.side else " "
        line = Text()
        line.append(f"{mark}{run.upper()} ", title)
        line.append(name, value)
        # One format, as in one run's header: a narrow screen drops the ends, not the words.
        line.append("  cycle ")
        line.append(f"{replay.time:,}", value)
        if not short:
            line.append(f"/{replay.end_time:,}")
        line.append("  event ")
        line.append(f"#{position - 1:,}" if position else "start", value)
        if not short:
            line.append(f" of {replay.n_events:,}")
        if pe is not None and not short:
            line.append(f"  PE {self.focused_pe} {pe.status}")
        return line

    def _places(self, width: int) -> Text:
        if width >= BOTH_RUNS_COLUMNS:
            line = self._place("a", False)
            line.append("  │ ")
            line.append_text(self._place("b", False))
            return line
        line = self._place(self.side, True)
        other = "b" if self.side == "a" else "a"
        line.append(f"  (x: {other.upper()})")
        return line

    def _figures(self, width: int) -> Text:
        line = Text(" ")
        # A run cut short ends early and stalls little: say so before any figure, as
        # `kbdebug diff` does, so "-67 %" is never read as a fix.
        cut = [(run, incomplete(self.replays[run])) for run in ("a", "b")]
        cut = [(run, why) for run, why in cut if why is not None]
        if cut:
            error = self.get_component_rich_style("compare-header--error")
            for run, why in cut:
                line.append(f"{run.upper()} did not complete: {escape(why, 300)}  ", error)
            line.append("(figures not comparable)  ")
        # The output check each trace records: a wrong output is said before any figure.
        checks = [(run, CheckVerdict.of(self.replays[run].index.footer)) for run in ("a", "b")]
        if any(c is not None and not c.ok for _, c in checks):
            styles = {
                True: self.get_component_rich_style("compare-header--better"),
                False: self.get_component_rich_style("compare-header--error"),
            }
            for run, c in checks:
                if c is not None:
                    line.append(f"{run.upper()}: {escape(c.text(), 300)}  ", styles[c.ok])
        if self.headline is None:
            line.append("A → B: computing the findings and bounds of both runs…")
            return line
        better = self.get_component_rich_style("compare-header--better")
        worse = self.get_component_rich_style("compare-header--worse")
        names = {"end cycle": "end", "efficiency": "eff", "stall cycles": "stall"}
        for k, change in enumerate(self.headline):
            if k:
                line.append("   ")
            name = change.name if width >= BOTH_RUNS_COLUMNS else names.get(change.name, "")
            line.append(f"{name} ")
            style = {"better": better, "worse": worse}.get(change.verdict)
            line.append(change_text(change), style)
        return line

    def _status(self, width: int) -> Text:
        status = self.status
        style = self.get_component_rich_style(f"compare-header--{status_kind(status)}")
        return Text(" " + escape(status, 1000), style)
