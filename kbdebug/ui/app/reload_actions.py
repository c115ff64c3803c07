"""The single-run mode's reload (r) and re-run (R): the record, look, fix, look-again loop."""

from __future__ import annotations

import subprocess
import time

from textual import work

from kbdebug.replay import Replay
from kbdebug.safe_text import escape
from kbdebug.ui import queries
from kbdebug.ui.app.reloading import OutputTail, Place, command_text, file_stamp, rerun_argv
from kbdebug.ui.messages import ReloadFailed, RerunProgressed, TraceReloaded
from kbdebug.ui.panes.timeline import Timeline


class ReloadActions:
    """KbdebugApp's reload and re-run (a mixin: the app's state is the app's).

    Both read the new trace in a thread and swap it in only once it is open, so
    a failure leaves the old trace on screen with the reason in the status line.
    """

    def action_reload(self) -> None:
        """Read the trace again if its file changed since it was read."""
        if self.reloading:
            self._refuse("already reloading: wait for it to finish")
            return
        stamp = file_stamp(self.path)
        if stamp is None:
            self._refuse(f"cannot reload: {self.path} cannot be read")
            return
        if stamp == self.stamp:
            again = ", R re-runs it" if self.rerun is not None else ""
            self.status = f"unchanged: the trace file is as it was read{again}"
            return
        self.reloading = True
        self.status = f"reloading {self.path}…"
        self.reload_trace(self.path, "reloaded")

    @work(thread=True, exclusive=True, group="reload")
    def reload_trace(self, path: str, how: str) -> None:
        """Open ``path`` again; then TraceReloaded, or ReloadFailed (the old trace stays)."""
        stamp = file_stamp(path)
        try:
            replay = Replay.open(path)
        except (OSError, ValueError) as e:
            self.post_message(ReloadFailed(f"cannot reload: {queries.one_line(e, path)}"))
            return
        self.post_message(TraceReloaded(replay, stamp, how))

    def action_rerun(self) -> None:
        """Run the ``kbdebug run`` that recorded the trace again, then reload it."""
        if self.rerun is None:
            self._refuse(
                "R re-runs a trace opened by kbdebug run ... --open; "
                "r reloads the file when it changes"
            )
            return
        if self.reloading:
            self._refuse("already re-running: wait for it to finish")
            return
        self.reloading = True
        self.status = f"re-running {command_text(self.rerun)}…"
        self.rerun_trace(rerun_argv(self.rerun))

    @work(thread=True, exclusive=True, group="reload")
    def rerun_trace(self, argv: list[str]) -> None:
        """Run ``argv``, posting its last output line as it goes; then reload the trace,
        or ReloadFailed with the last line it printed."""
        start = time.monotonic()
        tail = OutputTail()
        try:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError as e:
            self.post_message(ReloadFailed(f"re-run failed to start: {e.strerror or e}"))
            return
        self._rerun_process = process
        with process:
            while chunk := process.stdout.read1(4096):
                tail.feed(chunk)
                self.post_message(RerunProgressed(tail.last_line, time.monotonic() - start))
        self._rerun_process = None
        if process.returncode != 0:
            line = tail.last_line or f"exit status {process.returncode}"
            self.post_message(ReloadFailed(f"re-run failed (kept the old trace): {line}"))
            return
        how = f"re-ran in {time.monotonic() - start:.1f} s and reloaded"
        self.call_from_thread(self.reload_trace, self.path, how)

    def on_rerun_progressed(self, message: RerunProgressed) -> None:
        if self.reloading:
            line = f": {escape(message.line, 200)}" if message.line else ""
            self.status = f"re-running ({message.seconds:.0f} s){line}"

    def on_reload_failed(self, message: ReloadFailed) -> None:
        self.reloading = False
        self._refuse(message.error)

    async def on_trace_reloaded(self, message: TraceReloaded) -> None:
        """Show the new trace where the old one was: the same event or cycle, the same
        breakpoints, PE, future, pane and timeline window."""
        old = self.replay
        place = Place.of(old)
        focused = self.focused.id if self.focused is not None else None
        timeline = self.query_one(Timeline)
        window = (timeline.view_start, timeline.view_span)
        new = message.replay
        new.breakpoints = old.breakpoints
        self.replay, self.stamp = new, message.stamp
        self.findings, self._timeline_data, self.mark = None, None, None
        self._hand_findings()  # the old trace's findings name the old trace's events
        await self.recompose()
        self._opened()
        position, where = place.position_in(new)
        self.focused_pe = min(self.focused_pe, max(new.index.n_pes - 1, 0))
        if self.selected_future >= new.n_futures:
            self.selected_future = -1
        self.move_to(position)
        timeline = self.query_one(Timeline)
        if window[1] < float(max(old.end_time, 1) + 1):
            timeline.view_span, timeline.view_start = window[1], window[0]
        if focused is not None:
            for widget in self.query(f"#{focused}"):
                widget.focus()
        self.reloading = False
        self.status = f"{message.how}: {new.n_events:,} events, {where}"

    def on_unmount(self) -> None:
        process = self._rerun_process
        if process is not None and process.poll() is None:
            process.kill()
