"""DebuggerApp: what both modes of the app share: opening, keys, palette, help and moving.

The single-run mode (``KbdebugApp``) and the compare mode (``CompareApp``) are
subclasses that say what they show and where the cursor goes; the keys, the key
bar, the command palette, ``?``, the refusals, the loading worker, the findings
worker and the status messages of stepping, continuing, zooming and panning are
written here once.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual import events, work
from textual.app import App
from textual.reactive import var
from textual.worker import get_current_worker

from kbdebug.analysis.findings import Finding
from kbdebug.analysis.model import PEBound
from kbdebug.replay import Replay
from kbdebug.replay.opening import Opening
from kbdebug.ui import queries
from kbdebug.ui.app.breakpoint_actions import BreakpointActions
from kbdebug.ui.app.chain_actions import ChainActions
from kbdebug.ui.app.keys import Key, bindings, key_actions, key_display, needs_trace
from kbdebug.ui.app.loading import LoadingPanel
from kbdebug.ui.app.palette import DebuggerCommands
from kbdebug.ui.app.stepping_actions import SteppingActions
from kbdebug.ui.app.value_actions import ValueActions
from kbdebug.ui.messages import (
    AnalysisComputed,
    LineChosen,
    LoadProgressed,
    PeChosen,
    TraceLoadFailed,
    TracesLoaded,
)
from kbdebug.ui.panes.mesh_view import MeshView
from kbdebug.ui.panes.timeline import Timeline
from kbdebug.ui.screens.help_screen import HelpScreen

#: Seconds between two updates of the progress bar while a trace is opened.
PROGRESS_SECONDS = 0.25

#: Said in the help after the keys, in both modes.
TAB_HELP = ("tab", "Move the keyboard focus between panes (arrows scroll, Enter acts)")


class DebuggerApp(SteppingActions, ChainActions, BreakpointActions, ValueActions, App[int]):
    """The app's frame and its moves over the focused run's ``replay``.

    A mode sets ``KEYS`` (its bindings are made from them) and ``HELP_INTRO``, and
    provides ``replay`` (the run the keys move, None while opening), ``findings``
    (that run's, None while computed) and the hooks below marked "a mode's".
    """

    COMMANDS = App.COMMANDS | {DebuggerCommands}
    #: The mode's keys: its bindings, key bar, help and palette all come from them.
    KEYS: tuple[Key, ...] = ()
    #: What ``?`` says before the keys.
    HELP_INTRO = ""

    # Plain vars: the panes bound to them repaint themselves; an App reactive would
    # repaint the whole screen on every move.
    focused_pe = var(0, init=False)
    """The PE whose source line is shown and whose tl calls n, s, o and t step through."""

    status = var("loading", init=False)
    """What the last move did or why it could not: paused, stopped at a breakpoint..."""

    breaks = var("", init=False)
    """Summary of the focused run's enabled breakpoints, for the header."""

    breakpoint_generation = var(0, init=False)
    """Bumped whenever breakpoints change so the source marks are redrawn."""

    def __init_subclass__(cls, **kwargs) -> None:
        # Before Textual's own hook, which reads the class's BINDINGS.
        if "KEYS" in cls.__dict__:
            cls.BINDINGS = bindings(cls.KEYS)
        super().__init_subclass__(**kwargs)

    def __init__(self, paths: Sequence[str], opening: Opening | None = None) -> None:
        """Debug the traces at ``paths`` (opened in a worker unless a mode has them
        open already); ``opening``, an Opening of the first path under way, is
        collected instead of opening it again."""
        super().__init__()
        self._paths = tuple(paths)
        self._opening = opening
        #: Why a trace could not be opened (the app then exits with status 2).
        self.load_error: str | None = None
        #: How many times the findings have been computed and shown (a reload counts
        #: again): what a test waits for before it reads the panes.
        self.analyses_shown = 0
        self._key_actions = key_actions(self.KEYS)
        self._needs_trace = needs_trace(self.KEYS)

    @property
    def opening(self) -> Opening | None:
        """The Opening handed to the app and not yet collected by the load worker."""
        return self._opening

    # --- a mode's --------------------------------------------------------------------------

    def run_prefix(self) -> str:
        """What names the focused run in a status message ("A: " in compare, else "")."""
        return ""

    def in_run(self, text: str) -> str:
        """``text`` about the focused run, naming it when there are two."""
        return self.run_prefix() + text

    def focused_timeline(self) -> Timeline:
        """The timeline the zoom and pan keys move."""
        raise NotImplementedError

    def timeline_moved(self, timeline: Timeline, follow: bool = False) -> None:
        """The focused timeline's window changed (``follow``: keep the cursor in view)."""

    def _show_place(self, status: str) -> str:
        """Show the focused run's new position in every pane; the status to say."""
        raise NotImplementedError

    def _set_replays(self, replays: list[Replay], stamps: list) -> None:
        """The traces opened by the load worker (in the order of ``paths``)."""
        raise NotImplementedError

    def _opened(self) -> None:
        """The traces are open and the screen composed: start the findings."""
        # After the first full screen is drawn: started before, the findings' thread takes
        # the GIL and ~100 MB from that first render of a large trace.
        self.call_after_refresh(self.compute_findings, self._analysed())

    def _analysed(self) -> tuple[Replay, ...]:
        """The replays the findings are computed for (a reload replaces them)."""
        raise NotImplementedError

    def _analyse(self, replays: tuple[Replay, ...]) -> object:
        """Compute the findings of ``replays`` (on a thread, on private replays)."""
        raise NotImplementedError

    def _show_analysis(self, result: object | None, error: str | None) -> None:
        """Show what ``_analyse`` returned (None and ``error`` if it raised)."""
        raise NotImplementedError

    def help_panes(self) -> list[tuple[str, type]]:
        """(section title, widget class) of each pane whose own keys the help lists."""
        return []

    def palette_pane_actions(self) -> list[tuple[str, str, str]]:
        """(title, key, action) of the panes' own keys, for the command palette."""
        return []

    # --- opening ---------------------------------------------------------------------------

    def load_label(self, k: int) -> str:
        """How the progress bar names the ``k``-th trace while it is read."""
        return ""

    @work(thread=True, exclusive=True, group="load")
    def load(self) -> None:
        """Read and index the traces one after the other, posting progress; then
        TracesLoaded, or TraceLoadFailed naming the one that failed."""
        worker = get_current_worker()
        replays, stamps = [], []
        n = len(self._paths)
        for k, path in enumerate(self._paths):
            opening, self._opening = self._opening, None
            if opening is None or opening.path != path:
                opening = Opening(path)
            try:
                # Progress every PROGRESS_SECONDS, not at each block: each update redraws
                # the screen, and the drawing takes the GIL from the reading threads (a
                # hundred updates slowed a ten-million-event open by 1 s).
                while not opening.wait(PROGRESS_SECONDS):
                    if worker.is_cancelled:
                        opening.cancel()
                        return
                    stage = "reading" if opening.fraction < 0.7 else "indexing"
                    stage += self.load_label(k)
                    self.post_message(LoadProgressed((k + opening.fraction) / n, stage))
                replays.append(opening.result())
            except InterruptedError:
                return
            except (OSError, ValueError) as e:
                self.post_message(TraceLoadFailed(queries.one_line(e, path)))
                return
            stamps.append(opening.stamp)
        self.post_message(TracesLoaded(replays, stamps))

    def on_load_progressed(self, message: LoadProgressed) -> None:
        for panel in self.query(LoadingPanel):
            panel.fraction = message.fraction
            panel.stage = message.stage

    async def on_traces_loaded(self, message: TracesLoaded) -> None:
        self._set_replays(message.replays, message.stamps)
        await self.recompose()
        self._opened()

    def on_trace_load_failed(self, message: TraceLoadFailed) -> None:
        self.load_error = message.error
        self.exit(return_code=2)

    # --- findings, in a worker -------------------------------------------------------------

    @work(thread=True, group="findings")
    def compute_findings(self, replays: tuple[Replay, ...]) -> None:
        """Run the findings rules for ``replays``, off the screen's thread."""
        try:
            result = self._analyse(replays)
        except Exception as e:  # noqa: BLE001 - a failing rule must not take the debugger down
            self.post_message(AnalysisComputed(None, f"findings unavailable: {e!r}", replays))
            return
        self.post_message(AnalysisComputed(result, None, replays))

    def on_analysis_computed(self, message: AnalysisComputed) -> None:
        if message.replays != self._analysed():
            return  # computed for a trace since reloaded
        self._show_analysis(message.result, message.error)
        self._hand_findings()
        self.analyses_shown += 1

    # --- what applies now ------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action not in self._needs_trace:
            return True
        if self.replay is None:
            return False
        if action == "focus_pe" and self.replay.index.n_pes < 2:
            return False
        return True

    def why_not(self, action: str) -> str:
        """Why ``action`` is turned off right now (check_action said no)."""
        if self.replay is None:
            return "still opening the trace: the keys work once it is loaded"
        if action == "focus_pe":
            return self.in_run("only one PE in this trace: [ and ] switch between PEs")
        return f"{action} does not apply here"

    def on_key(self, event: events.Key) -> None:
        """Say why a key did nothing: a debugger key turned off for now, or no key at all.

        Bindings have already run (or been refused) when the event gets here."""
        if self.screen is not self.screen_stack[0]:
            return  # a dialog, the help or the palette has the keyboard
        action = self._key_actions.get(event.key)
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

    def _refuse(self, status: str) -> None:
        self.status = status
        self.bell()

    # --- moving ----------------------------------------------------------------------------

    def move_to(self, position: int, status: str = "paused", focus_event: bool = False) -> None:
        """Make ``position`` (events applied) the focused run's cursor; update every pane."""
        self.replay.seek(position)
        self._moved(status, focus_event)

    def _moved(self, status: str, focus_event: bool = False) -> None:
        """Show the focused run's new position; ``focus_event`` also focuses the current
        event's PE (a jump lands on another PE's event, as gdb switches to the thread
        that stopped)."""
        replay = self.replay
        if focus_event and replay.position > 0:
            pe = int(replay.index.columns.pe[replay.position - 1])
            if 0 <= pe < replay.index.n_pes:
                self.focused_pe = pe
        if replay.position >= replay.n_events and status == "paused":
            status = "at the end of the trace"
            if replay.status != "ok":
                status += f" ({replay.status})"
        elif replay.position == 0 and status == "paused":
            status = "at the start of the trace"
        self.status = self._show_place(self.in_run(status))

    def action_step(self, n: int) -> None:
        replay = self.replay
        if (n > 0 and replay.position >= replay.n_events) or (n < 0 and replay.position == 0):
            end = "end" if n > 0 else "start"
            self._refuse(self.in_run(f"cannot step: at the {end} of the trace"))
            return
        replay.step(n)
        self._moved("paused")

    def action_continue(self, direction: int) -> None:
        replay = self.replay
        if not any(bp.enabled for bp in replay.breakpoints):
            if replay.breakpoints:
                n = len(replay.breakpoints)
                why = f"no enabled breakpoints ({n} disabled): B, then space, enables one"
            else:
                why = "no breakpoints: w breaks on stalled waits, b on the source line"
            self._refuse(self.in_run(why))
            return
        hit = replay.continue_(reverse=direction < 0)
        if hit is None:
            end = "end" if direction > 0 else "start"
            self._moved(f"no more breakpoint hits: ran to the {end} of the trace")
            return
        self._moved(queries.stop_reason(replay, hit), focus_event=True)

    def action_edge(self, direction: int) -> None:
        self.move_to(0 if direction < 0 else self.replay.n_events)

    def action_focus_pe(self, delta: int) -> None:
        n = self.replay.index.n_pes
        self.focused_pe = (self.focused_pe + delta) % n
        self.status = f"focused PE {self.focused_pe}"

    # --- the mesh ----------------------------------------------------------------------------

    def show_mesh(self, bounds: list[PEBound] | None) -> None:
        """Show the focused run's PEs in the mesh pane, ends and efficiencies from
        ``bounds`` (its analysis's; None while it is computed)."""
        for view in self.query(MeshView):
            view.show(self.replay, bounds)

    def mesh_status(self) -> str:
        """What the mesh pane says when it gets the keyboard."""
        view = self.query_one(MeshView)
        return self.in_run(f"{view.summary()}: o sorts, Enter focuses a PE")

    def action_focus_mesh(self) -> None:
        """Give the mesh pane the keyboard."""
        self.query_one(MeshView).focus()
        self.status = self.mesh_status()

    def on_pe_chosen(self, message: PeChosen) -> None:
        view = self.query_one(MeshView)
        self.focused_pe = message.pe
        self.status = self.in_run(f"focused PE {message.pe}: {view.describe(message.pe)}")

    def seek_cycle(self, cycle: int) -> None:
        """Go to just after the last event at or before ``cycle``."""
        self.replay.seek_time(cycle)
        self._moved(queries.seek_cycle_text(self.replay, cycle))

    def jump_to_finding(self, finding: Finding) -> None:
        """Go to the first event of ``finding`` on its source line (else its first event)."""
        event = queries.finding_event(self.replay, finding)
        if event is None:
            self._refuse(self.in_run(f"{finding.rule} has no events to go to"))
            return
        self.move_to(
            event + 1, f"{finding.rule} {finding.title}: {finding.message}", focus_event=True
        )

    def on_line_chosen(self, message: LineChosen) -> None:
        self.toggle_line_breakpoint(message.file, message.line)

    # --- the timeline's window -------------------------------------------------------------

    def action_zoom(self, direction: int) -> None:
        timeline = self.focused_timeline()
        before = (timeline.view_start, timeline.view_span)
        timeline.zoom(2.0 if direction > 0 else 0.5)
        if (timeline.view_start, timeline.view_span) == before:
            self._refuse(
                "the timeline is zoomed in as far as it goes"
                if direction > 0
                else "the timeline already shows the whole trace: + zooms in"
            )
            return
        self.timeline_moved(timeline)
        self._say_window(timeline)

    def action_zoom_all(self) -> None:
        timeline = self.focused_timeline()
        timeline.show_all()
        self.timeline_moved(timeline)

    def action_pan(self, direction: int) -> None:
        timeline = self.focused_timeline()
        before = timeline.view_start
        timeline.pan(0.25 * direction)
        if timeline.view_start == before:
            if timeline.view_span >= timeline.axis_end:
                self._refuse("the timeline shows the whole trace: + zooms in, then < > pan")
            else:
                self._refuse(f"the timeline is at the {'start' if direction < 0 else 'end'}")
            return
        self.timeline_moved(timeline)
        self._say_window(timeline)

    def _say_window(self, timeline: Timeline) -> None:
        # Replace what an earlier zoom or pan said (at the start, as far as it goes), which
        # is no longer true; leave any other status (a stop's reason) alone.
        if self.status.startswith("the timeline"):
            start = max(int(timeline.view_start), 0)
            end = min(int(timeline.view_start + timeline.view_span), timeline.axis_end)
            self.status = f"the timeline shows cycles {start:,} to {end:,}"

    # --- help and palette ------------------------------------------------------------------

    def action_help(self) -> None:
        keys = [(key_display(self, key), key.long) for key in self.KEYS]
        keys.append(TAB_HELP)
        panes = [(title, self.pane_keys(widget)) for title, widget in self.help_panes()]
        self.push_screen(
            HelpScreen(
                keys,
                intro=self.HELP_INTRO,
                panes=[(title, [(k, text) for k, text, _ in pk]) for title, pk in panes],
            )
        )

    def pane_keys(self, widget: type) -> list[tuple[str, str, str]]:
        """(key, what it does, action) of the keys pane class ``widget`` has of its own."""
        first = "Scroll lanes" if issubclass(widget, Timeline) else "Move the highlighted row"
        out = [("↑↓", first, "")]
        for binding in widget.BINDINGS:
            if binding.show:
                key = binding.key_display or self.get_key_display(binding)
                out.append((key, binding.tooltip or binding.description, binding.action))
        return out

    def palette_actions(self) -> list[tuple[str, str, str]]:
        """(title, key, action) of every key of the mode and every pane's own keys, for
        the command palette."""
        actions = [
            (key.long, key_display(self, key), key.action)
            for key in self.KEYS
            if key.action != "command_palette"
            and (self.replay is not None or key.action.split("(")[0] not in self._needs_trace)
        ]
        if self.replay is not None:
            actions += self.palette_pane_actions()
        return actions

    async def run_key_action(self, action: str) -> None:
        """Run a key's action from the palette, or say why it does not apply now."""
        name = action.split("(")[0]
        if not self.check_action(name, ()):
            self._refuse(self.why_not(name))
            return
        await self.run_action(action)

    def palette_findings(self) -> list[Finding]:
        """The focused run's findings, each a palette command that goes to it."""
        return list(self.findings or [])
