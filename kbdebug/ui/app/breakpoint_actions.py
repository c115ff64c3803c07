"""The debugger's breakpoint keys: w (stalled waits), b (the source line), B (the list)."""

from __future__ import annotations

from kbdebug.replay import FindingHit
from kbdebug.ui import queries
from kbdebug.ui.app.line_breakpoints import toggle_line
from kbdebug.ui.panes.source_view import SourceView
from kbdebug.ui.screens.breakpoint_dialog import BreakpointDialog


class BreakpointActions:
    """KbdebugApp's breakpoint actions (a mixin: the app's state is the app's)."""

    def action_toggle_stalled_wait(self) -> None:
        bps = self.replay.breakpoints
        bp = self.stalled_wait
        if bp in bps and bp.enabled:
            bp.enabled = False
            self.status = "no longer breaking on stalled waits"
        else:
            bp.enabled = True
            if bp not in bps:
                bps.append(bp)
            hits = len(bp.hits(self.replay))
            self.status = f"breaking on stalled tl.wait ({hits} in this trace): c continues"
        self._breakpoints_changed()

    def action_toggle_line_breakpoint(self) -> None:
        file, line = self.query_one(SourceView).cursor_line
        self.toggle_line_breakpoint(file, line)

    def toggle_line_breakpoint(self, file: str, line: int) -> None:
        """Remove the breakpoints on ``file``:``line``, or add one (gdb-like: see toggle_line)."""
        done = toggle_line(self.replay, file, line)
        if done.refused:
            self._refuse(done.status)
            return
        self.status = done.status
        if done.changed:
            self._breakpoints_changed()

    def action_breakpoints(self) -> None:
        self.push_screen(BreakpointDialog(self.replay), self._breakpoints_edited)

    def _breakpoints_edited(self, changed: bool | None) -> None:
        if changed:
            self._breakpoints_changed()
            bps = self.replay.breakpoints
            if self.breaks:
                self.status = f"breaking on {self.breaks}: c continues"
            elif len(bps) == 1:
                self.status = "the breakpoint is disabled: B, then space, enables it"
            elif bps:
                self.status = f"all {len(bps)} breakpoints are disabled: B, then space, enables one"
            else:
                self.status = "no breakpoints left: w breaks on stalled waits, b on a line"

    def _hand_findings(self) -> None:
        """Give every findings breakpoint the findings (None while they are computed)."""
        found = None if self.findings is None else tuple(self.findings)
        changed = False
        for bp in self.replay.breakpoints:
            if isinstance(bp, FindingHit) and bp.findings != found:
                bp.findings, changed = found, True
        if changed:
            self.breaks = queries.breakpoint_summary(self.replay)
            self.breakpoint_generation += 1

    def _breakpoints_changed(self) -> None:
        self._hand_findings()
        self.breaks = queries.breakpoint_summary(self.replay)
        self.breakpoint_generation += 1
