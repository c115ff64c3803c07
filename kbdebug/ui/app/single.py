"""KbdebugApp: the app's single-run mode: one trace, its panes, and the keys only it has."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import var
from textual.widgets import Static, TabbedContent, TabPane, Tabs

from emulator.trace.schema import Kind
from kbdebug.analysis import Analysis
from kbdebug.analysis.findings import Finding
from kbdebug.replay import Replay, StalledWait
from kbdebug.replay.opening import Opening
from kbdebug.safe_text import escape
from kbdebug.ui import queries
from kbdebug.ui.app.base import DebuggerApp
from kbdebug.ui.app.header import StatusHeader
from kbdebug.ui.app.keybar import KeyBar
from kbdebug.ui.app.keys import KEYS
from kbdebug.ui.app.loading import LoadingPanel
from kbdebug.ui.app.pane_actions import PaneActions
from kbdebug.ui.app.reload_actions import ReloadActions
from kbdebug.ui.app.reloading import file_stamp
from kbdebug.ui.messages import (
    CycleClicked,
    FindingChosen,
    FindingHighlighted,
    FutureChosen,
    SeekRequested,
)
from kbdebug.ui.panes.events_view import EventsView
from kbdebug.ui.panes.findings_view import FindingsView
from kbdebug.ui.panes.futures_table import FuturesTable
from kbdebug.ui.panes.lanes import TimelineData, build_timeline, future_span
from kbdebug.ui.panes.mesh_view import MeshView
from kbdebug.ui.panes.rowview import RowView
from kbdebug.ui.panes.source_view import SourceView
from kbdebug.ui.panes.styles import pane_title
from kbdebug.ui.panes.timeline import Timeline
from kbdebug.ui.screens.help_screen import INTRO
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


class KbdebugApp(PaneActions, ReloadActions, DebuggerApp):
    """Open a trace (in a worker, with a progress bar) and debug it, one key per move."""

    TITLE = "kbdebug"
    # Absolute, so subclasses in other directories (benchmarks, tests) find it too.
    CSS_PATH = Path(__file__).with_name("app.tcss")
    KEYS = KEYS
    HELP_INTRO = INTRO

    # Plain vars: the panes bound to them repaint themselves; an App reactive would
    # repaint the whole screen on every move.
    position = var(0, init=False)
    """Events applied: the current event is ``position - 1`` (0 is before the first)."""

    selected_future = var(-1, init=False)
    """The future highlighted in the table and on the timeline; f/F follow it."""

    kernel_view_at = var(("", -1, -1), init=False)
    """("", PE, position) where that PE's current stop is seen from its kernel (n, o or
    t stepped over a helper call): the source shows the kernel's calling line there."""

    def __init__(
        self,
        path: str | None = None,
        replay: Replay | None = None,
        *,
        rerun: Sequence[str] | None = None,
        opening: Opening | None = None,
        open_at: tuple[int, str] | None = None,
    ) -> None:
        """Debug ``replay``, or open the trace at ``path`` in a worker first.

        ``rerun`` is the argv (without ``kbdebug``) of the ``kbdebug run ...`` that
        recorded the trace; when given, a key runs it again and reloads the trace.
        ``opening``, an Opening of ``path`` already under way, is collected instead.
        ``open_at`` (position, why): where the app opens, however the trace is opened,
        and the status says why (``stopped at the first wrong block O[16:32, :] ...``)."""
        if path is None and replay is None:
            raise ValueError("KbdebugApp needs a path or a replay")
        #: The trace file, as given.
        self.path = path if path is not None else (replay.path or "trace")
        super().__init__([self.path], opening)
        self.replay = replay
        #: The ``kbdebug`` arguments that record this trace again, if known.
        self.rerun: tuple[str, ...] | None = tuple(rerun) if rerun is not None else None
        #: Position saved by ``m``, where ``'`` goes.
        self.mark: int | None = None
        #: The breakpoint ``w`` toggles.
        self.stalled_wait = StalledWait(min_stall=1)
        self.last_search = ""
        #: The findings, biggest saving first; None while they are computed.
        self.findings: list[Finding] | None = None
        #: The trace file's (mtime, size) when it was read: ``r`` reloads when it changes.
        self.stamp: tuple[int, int] | None = file_stamp(path)
        #: Whether the source has the whole middle row (W), the futures table hidden.
        self.source_wide = False
        #: Whether a reload or a re-run is under way.
        self.reloading = False
        self._rerun_process: subprocess.Popen | None = None
        self._timeline_data: TimelineData | None = None
        self._open_at = open_at

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
                KbdebugApp.position,
                KbdebugApp.focused_pe,
                KbdebugApp.breakpoint_generation,
                KbdebugApp.kernel_view_at,
            )
            futures = FuturesTable(replay, id="futures", pane=3)
            yield futures.data_bind(
                KbdebugApp.position, KbdebugApp.selected_future, KbdebugApp.focused_pe
            )
        with TabbedContent(id="tabs"):
            with TabPane(pane_title(4, "Events", False), id="events-tab"):
                yield EventsView(replay, id="events").data_bind(
                    KbdebugApp.position, KbdebugApp.selected_future
                )
            with TabPane(pane_title(5, "Findings", False), id="findings-tab"):
                yield FindingsView(replay.index.n_pes, id="findings")
            with TabPane(pane_title(6, "Mesh", False), id="mesh-tab"):
                yield MeshView(replay, id="mesh").data_bind(KbdebugApp.focused_pe)
        yield KeyBar(id="keys")

    def on_resize(self) -> None:
        self._fit_panes()

    def on_mount(self) -> None:
        self._fit_panes()
        if self.replay is None:
            self.load()
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
        self.query_one(FindingsView).note = "looking for serialisation…"
        super()._opened()
        self.position = replay.position
        self.status = "paused at the start: n next, s step, w then c stops at stalled waits, ? help"
        if self._open_at is not None:  # once: a reload keeps the user's place instead
            (position, why), self._open_at = self._open_at, None
            self.move_to(min(max(position, 0), replay.n_events), f"stopped at {why}", True)
        self._breakpoints_changed()
        self.query_one(SourceView).focus()

    # --- what the base asks of a mode ----------------------------------------------------

    def _set_replays(self, replays: list[Replay], stamps: list) -> None:
        self.replay, self.stamp = replays[0], stamps[0]

    def _analysed(self) -> tuple[Replay, ...]:
        return (self.replay,)

    def _analyse(self, replays: tuple[Replay, ...]) -> tuple:
        """The hazards and findings, bounds and the launch's efficiency, on a private
        Replay over the same (read-only) index."""
        analysis = Analysis(Replay(replays[0].index, replays[0].path))
        found = list(analysis.findings)
        return found, analysis.bounds, analysis.launch_efficiency, list(analysis.hazards)

    def _show_analysis(self, result: object | None, error: str | None) -> None:
        findings, bounds, launch, hazards = result if result is not None else ([], None, None, [])
        # Hazards (wrong results) before the findings (slow ones), as report lists them.
        self.findings = [*hazards, *queries.biggest_saving_first(findings)]
        for header in self.query(StatusHeader):
            header.launch = launch
            header.bounds = bounds
        view = self.query_one(FindingsView)
        view.n_pes = self.replay.index.n_pes
        view.findings = self.findings
        view.note = error or (
            "no findings in what ran: the run did not complete"
            if queries.incomplete(self.replay) is not None
            else "no findings: nothing serialised unexpectedly"
        )
        self._retitle_tabs()
        self.show_mesh(bounds if bounds is not None else [])  # failed: no efficiency known

    def finding_runs(self) -> list[tuple[Replay, list[Finding] | None]]:
        return [(self.replay, self.findings)]

    def source_line(self) -> tuple[str, int] | None:
        return self.query_one(SourceView).cursor_line

    def focused_timeline(self) -> Timeline:
        return self.query_one(Timeline)

    def _show_place(self, status: str) -> str:
        replay = self.replay
        self.position = replay.position
        future = queries.future_of_event(replay, replay.position - 1)
        if future >= 0:
            self.selected_future = future
        return status

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        # The mesh lists every PE, the findings say their advice: their tabs take rows
        # from the timeline and the source.
        self.screen.set_class(event.pane.id == "mesh-tab", "-mesh")
        self.screen.set_class(event.pane.id == "findings-tab", "-findings")
        # A tab the user switches to gets the keyboard, so Enter acts at once.
        if isinstance(self.focused, Tabs):
            for view in event.pane.query(RowView):
                view.focus()

    # --- state ---------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        applies = super().check_action(action, parameters)
        if not applies or self.replay is None:
            return applies
        if action in ("future_event", "zoom_future") and self.selected_future < 0:
            return None
        if action == "jump_mark" and self.mark is None:
            return False
        return True

    def why_not(self, action: str) -> str:
        if self.replay is not None and action in ("future_event", "zoom_future"):
            return "no future selected: Tab to the futures table and pick one with the arrows"
        if self.replay is not None and action == "jump_mark":
            return "no mark: m marks the current position, ' then comes back to it"
        return super().why_not(action)

    def watch_selected_future(self, old: int, new: int) -> None:
        # Only whether f/F apply can change; refreshing bindings rebuilds the footer.
        if (old < 0) != (new < 0):
            self.refresh_bindings()

    # --- moving --------------------------------------------------------------------------

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
        found_text = f"found {text!r} at event #{found}: ; and , go to the next and previous"
        self.move_to(found + 1, found_text, focus_event=True)

    def action_search_again(self, direction: int) -> None:
        text = self.last_search
        if not text:
            self._refuse("no search yet: / searches the events, then ; and , repeat it")
            return
        try:
            found = queries.search(self.replay, text, self.position, reverse=direction < 0)
        except ValueError as e:
            self._refuse(str(e))
            return
        if found is None:
            self._refuse(f"no event matches {text!r}")
            return
        which = "next" if direction > 0 else "previous"
        self.move_to(found + 1, f"{which} match of {text!r}: event #{found}", focus_event=True)

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

    def action_zoom_future(self) -> None:
        span = future_span(self.replay, self.selected_future)
        if span is None:
            self._refuse(self.why_not("future_event"))
            return
        self.query_one(Timeline).fit(span[1], span[2])

    # --- messages from the panes ---------------------------------------------------------

    def on_cycle_clicked(self, message: CycleClicked) -> None:
        self.seek_cycle(message.cycle)

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
