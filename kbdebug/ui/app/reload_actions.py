"""The single-run mode's reload (r), re-run (R) and compare with the previous run (D):
the record, look, fix, look-again loop."""

from __future__ import annotations

import os
import subprocess
import time

from textual import work
from textual.app import SuspendNotSupported

from kbdebug.replay import Replay
from kbdebug.safe_text import escape
from kbdebug.ui import queries
from kbdebug.ui.app.reloading import (
    OutputTail,
    Place,
    command_text,
    compare_argv,
    file_stamp,
    previous_path,
    rerun_argv,
    stage_previous,
)
from kbdebug.ui.messages import ReloadFailed, RerunProgressed, TraceReloaded
from kbdebug.ui.panes.timeline import Timeline


class ReloadActions:
    """KbdebugApp's reload and re-run (a mixin: the app's state is the app's).

    Both read the new trace in a thread and swap it in only once it is open, so
    a failure leaves the old trace on screen with the reason in the status line.
    A re-run keeps the trace it records over beside it (``x.prev.kbt``), which ``D``
    compares with the new one.
    """

    #: The trace the last re-run recorded over, kept beside it; None before a re-run.
    previous_trace: str | None = None

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
            # Before the run starts: it replaces the trace by a rename once it has ended.
            staged = stage_previous(self.path)
        except OSError:
            staged = None  # a read-only folder: the re-run still goes, D has nothing to show
        try:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError as e:
            if staged is not None:
                os.unlink(staged)
            self.post_message(ReloadFailed(f"re-run failed to start: {e.strerror or e}"))
            return
        self._rerun_process = process
        with process:
            while chunk := process.stdout.read1(4096):
                tail.feed(chunk)
                self.post_message(RerunProgressed(tail.last_line, time.monotonic() - start))
        self._rerun_process = None
        if process.returncode != 0:
            if staged is not None:
                os.unlink(staged)
            line = tail.last_line or f"exit status {process.returncode}"
            self.post_message(ReloadFailed(f"re-run failed (kept the old trace): {line}"))
            return
        how = f"re-ran in {time.monotonic() - start:.1f} s and reloaded"
        if staged is not None:
            try:
                kept = previous_path(self.path, self.previous_trace)
                os.replace(staged, kept)
            except OSError:
                os.unlink(staged)
            else:
                self.previous_trace = kept
                how += f" (previous run kept as {kept}: D compares)"
        self.call_from_thread(self.reload_trace, self.path, how)

    def action_compare_previous(self) -> None:
        """Open the compare view of the previous run (kept by R) and this one, until it
        quits; then back here, where the cursor was."""
        if self.previous_trace is None:
            self._refuse(
                "D compares with the previous run: R re-runs and keeps it "
                "(from the shell: kbdebug run ... --compare-with OLD.kbt)"
            )
            return
        argv = compare_argv(self.previous_trace, self.path)
        try:
            with self.suspend():
                status = subprocess.run(argv, check=False).returncode
        except (SuspendNotSupported, OSError):
            self._refuse(f"cannot open compare here: run kbdebug compare {' '.join(argv[4:])}")
            return
        if status != 0:
            self._refuse(f"kbdebug compare ended with exit status {status}")
            return
        self.status = f"back from comparing {self.previous_trace} with {self.path}"

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
