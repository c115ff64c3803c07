"""The breakpoint keys of both modes: w (stalled waits), b (the source line), B (the list)."""

from __future__ import annotations

from kbdebug.analysis.findings import Finding
from kbdebug.analysis.hazards import Hazard
from kbdebug.replay import FindingHit, HazardHit, Replay
from kbdebug.ui import queries
from kbdebug.ui.app.line_breakpoints import toggle_line
from kbdebug.ui.screens.breakpoint_dialog import BreakpointDialog


class BreakpointActions:
    """DebuggerApp's breakpoint actions, on the focused run (a mixin: the state is the app's).

    A mode provides ``replay``, ``stalled_wait`` (the breakpoint ``w`` toggles in the
    focused run), ``source_line()`` and ``finding_runs()``.
    """

    def source_line(self) -> tuple[str, int] | None:
        """(file, line) under the source pane's cursor in the focused run, if it has it."""
        raise NotImplementedError

    def finding_runs(self) -> list[tuple[Replay, list[Finding] | None]]:
        """Each run and its findings (None while they are computed)."""
        raise NotImplementedError

    def action_toggle_stalled_wait(self) -> None:
        bps = self.replay.breakpoints
        bp = self.stalled_wait
        if bp in bps and bp.enabled:
            bp.enabled = False
            self.status = self.in_run("no longer breaking on stalled waits")
        else:
            bp.enabled = True
            if bp not in bps:
                bps.append(bp)
            hits = len(bp.hits(self.replay))
            self.status = self.in_run(
                f"breaking on stalled tl.wait ({hits} in this trace): c continues"
            )
        self._breakpoints_changed()

    def action_toggle_line_breakpoint(self) -> None:
        here = self.source_line()
        if here is None:
            self._refuse(self.in_run("no such line in this run: it is only in the other one"))
            return
        self.toggle_line_breakpoint(*here)

    def toggle_line_breakpoint(self, file: str, line: int) -> None:
        """Remove the breakpoints on ``file``:``line``, or add one (gdb-like: see toggle_line)."""
        done = toggle_line(self.replay, file, line)
        if done.refused:
            self._refuse(self.in_run(done.status))
            return
        self.status = self.in_run(done.status)
        if done.changed:
            self._breakpoints_changed()

    def action_breakpoints(self) -> None:
        self.push_screen(BreakpointDialog(self.replay), self._breakpoints_edited)

    def _breakpoints_edited(self, changed: bool | None) -> None:
        if not changed:
            return
        self._breakpoints_changed()
        bps = self.replay.breakpoints
        if self.breaks:
            status = f"breaking on {self.breaks}: c continues"
        elif len(bps) == 1:
            status = "the breakpoint is disabled: B, then space, enables it"
        elif bps:
            status = f"all {len(bps)} breakpoints are disabled: B, then space, enables one"
        else:
            status = "no breakpoints left: w breaks on stalled waits, b on a line"
        self.status = self.in_run(status)

    def _hand_findings(self) -> None:
        """Give every run's findings breakpoints that run's findings (None while they
        are computed)."""
        changed = False
        for replay, findings in self.finding_runs():
            found = None if findings is None else tuple(findings)
            hazards = None if found is None else tuple(h for h in found if isinstance(h, Hazard))
            for bp in replay.breakpoints:
                if isinstance(bp, FindingHit) and bp.findings != found:
                    bp.findings, changed = found, True
                if isinstance(bp, HazardHit) and bp.hazards != hazards:
                    bp.hazards, changed = hazards, True
        if changed:
            self.breaks = queries.breakpoint_summary(self.replay)
            self.breakpoint_generation += 1

    def _breakpoints_changed(self) -> None:
        self._hand_findings()
        self.breaks = queries.breakpoint_summary(self.replay)
        self.breakpoint_generation += 1
