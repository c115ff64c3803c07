"""CompareApp: the app's compare mode: two runs on one time axis, cursors linked call by call.

Everything a key does to the focused run (step, continue, breakpoints, zoom, pan,
help, palette, the key bar, loading, the findings worker) is the app's, in
``kbdebug.ui.app.base``; this mode adds the second run, the link that puts the
other run on the focused run's call (``x`` flips which one is focused, ``a``
aligns the timelines), and the panes that show both runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import var

from kbdebug.analysis.compare import Change, Comparison, FindingGroups
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.model import PEBound
from kbdebug.replay import Replay, StalledWait
from kbdebug.safe_text import escape
from kbdebug.ui import queries
from kbdebug.ui.app.base import DebuggerApp
from kbdebug.ui.app.keybar import KeyBar
from kbdebug.ui.app.loading import LoadingPanel
from kbdebug.ui.compare.findings import FindingGroupsView, RunFindingChosen
from kbdebug.ui.compare.futures import FuturePair
from kbdebug.ui.compare.header import CompareHeader
from kbdebug.ui.compare.keys import INTRO, KEYS, NARROW_COLUMNS
from kbdebug.ui.compare.source import CompareSource
from kbdebug.ui.compare.timeline import RunCycleClicked, SharedTimeline
from kbdebug.ui.panes.lanes import build_timeline
from kbdebug.ui.panes.mesh_view import MeshView
from kbdebug.ui.panes.timeline import Timeline

RUNS = ("a", "b")


@dataclass(frozen=True)
class Compared:
    """What the findings worker found for two runs."""

    groups: FindingGroups
    headline: list[Change]
    #: Each run's findings, biggest saving first, by run.
    findings: dict[str, list[Finding]]
    #: Each run's PE bounds (ends and efficiencies), by run.
    bounds: dict[str, list[PEBound]]


def _call_text(site: str) -> str:
    """``tl.wait(f)#0``, ``self.tl.wait(x)#0 (from kv.next(0)#0)`` for a call in a helper:
    a call's identity without its file and function."""
    own, _, caller = site.partition("@")
    text = own.rsplit("::", 1)[-1]
    return f"{text} (from {caller.split('@')[0].rsplit('::', 1)[-1]})" if caller else text


def _other(run: str) -> str:
    return "b" if run == "a" else "a"


