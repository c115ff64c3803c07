"""StatusHeader: the two lines at the top: where we are in the trace, and why we stopped."""

from __future__ import annotations

import os

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from kbdebug.analysis.model import PEBound
from kbdebug.analysis.perturbation import perturbation_of
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


#: Columns the header's breakpoint summary keeps before the other parts shorten.
BREAKS_KEPT = 24


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
        #: The run's timing perturbation (``kbdebug run --perturb``), None when nominal.
        self.perturbation = perturbation_of(replay.index.header)

    def render(self) -> Text:
        width = max(self.size.width, 1)
        text = self._where(width)
        text.append("\n")
        text.append_text(self._status(width))
        return text

    def _where(self, width: int) -> Text:
        """File, cycle, event, PE, efficiency and breakpoints in one format: on a narrow
        screen each part takes its shorter form in turn (the least useful first), and
        what still does not fit is cut at the end, never switched to another format."""
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
        pe_long = pe_text
        if pe is not None:
            pe_text += f" {pe.status}"
            pe_long = pe_text + (f" on future {pe.future}" if pe.future >= 0 else "")
        at = f"#{current:,}" if current >= 0 else "start"
        # Each part: its forms, longest first; a form is (text, style) pairs.
        parts: dict[str, list[list[tuple[str, object]]]] = {
            "app": [[(" kbdebug ", title)], [(" ", None)]],
            "name": [[(name, value), ("  ", None)], []],
            "perturbed": self._perturbed_forms(),
            "cycle": [
                [("cycle ", None), (f"{state.time:,}", value), (f"/{replay.end_time:,}", None)],
                [("cycle ", None), (f"{state.time:,}", value)],
            ],
            "event": [
                [("  event ", None), (at, value), (f" of {n:,}", None)],
                [("  event ", None), (at, value)],
            ],
            "pe": [[("  ", None), (pe_long, value)], [("  ", None), (pe_text, value)]],
            "efficiency": self._efficiency_forms(value),
            "breaks": [
                [("  break: ", None), (escape(self.breaks, 500), value)],
                [("  ● ", value), (escape(self.breaks, 500), None)],
            ]
            if self.breaks
            else [[]],
        }
        chosen = dict.fromkeys(parts, 0)
        # The order parts shorten in: the app's name, the bound's cycles, the trace's
        # end, the event count, the PE's future (the futures table has it), the words
        # "break:" and "efficient", the file.
        steps = ["app", "perturbed", "efficiency", "cycle", "event", "efficiency", "pe"]
        steps += ["breaks"]
        steps += ["efficiency", "efficiency", "name"]

        def line_parts() -> list[tuple[str, object]]:
            return [piece for key, forms in parts.items() for piece in forms[chosen[key]]]

        def fits() -> bool:
            # The breakpoints come last and may be cut short (the source marks them
            # too): they hold on to BREAKS_KEPT columns, not to the whole of their text.
            breaks = sum(len(t) for t, _ in parts["breaks"][chosen["breaks"]])
            return sum(len(t) for t, _ in line_parts()) - breaks + min(breaks, BREAKS_KEPT) <= width

        shortened = []
        for key in steps:
            if fits():
                break
            if chosen[key] < len(parts[key]) - 1:
                chosen[key] += 1
                shortened.append(key)
        # The last shortening may leave room (the file's name is long): the ones before
        # it get their longer forms back, the latest first, where they fit.
        for key in reversed(shortened[:-1]):
            chosen[key] -= 1
            if not fits():
                chosen[key] += 1
        line = Text(no_wrap=True, overflow="ellipsis")
        for text, style in line_parts():
            line.append(text, style)
        line.truncate(width, overflow="ellipsis")
        return line

    def _perturbed_forms(self) -> list[list[tuple[str, object]]]:
        """A perturbed run's mark (its timing is not the kernel's own): the seed, shorter;
        nothing for a nominal run."""
        if self.perturbation is None:
            return [[]]
        stopped = self.get_component_rich_style("status-header--stopped")
        seed = self.perturbation.seed
        return [
            [(f"perturbed seed {seed}", stopped), ("  ", None)],
            [(f"perturbed {seed}", stopped), ("  ", None)],
        ]

    def _efficiency_forms(self, value: object) -> list[list[tuple[str, object]]]:
        """The focused PE's (on a mesh: the launch's, then the PE's) efficiency against
        its bound: with the bound, without it, shorter; none before it is computed."""
        bound = self._bound()
        if bound is None:
            return [[]]
        if bound.efficiency is None:
            return [[("  ", None), ("did not complete", value)]]
        if self.launch is not None and self.replay.index.n_pes > 1:
            # On a mesh the launch's figure leads (a finding stands beside it), the
            # focused PE's follows: each PE can be at its own bound while the launch is not.
            launch = self.launch[1]
            launch_text = "did not complete" if launch is None else f"{launch:.0%}"
            pe_share = f"PE {self.focused_pe} {bound.efficiency:.0%}"
            return [
                [
                    ("  launch ", None),
                    (launch_text, value),
                    (f" efficient (bound {self.launch[0]:,} cycles; {pe_share})", None),
                ],
                [("  launch ", None), (launch_text, value), (f" efficient ({pe_share})", None)],
                [("  launch ", None), (launch_text, value), (" efficient", None)],
                [("  launch ", None), (launch_text, value), (" eff", None)],
            ]
        share = f"{bound.efficiency:.0%}"
        return [
            [("  ", None), (share, value), (f" efficient (bound {bound.bound:,} cycles)", None)],
            [("  ", None), (share, value), (" efficient", None)],
            [("  ", None), (share, value), (" eff", None)],
        ]

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
