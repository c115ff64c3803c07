"""CompareApp: two runs of a kernel in one app, on one time axis, cursors linked call by call."""

from __future__ import annotations

import os
from dataclasses import dataclass

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.reactive import var
from textual.widgets import Footer
from textual.worker import get_current_worker

from kbdebug.analysis.compare import Change, Comparison, FindingGroups
from kbdebug.replay import Replay, StalledWait
from kbdebug.safe_text import escape
from kbdebug.ui import queries
from kbdebug.ui.app.line_breakpoints import toggle_line
from kbdebug.ui.app.loading import LoadingPanel
from kbdebug.ui.compare.findings import FindingGroupsView, RunFindingChosen
from kbdebug.ui.compare.futures import FuturePair
from kbdebug.ui.compare.header import CompareHeader
from kbdebug.ui.compare.help import CompareHelp
from kbdebug.ui.compare.layout import CSS, KEYS, NARROW_COLUMNS
from kbdebug.ui.compare.source import CompareSource
from kbdebug.ui.compare.timeline import RunCycleClicked, SharedTimeline
from kbdebug.ui.messages import LineChosen, LoadProgressed, TraceLoadFailed
from kbdebug.ui.panes.lanes import build_timeline
from kbdebug.ui.screens.breakpoint_dialog import BreakpointDialog


@dataclass
class RunsLoaded(Message):
    """Both traces are open."""

    a: Replay
    b: Replay


@dataclass
class ComparisonComputed(Message):
    """Both runs' findings, bounds and the diff are ready (or ``error`` says why not)."""

    groups: FindingGroups | None
    headline: list[Change] | None
    error: str | None = None


def _call_text(site: str) -> str:
    """``tl.wait(f)#0``, ``self.tl.wait(x)#0 (from kv.next(0)#0)`` for a call in a helper:
    a call's identity without its file and function."""
    own, _, caller = site.partition("@")
    text = own.rsplit("::", 1)[-1]
    return f"{text} (from {caller.split('@')[0].rsplit('::', 1)[-1]})" if caller else text


def _in_run(reason: str, run: str) -> str:
    """``stopped at a stalled tl.wait ...`` as ``stopped in A at a stalled tl.wait ...``."""
    name = run.upper()
    if reason.startswith("stopped"):
        return f"stopped in {name}" + reason[len("stopped") :]
    return f"stopped in {name}: {reason}"


def _other(run: str) -> str:
    return "b" if run == "a" else "a"


