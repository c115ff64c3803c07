"""StatusHeader: the two lines at the top: where we are in the trace, and why we stopped."""

from __future__ import annotations

import os

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from kbdebug.analysis.model import PEBound
from kbdebug.replay import Replay
from kbdebug.safe_text import escape


def status_kind(status: str) -> str:
    """How a status line is coloured: "stopped" at a breakpoint, "error" for a refusal
    or a problem, else "value"; a leading run name ("A: ", in compare) does not count."""
    if status[:3] in ("A: ", "B: "):
        status = status[3:]
    if status.startswith("stopped"):
        return "stopped"
    if status.startswith(("no ", "cannot", "error", "not ")) or " not in " in status:
        return "error"
    return "value"


class StatusHeader(Widget):
    """File, cycle, event i of N, focused PE and its status; then the run state."""

    COMPONENT_CLASSES = {
        "status-header--title",
        "status-header--value",
        "status-header--stopped",
        "status-header--error",
    }

    DEFAULT_CSS = """
    StatusHeader {
        height: 2;
        text-wrap: nowrap;
        text-overflow: ellipsis;
        background: $panel;
        color: $text;
    }
    StatusHeader > .status-header--title {
        color: $accent;
        text-style: bold;
    }
    StatusHeader > .status-header--value {
        text-style: bold;
    }
    StatusHeader > .status-header--stopped {
        color: $warning;
        text-style: bold;
    }
    StatusHeader > .status-header--error {
        color: $error;
        text-style: bold;
    }
    """

    position = reactive(0)
    """Events applied (the current event is ``position - 1``)."""

    focused_pe = reactive(0)
    """The PE whose source line and status are shown."""

    status = reactive("paused")
    """The run state: paused, stopped at a breakpoint (and which), or a problem."""

    breaks = reactive("")
    """A short summary of the enabled breakpoints."""

    bounds: reactive[list[PEBound] | None] = reactive(None)
    """Each PE's kernel time against its critical-path bound, once computed."""

    launch: reactive[tuple[int, float | None] | None] = reactive(None)
    """The launch's bound and efficiency (what report, compare and sweep show)."""

    def __init__(self, replay: Replay, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.replay = replay

    def render(self) -> Text:
        width = max(self.size.width, 1)
        text = self._where(width)
        text.append("\n")
        text.append_text(self._status(width))
        return text

    def _where(self, width: int) -> Text:
        """File, cycle, event, PE and breakpoints, dropping the least useful parts to fit."""
        replay = self.replay
        state = replay.state
        title = self.get_component_rich_style("status-header--title")
        value = self.get_component_rich_style("status-header--value")
        name = escape(os.path.basename(replay.path), 200) if replay.path else "trace"
        current = self.position - 1
        n = replay.n_events
        pe = state.pes[self.focused_pe] if self.focused_pe < len(state.pes) else None
        pe_text = f"PE {self.focused_pe}"
        if replay.index.n_pes > 1:
            pe_text += f"/{replay.index.n_pes}"
        if pe is not None:
            pe_text += f" {pe.status}"
            if pe.future >= 0:
                pe_text += f" on future {pe.future}"
        long = [
            (" kbdebug ", title),
            (name, value),
            ("  cycle ", None),
            (f"{state.time:,}", value),
            (f"/{replay.end_time:,}", None),
            ("  event ", None),
            (f"#{current:,} of {n:,}" if current >= 0 else f"start (0 of {n:,})", value),
            ("  ", None),
            (pe_text, value),
        ]
        bound = self._bound()
        efficiency = efficiency_short = []
        if bound is not None and bound.efficiency is None:
            efficiency = [("  ", None), ("did not complete", value)]
            efficiency_short = [("  ", None), ("incomplete", value)]
        elif bound is not None and self.launch is not None and replay.index.n_pes > 1:
            # On a mesh the launch's figure leads (a finding stands beside it), the
            # focused PE's follows: each PE can be at its own bound while the launch is not.
            launch = self.launch[1]
            launch_text = "did not complete" if launch is None else f"{launch:.0%}"
            efficiency = [
                ("  launch ", None),
                (launch_text, value),
                (" efficient (bound ", None),
                (f"{self.launch[0]:,}", None),
                (f" cycles; PE {self.focused_pe} {bound.efficiency:.0%})", None),
            ]
            efficiency_short = [(" eff ", None), (launch_text, value)]
        elif bound is not None:
            efficiency = [
                ("  ", None),
                (f"{bound.efficiency:.0%}", value),
                (f" efficient (bound {bound.bound:,} cycles)", None),
            ]
            efficiency_short = [(" eff ", None), (f"{bound.efficiency:.0%}", value)]
        breaks = []
        if self.breaks:
            breaks = [("  break: ", None), (escape(self.breaks, 500), value)]
        short = [
            (" ", None),
            (name, value),
            (" t=", None),
            (f"{state.time}", value),
            (" #", None),
            (f"{current}/{n}" if current >= 0 else f"-/{n}", value),
            (" ", None),
            (pe_text, value),
        ]
        short_breaks = [(" ● ", value), (escape(self.breaks, 500), None)] if self.breaks else []
        # Dropped in turn: the app's name, the bound's cycles, the long forms; the
        # breakpoints stay (cut short at the end) so a narrow screen still shows them.
        without_name = [(" ", None), *long[1:9]]
        for parts in (
            long + efficiency + breaks,
            without_name + efficiency + breaks,
            without_name + efficiency_short + breaks,
            short + efficiency_short + short_breaks,
        ):
            if sum(len(t) for t, _ in parts) <= width:
                break
        line = Text(no_wrap=True, overflow="ellipsis")
        for text, style in parts:
            line.append(text, style)
        line.truncate(width, overflow="ellipsis")
        return line

    def _bound(self) -> PEBound | None:
        """The focused PE's bound, if computed and the PE ran a kernel."""
        for bound in self.bounds or ():
            if bound.pe == self.focused_pe:
                return bound
        return None

    def _status(self, width: int) -> Text:
        status = self.status
        style = self.get_component_rich_style(f"status-header--{status_kind(status)}")
        line = Text(" " + escape(status, 1000), style, no_wrap=True, overflow="ellipsis")
        line.truncate(width, overflow="ellipsis")
        return line