class CompareApp(DebuggerApp):
    """Run A above run B; the focused run moves with the keys, the other follows by call."""

    TITLE = "kbdebug compare"
    # Absolute, so subclasses in other directories (benchmarks, tests) find it too.
    CSS_PATH = Path(__file__).with_name("app.tcss")
    KEYS = KEYS
    HELP_INTRO = INTRO

    position_a = var(0, init=False)
    """Events applied in run A."""

    position_b = var(0, init=False)
    """Events applied in run B."""

    kernel_view_at = var(("", -1, -1), init=False)
    """("A: " or "B: ", PE, position) where that run's PE's current stop is seen from its
    kernel (n, o or t stepped over a helper call): the source shows the calling line."""

    side = var("a", init=False)
    """The focused run ("a" or "b"): the keys move it, the other one follows."""

    selected_a = var(-1, init=False)
    """A's future under the cursor (highlighted on A's lanes)."""

    selected_b = var(-1, init=False)
    """B's future under the cursor, the counterpart of A's when A is focused."""

    def __init__(self, a: Replay | str, b: Replay | str) -> None:
        """Compare ``a`` and ``b``: open replays, or paths opened in a worker first (with
        a progress bar: two million-event traces take seconds the first time)."""
        #: The trace paths, as given.
        self.paths = {
            run: r if isinstance(r, str) else (r.path or "trace")
            for run, r in zip(RUNS, (a, b), strict=True)
        }
        super().__init__([self.paths["a"], self.paths["b"]])
        self.replays: dict[str, Replay] = {}
        self.comparison: Comparison | None = None
        if isinstance(a, Replay) and isinstance(b, Replay):
            self._set_replays([a, b], [])
        #: "zero": both timelines start at cycle 0; "call": the linked cursors line up.
        self.align = "zero"
        #: Whether the other run is at the focused run's call (False: it has no such call).
        self.linked = True
        self.stalled_waits = {run: StalledWait(min_stall=1) for run in RUNS}
        #: Each run's findings, biggest saving first; empty until the worker is done.
        self.run_findings: dict[str, list[Finding]] = {}
        #: Each run's PE bounds; empty until the worker is done.
        self.run_bounds: dict[str, list[PEBound]] = {}

    # --- the focused run -------------------------------------------------------------------

    @property
    def replay(self) -> Replay | None:
        """The focused run (None while the traces are opened)."""
        return self.replays.get(self.side)

    @property
    def findings(self) -> list[Finding] | None:
        """The focused run's findings (None while they are computed)."""
        return self.run_findings.get(self.side)

    @property
    def stalled_wait(self) -> StalledWait:
        """The breakpoint ``w`` toggles in the focused run."""
        return self.stalled_waits[self.side]

    def run_prefix(self) -> str:
        return f"{self.side.upper()}: "

    def load_label(self, k: int) -> str:
        return f" {RUNS[k].upper()}"

    def _set_replays(self, replays: list[Replay], stamps: list) -> None:
        a, b = replays
        self.replays = {"a": a, "b": b}
        self.comparison = Comparison(a, b)

    # --- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        if self.comparison is None:
            yield LoadingPanel(f"{self.paths['a']} and {self.paths['b']}", id="loading")
            yield KeyBar(id="keys")
            return
        a, b = self.replays["a"], self.replays["b"]
        yield CompareHeader(a, b, id="header").data_bind(
            CompareApp.position_a,
            CompareApp.position_b,
            CompareApp.side,
            CompareApp.focused_pe,
            CompareApp.status,
        )
        end = max(a.end_time, b.end_time)
        for run, replay in (("a", a), ("b", b)):
            timeline = SharedTimeline(
                replay, build_timeline(replay), end, run, id=f"timeline-{run}"
            )
            name = escape(os.path.basename(replay.path or "trace"), 120)
            timeline.border_title = f"{run.upper()}: {name}"
            yield timeline.data_bind(
                position=getattr(CompareApp, f"position_{run}"),
                focused_pe=CompareApp.focused_pe,
                selected_future=getattr(CompareApp, f"selected_{run}"),
            )
        with Horizontal(id="middle"):
            yield CompareSource(a, b, self.comparison.lines, id="source").data_bind(
                CompareApp.position_a,
                CompareApp.position_b,
                CompareApp.side,
                CompareApp.focused_pe,
                CompareApp.breakpoint_generation,
                CompareApp.kernel_view_at,
            )
            futures = FuturePair(id="futures").data_bind(CompareApp.side)
            futures.border_title = "future under the cursor, A and B"
            yield futures
        with Horizontal(id="bottom"):
            findings = FindingGroupsView(id="findings").data_bind(CompareApp.side)
            findings.n_pes = {"a": a.index.n_pes, "b": b.index.n_pes}
            findings.border_title = "[5] findings: fixed, new, still there (Enter: go to it)"
            yield findings
            mesh = MeshView(self.replay, id="mesh").data_bind(CompareApp.focused_pe)
            mesh.border_title = f"[6] mesh of {self.side.upper()}"
            yield mesh
        yield KeyBar(id="keys")

    def on_mount(self) -> None:
        if self.comparison is None:
            self.load()
        else:
            self._opened()

    def _opened(self) -> None:
        self._layout_classes()
        self.position_a = self.replays["a"].position
        self.position_b = self.replays["b"].position
        self.status = (
            "A above B, one time axis: n steps lines, s tl calls (the other run follows), "
            "x flips the focused run, a aligns, ? for help"
        )
        super()._opened()
        self.query_one(CompareSource).focus()
        self.call_after_refresh(self.sync_views)

    def on_resize(self) -> None:
        self._layout_classes()

    def _layout_classes(self) -> None:
        self.screen.set_class(self.size.width < NARROW_COLUMNS, "-narrow")
        if self.comparison is None:
            return
        for run in RUNS:
            timeline = self.timeline(run)
            timeline.set_class(run == self.side, "-focused")
            timeline.set_class(run != self.side, "-other")

    def timeline(self, run: str) -> SharedTimeline:
        """Run ``run``'s lanes."""
        return self.query_one(f"#timeline-{run}", SharedTimeline)

    def help_panes(self) -> list[tuple[str, type]]:
        return [
            ("Pane timelines A and B: Tab focuses them; then", SharedTimeline),
            ("Pane source: Tab focuses it; then", CompareSource),
            ("Pane findings: 5 or Tab focuses it; then", FindingGroupsView),
            ("Pane mesh (the focused run's PEs): 6 or Tab focuses it; then", MeshView),
        ]

    # --- the comparison, in a worker -------------------------------------------------------

    def _analysed(self) -> tuple[Replay, ...]:
        return (self.replays["a"], self.replays["b"])

    def _analyse(self, replays: tuple[Replay, ...]) -> Compared:
        """Findings, bounds and the diff of both runs, on private replays over the same
        (read-only) indexes."""
        a, b = replays
        private = Comparison(
            Replay(a.index, a.path), Replay(b.index, b.path), lines=self.comparison.lines
        )
        findings = {
            run: queries.biggest_saving_first(private.analysis[run].findings) for run in RUNS
        }
        bounds = {run: private.analysis[run].bounds for run in RUNS}
        return Compared(private.findings, private.headline, findings, bounds)

    def _show_analysis(self, result: Compared | None, error: str | None) -> None:
        view = self.query_one(FindingGroupsView)
        if result is None:
            self.run_findings = {run: [] for run in RUNS}
            self.run_bounds = {run: [] for run in RUNS}  # failed: no efficiency known
            self._show_mesh()
            view.note = error
            return
        self.run_findings = result.findings
        self.run_bounds = result.bounds
        self._show_mesh()
        view.groups = result.groups
        self.query_one(CompareHeader).headline = result.headline

    def finding_runs(self) -> list[tuple[Replay, list[Finding] | None]]:
        return [(self.replays[run], self.run_findings.get(run)) for run in RUNS]

    # --- where the cursors go --------------------------------------------------------------

    def source_line(self) -> tuple[str, int] | None:
        return self.query_one(CompareSource).cursor_line

    def focused_timeline(self) -> Timeline:
        return self.timeline(self.side)

    def timeline_moved(self, timeline: Timeline, follow: bool = False) -> None:
        self.sync_views(follow=follow)

    def _show_place(self, status: str) -> str:
        status = self._follow(status)
        setattr(self, f"position_{self.side}", self.replay.position)
        self._select_future()
        self.sync_views()
        return status

    def _follow(self, status: str) -> str:
        """Put the other run on the focused run's current call; the status says where."""
        run, other = self.side, _other(self.side)
        here = self.replay
        call = self.comparison.current_call(run, here.position, self.focused_pe)
        if call is None:
            self.linked = True
            return status
        there = self.comparison.other_call(run, call)
        name = other.upper()
        if there is None:
            self.linked = False
            key = self.comparison.call_key(run, call)
            what = _call_text(key.site) if key is not None else "this call"
            nth = f" (its occurrence {key.occurrence})" if key is not None else ""
            # First, so that a narrow screen still shows it.
            return f"not in {name}: {name} never made {what}{nth}, it stays  ·  {status}"
        self.linked = True
        other_replay = self.replays[other]
        other_replay.seek(there + 1)
        setattr(self, f"position_{other}", other_replay.position)
        return f"{status}  ·  {name}: {queries.tl_call_text(other_replay, there)}"

    def _select_future(self) -> None:
        run = self.side
        replay = self.replay
        future = queries.future_of_event(replay, replay.position - 1)
        if future < 0:
            future = getattr(self, f"selected_{run}")
        pair = self.comparison.future_pair(run, future) if future >= 0 else None
        setattr(self, f"selected_{run}", future)
        if pair is not None:
            there = pair[1] if run == "a" else pair[0]
            setattr(self, f"selected_{_other(run)}", there.future if there else -1)
        self.query_one(FuturePair).pair = pair

    def sync_views(self, follow: bool = True) -> None:
        """Keep the focused run's cursor in view (unless ``follow`` is False: a pan may
        leave it); give the other timeline the same span, starting at the same cycle
        (aligned at 0) or shifted so the cursors line up."""
        focused, other = self.timeline(self.side), self.timeline(_other(self.side))
        if follow and not focused.cursor_in_view():
            focused.view_start = focused.replay.time - focused.view_span / 2
        other.view_span = focused.view_span
        offset = 0.0
        if self.align == "call":
            offset = float(other.replay.time - focused.replay.time)
        other.view_start = focused.view_start + offset

    # --- the keys only compare has ---------------------------------------------------------

    def action_focus_findings(self) -> None:
        """Give the findings pane the keyboard."""
        self.query_one(FindingGroupsView).focus()
        self.status = "findings of A and B: Enter goes to one in its run"

    def action_flip(self) -> None:
        self.side = _other(self.side)
        self._layout_classes()
        name, other = self.side.upper(), _other(self.side).upper()
        self.status = f"focused run {name}: the keys move {name}, {other} follows"
        self.breaks = queries.breakpoint_summary(self.replay)
        self._select_future()
        self.sync_views()
        self._show_mesh()

    def _show_mesh(self) -> None:
        """The mesh pane shows the focused run's PEs."""
        self.show_mesh(self.run_bounds.get(self.side))
        self.query_one(MeshView).border_title = f"[6] mesh of {self.side.upper()}"

    def action_toggle_align(self) -> None:
        self.align = "call" if self.align == "zero" else "zero"
        self.status = (
            "timelines aligned at the current call: the two cursors line up"
            if self.align == "call"
            else "timelines aligned at cycle 0"
        )
        self.sync_views()

    # --- messages from the panes -----------------------------------------------------------

    def on_run_cycle_clicked(self, message: RunCycleClicked) -> None:
        # A click on the other run's lanes focuses that run first.
        if message.run != self.side:
            self.action_flip()
        self.seek_cycle(message.cycle)

    def on_run_finding_chosen(self, message: RunFindingChosen) -> None:
        if message.run != self.side:
            self.action_flip()
        self.jump_to_finding(message.finding)