class CompareApp(App[int]):
    """Run A above run B; the focused run moves with the keys, the other follows by call."""

    TITLE = "kbdebug compare"
    CSS = CSS
    BINDINGS = [
        Binding(key, action, short, show=footer, tooltip=long)
        for key, action, short, long, footer in KEYS
    ]

    position_a = var(0, init=False)
    """Events applied in run A."""

    position_b = var(0, init=False)
    """Events applied in run B."""

    side = var("a", init=False)
    """The focused run ("a" or "b"): the keys move it, the other one follows."""

    focused_pe = var(0, init=False)
    """The PE whose tl calls are stepped and linked."""

    selected_a = var(-1, init=False)
    """A's future under the cursor (highlighted on A's lanes)."""

    selected_b = var(-1, init=False)
    """B's future under the cursor, the counterpart of A's when A is focused."""

    status = var("", init=False)
    """What the last move did, or why it could not."""

    breakpoint_generation = var(0, init=False)
    """Bumped whenever breakpoints change, so the source marks are redrawn."""

    def __init__(self, a: Replay | str, b: Replay | str) -> None:
        """Compare ``a`` and ``b``: open replays, or paths opened in a worker first (with
        a progress bar: two million-event traces take seconds the first time)."""
        super().__init__()
        #: The trace paths, as given.
        self.paths = {
            run: r if isinstance(r, str) else (r.path or "trace") for run, r in (("a", a), ("b", b))
        }
        self.replays: dict[str, Replay] = {}
        self.comparison: Comparison | None = None
        if isinstance(a, Replay) and isinstance(b, Replay):
            self._set_runs(a, b)
        #: Why a trace could not be opened (the app then exits with status 2).
        self.load_error: str | None = None
        #: "zero": both timelines start at cycle 0; "call": the linked cursors line up.
        self.align = "zero"
        #: Whether the other run is at the focused run's call (False: it has no such call).
        self.linked = True
        self.stalled_waits = {"a": StalledWait(min_stall=1), "b": StalledWait(min_stall=1)}
        self.groups: FindingGroups | None = None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Until both traces are open only quitting and the help work.
        return self.comparison is not None or action in ("quit", "help")

    def _set_runs(self, a: Replay, b: Replay) -> None:
        self.replays = {"a": a, "b": b}
        self.comparison = Comparison(a, b)

    # --- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        if self.comparison is None:
            yield LoadingPanel(f"{self.paths['a']} and {self.paths['b']}", id="loading")
            yield Footer(compact=True, show_command_palette=False)
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
            )
            futures = FuturePair(id="futures").data_bind(CompareApp.side)
            futures.border_title = "future under the cursor, A and B"
            yield futures
        findings = FindingGroupsView(id="findings").data_bind(CompareApp.side)
        findings.border_title = "findings: fixed, new, still there (Enter: go to it)"
        yield findings
        yield Footer(compact=True, show_command_palette=False)

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
            "A above B, one time axis: n steps tl calls (the other run follows), "
            "x flips the focused run, a aligns, ? for help"
        )
        self.compute()
        self.query_one(CompareSource).focus()
        self.call_after_refresh(self.sync_views)

    @work(thread=True, exclusive=True, group="load")
    def load(self) -> None:
        """Read and index both traces, posting progress; then RunsLoaded or TraceLoadFailed."""
        worker = get_current_worker()
        opened = []
        for k, run in enumerate(("a", "b")):
            path = self.paths[run]

            def progress(fraction: float, k: int = k, name: str = run.upper()) -> None:
                if worker.is_cancelled:
                    raise InterruptedError("loading cancelled")
                stage = "reading" if fraction < 0.7 else "indexing"
                self.post_message(LoadProgressed((k + fraction) / 2, f"{stage} {name}"))

            try:
                opened.append(Replay.open(path, progress=progress))
            except InterruptedError:
                return
            except (OSError, ValueError) as e:
                self.post_message(TraceLoadFailed(queries.one_line(e, path)))
                return
        self.post_message(RunsLoaded(*opened))

    def on_load_progressed(self, message: LoadProgressed) -> None:
        for panel in self.query(LoadingPanel):
            panel.fraction = message.fraction
            panel.stage = message.stage

    async def on_runs_loaded(self, message: RunsLoaded) -> None:
        self._set_runs(message.a, message.b)
        await self.recompose()
        self._opened()

    def on_trace_load_failed(self, message: TraceLoadFailed) -> None:
        self.load_error = message.error
        self.exit(return_code=2)

    def on_resize(self) -> None:
        self._layout_classes()

    def _layout_classes(self) -> None:
        self.screen.set_class(self.size.width < NARROW_COLUMNS, "-narrow")
        if self.comparison is None:
            return
        for run in ("a", "b"):
            timeline = self.timeline(run)
            timeline.set_class(run == self.side, "-focused")
            timeline.set_class(run != self.side, "-other")

    def timeline(self, run: str) -> SharedTimeline:
        return self.query_one(f"#timeline-{run}", SharedTimeline)

    # --- the comparison, in a worker ------------------------------------------------------

    @work(thread=True, group="compare")
    def compute(self) -> None:
        """Findings, bounds and the diff of both runs, on private replays over the same
        (read-only) indexes."""
        a, b = self.replays["a"], self.replays["b"]
        private = Comparison(
            Replay(a.index, a.path), Replay(b.index, b.path), lines=self.comparison.lines
        )
        try:
            groups, headline = private.findings, private.headline
        except Exception as e:  # noqa: BLE001 - a failing rule must not take the app down
            self.post_message(ComparisonComputed(None, None, f"findings unavailable: {e!r}"))
            return
        self.post_message(ComparisonComputed(groups, headline))

    def on_comparison_computed(self, message: ComparisonComputed) -> None:
        self.groups = message.groups
        view = self.query_one(FindingGroupsView)
        if message.error is not None:
            view.note = message.error
            return
        view.groups = message.groups
        self.query_one(CompareHeader).headline = message.headline

    # --- moving ---------------------------------------------------------------------------

    def replay(self, run: str | None = None) -> Replay:
        return self.replays[self.side if run is None else run]

    def move_to(self, position: int, status: str, focus_event: bool = False) -> None:
        """Make ``position`` the focused run's cursor; the other run follows by call."""
        self.replay().seek(position)
        self._moved(status, focus_event)

    def _moved(self, status: str, focus_event: bool = False) -> None:
        run, replay = self.side, self.replay()
        if focus_event and replay.position > 0:
            pe = int(replay.index.columns.pe[replay.position - 1])
            if 0 <= pe < replay.index.n_pes:
                self.focused_pe = pe
        status = self._follow(status)
        setattr(self, f"position_{run}", replay.position)
        self._select_future()
        self.status = status
        self.sync_views()

    def _follow(self, status: str) -> str:
        """Put the other run on the focused run's current call; the status says where."""
        run, other = self.side, _other(self.side)
        here = self.replay()
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
        replay = self.replay()
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

    def _refuse(self, status: str) -> None:
        self.status = status
        self.bell()

    def action_step(self, n: int) -> None:
        replay = self.replay()
        if (n > 0 and replay.position >= replay.n_events) or (n < 0 and replay.position == 0):
            self._refuse("cannot step: at the " + ("end" if n > 0 else "start") + " of the run")
            return
        replay.step(n)
        self._moved(f"{self.side.upper()}: {queries.event_text(replay, replay.position - 1)}")

    def action_next_call(self, direction: int) -> None:
        calls = self.comparison.calls.calls_of(self.side, self.focused_pe)
        found = queries.next_event(calls, self.replay().position, reverse=direction < 0)
        if found is None:
            which = "next" if direction > 0 else "previous"
            self._refuse(f"no {which} tl call on PE {self.focused_pe} in {self.side.upper()}")
            return
        text = queries.tl_call_text(self.replay(), found)
        self.move_to(found + 1, f"{self.side.upper()}: {text}")

    def action_continue(self, direction: int) -> None:
        replay = self.replay()
        if not any(bp.enabled for bp in replay.breakpoints):
            self._refuse(
                f"no breakpoints in {self.side.upper()}: w breaks on stalled waits, b on a line"
            )
            return
        hit = replay.continue_(reverse=direction < 0)
        if hit is None:
            end = "end" if direction > 0 else "start"
            self._moved(f"no more breakpoint hits in {self.side.upper()}: ran to the {end}")
            return
        self._moved(_in_run(queries.stop_reason(replay, hit), self.side), focus_event=True)

    def action_edge(self, direction: int) -> None:
        replay = self.replay()
        self.move_to(
            0 if direction < 0 else replay.n_events,
            "at the " + ("start" if direction < 0 else "end") + f" of {self.side.upper()}",
        )

    def action_flip(self) -> None:
        self.side = _other(self.side)
        self._layout_classes()
        self.query_one(FindingGroupsView).run = self.side
        name, other = self.side.upper(), _other(self.side).upper()
        self.status = f"focused run {name}: the keys move {name}, {other} follows"
        self._select_future()
        self.sync_views()

    def action_toggle_align(self) -> None:
        self.align = "call" if self.align == "zero" else "zero"
        self.status = (
            "timelines aligned at the current call: the two cursors line up"
            if self.align == "call"
            else "timelines aligned at cycle 0"
        )
        self.sync_views()

    def action_focus_pe(self, delta: int) -> None:
        n = self.replay().index.n_pes
        if n < 2:
            self._refuse("only one PE in this run: [ and ] switch between PEs")
            return
        self.focused_pe = (self.focused_pe + delta) % n
        self.status = f"focused PE {self.focused_pe}"

    def action_zoom(self, direction: int) -> None:
        focused = self.timeline(self.side)
        before = (focused.view_start, focused.view_span)
        focused.zoom(2.0 if direction > 0 else 0.5)
        if (focused.view_start, focused.view_span) == before:
            self._refuse("the timelines are zoomed as far as they go")
            return
        self.sync_views(follow=False)

    def action_zoom_all(self) -> None:
        self.timeline(self.side).show_all()
        self.sync_views(follow=False)

    def action_pan(self, direction: int) -> None:
        focused = self.timeline(self.side)
        before = focused.view_start
        focused.pan(0.25 * direction)
        if focused.view_start == before:
            self._refuse(f"the timelines are at the {'start' if direction < 0 else 'end'}")
            return
        self.sync_views(follow=False)

    def action_help(self) -> None:
        keys = [(self.get_key_display(Binding(k.split(",")[0], a)), t) for k, a, _, t, _ in KEYS]
        keys.append(("tab", "Move the keyboard focus between panes (arrows scroll, Enter acts)"))
        self.push_screen(CompareHelp(keys))

    # --- breakpoints (in the focused run) -------------------------------------------------

    def action_toggle_stalled_wait(self) -> None:
        replay, bp = self.replay(), self.stalled_waits[self.side]
        name = self.side.upper()
        if bp in replay.breakpoints and bp.enabled:
            bp.enabled = False
            self.status = f"no longer breaking on stalled waits in {name}"
        else:
            bp.enabled = True
            if bp not in replay.breakpoints:
                replay.breakpoints.append(bp)
            hits = len(bp.hits(replay))
            self.status = f"breaking on stalled tl.wait in {name} ({hits} there): c continues"
        self.breakpoint_generation += 1

    def action_toggle_line_breakpoint(self) -> None:
        here = self.query_one(CompareSource).cursor_line
        if here is None:
            self._refuse(f"no such line in {self.side.upper()}: it is only in the other run")
            return
        self.toggle_line_breakpoint(*here)

    def toggle_line_breakpoint(self, file: str, line: int) -> None:
        """Remove the focused run's breakpoints on ``file``:``line``, or add one (gdb-like)."""
        done = toggle_line(self.replay(), file, line, f" in {self.side.upper()}")
        if done.refused:
            self._refuse(done.status)
            return
        self.status = done.status
        if done.changed:
            self.breakpoint_generation += 1

    def action_breakpoints(self) -> None:
        self.push_screen(BreakpointDialog(self.replay()), self._breakpoints_edited)

    def _breakpoints_edited(self, changed: bool | None) -> None:
        if changed:
            self.breakpoint_generation += 1
            self.status = f"breakpoints of {self.side.upper()} changed: c continues"

    # --- messages from the panes ----------------------------------------------------------

    def on_line_chosen(self, message: LineChosen) -> None:
        self.toggle_line_breakpoint(message.file, message.line)

    def on_run_cycle_clicked(self, message: RunCycleClicked) -> None:
        # A click on the other run's lanes focuses that run first.
        if message.run != self.side:
            self.action_flip()
        replay = self.replay()
        replay.seek_time(message.cycle)
        self._moved(f"{self.side.upper()}: {queries.seek_cycle_text(replay, message.cycle)}")

    def on_run_finding_chosen(self, message: RunFindingChosen) -> None:
        finding = message.finding
        if message.run != self.side:
            self.action_flip()
        event = queries.finding_event(self.replay(), finding)
        if event is None:
            self._refuse(f"{finding.rule} has no events to go to")
            return
        self.move_to(
            event + 1,
            f"{self.side.upper()}: {finding.rule} {finding.title}: {finding.message}",
            focus_event=True,
        )
