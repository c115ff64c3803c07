"""KbdebugApp: the trace debugger's screen, its keys, and the state every pane shows."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.reactive import var
from textual.widgets import Static, TabbedContent, TabPane, Tabs
from textual.worker import get_current_worker

from emulator.trace.schema import Kind
from kbdebug.analysis import Analysis
from kbdebug.analysis.findings import Finding
from kbdebug.replay import Replay, StalledWait
from kbdebug.replay.opening import Opening
from kbdebug.safe_text import escape
from kbdebug.ui import queries
from kbdebug.ui.app.breakpoint_actions import BreakpointActions
from kbdebug.ui.app.header import StatusHeader
from kbdebug.ui.app.keybar import KeyBar
from kbdebug.ui.app.keys import DEBUGGER_ACTIONS, KEY_ACTIONS, KEYS
from kbdebug.ui.app.loading import LoadingPanel
from kbdebug.ui.app.palette import DebuggerCommands
from kbdebug.ui.app.pane_actions import PaneActions, tab_label
from kbdebug.ui.app.reload_actions import ReloadActions
from kbdebug.ui.app.reloading import file_stamp
from kbdebug.ui.messages import (
    CycleClicked,
    FindingChosen,
    FindingHighlighted,
    FindingsComputed,
    FutureChosen,
    LineChosen,
    LoadProgressed,
    SeekRequested,
    TraceLoaded,
    TraceLoadFailed,
)
from kbdebug.ui.panes.events_view import EventsView
from kbdebug.ui.panes.findings_view import FindingsView
from kbdebug.ui.panes.futures_table import FuturesTable
from kbdebug.ui.panes.lanes import TimelineData, build_timeline, future_span
from kbdebug.ui.panes.rowview import RowView
from kbdebug.ui.panes.source_view import SourceView
from kbdebug.ui.panes.timeline import Timeline
from kbdebug.ui.screens.prompt import PromptScreen

#: Terminal width from which the futures table gets most of the middle row.
WIDE_COLUMNS = 140
#: Columns the futures table keeps beside the source: future, line, stall and phase;
#: on a wide screen also op, issued and done.
FUTURES_MIN = 34
FUTURES_MIN_WIDE = 62

#: What a future's lifecycle event is called, by event kind.
_LIFECYCLE = {
    Kind.ISSUE: "issued",
    Kind.CHAN_REQUEST: "queued for its channel",
    Kind.CHAN_GRANT: "granted its channel",
    Kind.CHAN_RELEASE: "released its channel",
    Kind.COMPLETE: "ready",
    Kind.WAIT_BEGIN: "waited on",
    Kind.WAIT_END: "resolved",
}


#: Seconds between two updates of the progress bar while a trace is opened.
PROGRESS_SECONDS = 0.25


class KbdebugApp(PaneActions, ReloadActions, BreakpointActions, App[int]):
    """Open a trace (in a worker, with a progress bar) and debug it, one key per move."""

    TITLE = "kbdebug"
    # Absolute, so subclasses in other directories (benchmarks, tests) find it too.
    CSS_PATH = Path(__file__).with_name("app.tcss")
    COMMANDS = App.COMMANDS | {DebuggerCommands}
    BINDINGS = [
        Binding(key.key, key.action, key.short, show=key.footer, tooltip=key.long) for key in KEYS
    ]

    # Plain vars: the panes bound to them repaint themselves; an App reactive would
    # repaint the whole screen on every move.
    position = var(0, init=False)
    """Events applied: the current event is ``position - 1`` (0 is before the first)."""

    focused_pe = var(0, init=False)
    """The PE whose source line is shown and whose tl calls n/N step through."""

    selected_future = var(-1, init=False)
    """The future highlighted in the table and on the timeline; f/F follow it."""

    status = var("loading", init=False)
    """The run state in the header: paused, stopped at a breakpoint (which), or why not."""

    breaks = var("", init=False)
    """Summary of the enabled breakpoints, for the header."""

    breakpoint_generation = var(0, init=False)
    """Bumped whenever breakpoints change so the source marks are redrawn."""

    def __init__(
        self,
        path: str | None = None,
        replay: Replay | None = None,
        *,
        rerun: Sequence[str] | None = None,
        opening: Opening | None = None,
    ) -> None:
        """Debug ``replay``, or open the trace at ``path`` in a worker first.

        ``rerun`` is the argv (without ``kbdebug``) of the ``kbdebug run ...`` that
        recorded the trace; when given, a key runs it again and reloads the trace.
        ``opening``, an Opening of ``path`` already under way, is collected instead."""
        if path is None and replay is None:
            raise ValueError("KbdebugApp needs a path or a replay")
        super().__init__()
        self._opening = opening
        self.path = path if path is not None else (replay.path or "trace")
        self.replay = replay
        #: The ``kbdebug`` arguments that record this trace again, if known.
        self.rerun: tuple[str, ...] | None = tuple(rerun) if rerun is not None else None
        #: Why the trace could not be opened (the app then exits with status 2).
        self.load_error: str | None = None
        #: Position saved by ``m``, where ``'`` goes.
        self.mark: int | None = None
        #: The breakpoint ``w`` toggles.
        self.stalled_wait = StalledWait(min_stall=1)
        self.last_search = ""
        self.findings: list[Finding] | None = None
        #: The trace file's (mtime, size) when it was read: ``r`` reloads when it changes.
        self.stamp: tuple[int, int] | None = file_stamp(path)
        #: Whether the source has the whole middle row (W), the futures table hidden.
        self.source_wide = False
        #: Whether a reload or a re-run is under way.
        self.reloading = False
        self._rerun_process: subprocess.Popen | None = None
        self._timeline_data: TimelineData | None = None
        #: Per PE, its tl calls (for n/N): found at the first n, not on the way to the
        #: first screen (at 10M events, three passes over the kind column and ~30 MB).
        self._tl_calls: list[np.ndarray] | None = None

    # --- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        if self.replay is None:
            yield LoadingPanel(self.path, id="loading")
            yield KeyBar(id="keys")
            return
        replay = self.replay
        if self._timeline_data is None:
            self._timeline_data = build_timeline(replay)
        yield StatusHeader(replay, id="header").data_bind(
            KbdebugApp.position, KbdebugApp.focused_pe, KbdebugApp.status, KbdebugApp.breaks
        )
        banner = queries.banner(replay)
        if banner:
            yield Static(escape(banner, 2000), id="banner", markup=False)
        timeline = Timeline(replay, self._timeline_data, id="timeline", pane=1)
        yield timeline.data_bind(
            KbdebugApp.position, KbdebugApp.focused_pe, KbdebugApp.selected_future
        )
        with Horizontal(id="middle"):
            yield SourceView(replay, id="source", pane=2).data_bind(
                KbdebugApp.position, KbdebugApp.focused_pe, KbdebugApp.breakpoint_generation
            )
            futures = FuturesTable(replay, id="futures", pane=3)
            yield futures.data_bind(KbdebugApp.position, KbdebugApp.selected_future)
        with TabbedContent(id="tabs"):
            with TabPane(tab_label(4, "Events"), id="events-tab"):
                yield EventsView(replay, id="events").data_bind(
                    KbdebugApp.position, KbdebugApp.selected_future
                )
            with TabPane(tab_label(5, "Findings"), id="findings-tab"):
                yield FindingsView(id="findings")
        yield KeyBar(id="keys")

    def on_resize(self) -> None:
        self._fit_panes()

    def on_mount(self) -> None:
        self._fit_panes()
        if self.replay is None:
            self.load(self.path)
        else:
            self._opened()

    def _fit_panes(self) -> None:
        """Give the source the width its code needs, leaving the futures table enough for
        its main columns; the rest of a long line scrolls sideways."""
        width = self.size.width
        self.screen.set_class(width >= WIDE_COLUMNS, "-wide")
        self.screen.set_class(self.source_wide, "-source-wide")
        for source in self.query(SourceView):
            futures = FUTURES_MIN_WIDE if width >= WIDE_COLUMNS else FUTURES_MIN
            room = max(width - futures - 1, width // 2)
            source.styles.width = width if self.source_wide else min(source.code_width + 1, room)

    def _opened(self) -> None:
        replay = self.replay
        self._fit_panes()
        self._tl_calls = None
        self.query_one(FindingsView).note = "looking for serialisation…"
        # After the first full screen is drawn: started before, the findings' thread takes
        # the GIL and ~100 MB from that first render of a large trace.
        self.call_after_refresh(self.compute_findings, replay)
        self.position = replay.position
        self.status = "paused at the start: s steps, w then c stops at stalled waits, ? for help"
        self._breakpoints_changed()
        self.query_one(SourceView).focus()

    # --- loading -------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="load")
    def load(self, path: str) -> None:
        """Read and index the trace, posting progress; then TraceLoaded or TraceLoadFailed."""
        worker = get_current_worker()
        opening, self._opening = self._opening, None
        if opening is None or opening.path != path:
            opening = Opening(path)
        try:
            # Progress every PROGRESS_SECONDS, not at each block: each update redraws the
            # screen, and the drawing takes the GIL from the reading threads (a hundred
            # updates slowed a ten-million-event open by 1 s).
            while not opening.wait(PROGRESS_SECONDS):
                if worker.is_cancelled:
                    opening.cancel()
                    return
                stage = "reading" if opening.fraction < 0.7 else "indexing"
                self.post_message(LoadProgressed(opening.fraction, stage))
            replay = opening.result()
        except InterruptedError:
            return
        except (OSError, ValueError) as e:
            self.post_message(TraceLoadFailed(queries.one_line(e, path)))
            return
        self.stamp = opening.stamp
        self.post_message(TraceLoaded(replay))

    def on_load_progressed(self, message: LoadProgressed) -> None:
        for panel in self.query(LoadingPanel):
            panel.fraction = message.fraction
            panel.stage = message.stage

    async def on_trace_loaded(self, message: TraceLoaded) -> None:
        self.replay = message.replay
        await self.recompose()
        self._opened()

    def on_trace_load_failed(self, message: TraceLoadFailed) -> None:
        self.load_error = message.error
        self.exit(return_code=2)

    @work(thread=True, group="findings")
    def compute_findings(self, replay: Replay) -> None:
        """Run the findings rules on a private Replay over the same (read-only) index."""
        analysis = Analysis(Replay(replay.index, replay.path))
        try:
            findings = analysis.findings
            bounds = analysis.bounds
        except Exception as e:  # noqa: BLE001 - a failing rule must not take the debugger down
            self.post_message(FindingsComputed([], f"findings unavailable: {e!r}", replay=replay))
            return
        self.post_message(FindingsComputed(list(findings), bounds=bounds, replay=replay))

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        # A tab the user switches to gets the keyboard, so Enter acts at once.
        if isinstance(self.focused, Tabs):
            for view in event.pane.query(RowView):
                view.focus()

    def on_findings_computed(self, message: FindingsComputed) -> None:
        if message.replay is not None and message.replay is not self.replay:
            return  # computed for a trace since reloaded
        # What to fix first first: the largest estimated saving, as ``report`` lists them.
        self.findings = sorted(message.findings, key=lambda f: (-f.saving, -f.share, f.pe, f.id))
        for header in self.query(StatusHeader):
            header.bounds = message.bounds
        view = self.query_one(FindingsView)
        view.findings = self.findings
        view.note = message.error or "no findings: nothing serialised unexpectedly"
        self._retitle_tabs()
        self._hand_findings()

    # --- state ---------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action not in DEBUGGER_ACTIONS:
            return True
        if self.replay is None:
            return False
        if action in ("future_event", "zoom_future") and self.selected_future < 0:
            return None
        if action == "jump_mark" and self.mark is None:
            return False
        if action == "focus_pe" and self.replay.index.n_pes < 2:
            return False
        return True

    def why_not(self, action: str) -> str:
        """Why ``action`` is turned off right now (check_action said no)."""
        if self.replay is None:
            return "still opening the trace: the keys work once it is loaded"
        if action in ("future_event", "zoom_future"):
            return "no future selected: Tab to the futures table and pick one with the arrows"
        if action == "jump_mark":
            return "no mark: m marks the current position, ' then comes back to it"
        if action == "focus_pe":
            return "only one PE in this trace: [ and ] switch between PEs"
        return f"{action} does not apply here"

    def on_key(self, event: events.Key) -> None:
        """Say why a key did nothing: a debugger key turned off for now, or no key at all.

        Bindings have already run (or been refused) when the event gets here."""
        if self.screen is not self.screen_stack[0]:
            return  # a dialog, the help or the palette has the keyboard
        action = KEY_ACTIONS.get(event.key)
        if action is not None:
            name = action.split("(")[0]
            if not self.check_action(name, ()):
                self._refuse(self.why_not(name))
            return
        if (
            self.replay is not None
            and event.is_printable
            and event.character
            and event.key not in self.screen.active_bindings
        ):
            self._refuse(f"{event.character!r} is not a key here: ? lists them")

    def watch_selected_future(self, old: int, new: int) -> None:
        # Only whether f/F apply can change; refreshing bindings rebuilds the footer.
        if (old < 0) != (new < 0):
            self.refresh_bindings()

    def move_to(self, position: int, status: str = "paused", focus_event: bool = False) -> None:
        """Make ``position`` (events applied) the cursor and update every pane."""
        self.replay.seek(position)
        self._moved(status, focus_event)

    def _moved(self, status: str, focus_event: bool = False) -> None:
        """Show the replay's new position; ``focus_event`` also focuses the current event's PE
        (a jump lands on another PE's event, as gdb switches to the thread that stopped)."""
        replay = self.replay
        self.position = replay.position
        if focus_event and replay.position > 0:
            pe = int(replay.index.columns.pe[replay.position - 1])
            if 0 <= pe < replay.index.n_pes:
                self.focused_pe = pe
        future = queries.future_of_event(replay, replay.position - 1)
        if future >= 0:
            self.selected_future = future
        if replay.position >= replay.n_events and status == "paused":
            status = "at the end of the trace"
            if replay.status != "ok":
                status += f" ({replay.status})"
        elif replay.position == 0 and status == "paused":
            status = "at the start of the trace"
        self.status = status

    def _refuse(self, status: str) -> None:
        self.status = status
        self.bell()

    # --- moving --------------------------------------------------------------------------

    def action_step(self, n: int) -> None:
        replay = self.replay
        if (n > 0 and replay.position >= replay.n_events) or (n < 0 and replay.position == 0):
            self._refuse("cannot step: at the " + ("end" if n > 0 else "start") + " of the trace")
            return
        replay.step(n)
        self._moved("paused")

    def action_next_call(self, direction: int) -> None:
        if self._tl_calls is None:
            self._tl_calls = queries.tl_calls_by_pe(self.replay)
        calls = self._tl_calls[self.focused_pe] if self._tl_calls else np.empty(0, np.int64)
        found = queries.next_event(calls, self.position, reverse=direction < 0)
        if found is None:
            which = "next" if direction > 0 else "previous"
            self._refuse(f"no {which} tl call on PE {self.focused_pe}")
            return
        self.move_to(found + 1, queries.tl_call_text(self.replay, found))

    def action_continue(self, direction: int) -> None:
        replay = self.replay
        if not any(bp.enabled for bp in replay.breakpoints):
            if replay.breakpoints:
                n = len(replay.breakpoints)
                self._refuse(f"no enabled breakpoints ({n} disabled): B, then space, enables one")
            else:
                self._refuse("no breakpoints: w breaks on stalled waits, b on the source line")
            return
        hit = replay.continue_(reverse=direction < 0)
        if hit is None:
            self._moved(
                "no more breakpoint hits: ran to the "
                + ("end" if direction > 0 else "start")
                + " of the trace"
            )
            return
        self._moved(queries.stop_reason(replay, hit), focus_event=True)

    def action_future_event(self, direction: int) -> None:
        future = self.selected_future
        if future < 0:
            self._refuse(self.why_not("future_event"))
            return
        events = np.array(self.replay.future_events(future), dtype=np.int64)
        found = queries.next_event(events, self.position, reverse=direction < 0)
        if found is None:
            which = "later" if direction > 0 else "earlier"
            self._refuse(f"future {future} has no {which} lifecycle event")
            return
        kind = Kind(int(self.replay.index.columns.kind[found]))
        what = _LIFECYCLE.get(kind, kind.name.lower())
        self.move_to(found + 1, f"future {future} {what} (event #{found})", focus_event=True)

    def action_edge(self, direction: int) -> None:
        self.move_to(0 if direction < 0 else self.replay.n_events)

    def action_goto(self) -> None:
        self.push_screen(
            PromptScreen(":", hint="1234 = event #1234   t5000 = cycle 5000"), self._goto
        )

    def _goto(self, text: str | None) -> None:
        if not text:
            return
        try:
            what, value = queries.parse_goto(text)
        except ValueError as e:
            self._refuse(str(e))
            return
        replay = self.replay
        if what == "cycle":
            self.seek_cycle(value)
            return
        if value >= replay.n_events:
            self._refuse(f"no event #{value}: the trace has #0 to #{replay.n_events - 1}")
            return
        self.move_to(value + 1, f"at event #{value}", focus_event=True)

    def action_search(self) -> None:
        self.push_screen(
            PromptScreen(
                "/", self.last_search, hint="wait_begin  pe1  future 12  attention.py:86  t>5000"
            ),
            self._search,
        )

    def _search(self, text: str | None) -> None:
        if not text:
            return
        self.last_search = text
        try:
            found = queries.search(self.replay, text, self.position)
        except ValueError as e:
            self._refuse(str(e))
            return
        if found is None:
            self._refuse(f"no event matches {text!r}")
            return
        self.move_to(found + 1, f"found {text!r} at event #{found}", focus_event=True)

    def action_mark(self) -> None:
        self.mark = self.position
        self.status = f"marked event #{self.position - 1}: ' comes back here"
        self.refresh_bindings()

    def action_jump_mark(self) -> None:
        if self.mark is None:
            self._refuse(self.why_not("jump_mark"))
            return
        target, self.mark = self.mark, self.position
        self.move_to(target, "at the mark (' again goes back)")

    def action_focus_pe(self, delta: int) -> None:
        n = self.replay.index.n_pes
        self.focused_pe = (self.focused_pe + delta) % n
        self.status = f"focused PE {self.focused_pe}"

    def action_zoom(self, direction: int) -> None:
        timeline = self.query_one(Timeline)
        before = (timeline.view_start, timeline.view_span)
        timeline.zoom(2.0 if direction > 0 else 0.5)
        if (timeline.view_start, timeline.view_span) == before:
            self._refuse(
                "the timeline is zoomed in as far as it goes"
                if direction > 0
                else "the timeline already shows the whole trace: + zooms in"
            )
        else:
            self._timeline_moved(timeline)

    def action_zoom_future(self) -> None:
        span = future_span(self.replay, self.selected_future)
        if span is None:
            self._refuse(self.why_not("future_event"))
            return
        self.query_one(Timeline).fit(span[1], span[2])

    def action_zoom_all(self) -> None:
        self.query_one(Timeline).show_all()

    def action_pan(self, direction: int) -> None:
        timeline = self.query_one(Timeline)
        before = timeline.view_start
        timeline.pan(0.25 * direction)
        if timeline.view_start == before:
            if timeline.view_span >= timeline.data.end_time:
                self._refuse("the timeline shows the whole trace: + zooms in, then < > pan")
            else:
                self._refuse(f"the timeline is at the {'start' if direction < 0 else 'end'}")
        else:
            self._timeline_moved(timeline)

    def _timeline_moved(self, timeline: Timeline) -> None:
        # Replace what an earlier zoom or pan said (at the start, as far as it goes), which
        # is no longer true; leave any other status (a stop's reason) alone.
        if self.status.startswith("the timeline"):
            start = max(int(timeline.view_start), 0)
            end = min(int(timeline.view_start + timeline.view_span), timeline.data.end_time)
            self.status = f"the timeline shows cycles {start:,} to {end:,}"

    # --- messages from the panes ---------------------------------------------------------

    def on_cycle_clicked(self, message: CycleClicked) -> None:
        self.seek_cycle(message.cycle)

    def seek_cycle(self, cycle: int) -> None:
        """Go to just after the last event at or before ``cycle``."""
        self.replay.seek_time(cycle)
        self._moved(queries.seek_cycle_text(self.replay, cycle))

    def on_seek_requested(self, message: SeekRequested) -> None:
        self.move_to(message.event + 1, f"at event #{message.event}", focus_event=True)

    def on_future_chosen(self, message: FutureChosen) -> None:
        self.selected_future = message.future
        self.status = queries.future_text(self.replay, message.future)

    def on_finding_chosen(self, message: FindingChosen) -> None:
        self.jump_to_finding(message.finding)

    def on_finding_highlighted(self, message: FindingHighlighted) -> None:
        finding = message.finding
        self.status = f"{finding.message} → {finding.suggestion} (Enter goes there)"

    def on_line_chosen(self, message: LineChosen) -> None:
        self.toggle_line_breakpoint(message.file, message.line)

    def jump_to_finding(self, finding: Finding) -> None:
        """Go to the first event of ``finding`` on its source line (else its first event)."""
        event = queries.finding_event(self.replay, finding)
        if event is None:
            self._refuse(f"{finding.rule} has no events to go to")
            return
        self.move_to(
            event + 1,
            f"{finding.rule} {finding.title}: {finding.message}",
            focus_event=True,
        )
