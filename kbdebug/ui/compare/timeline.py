"""SharedTimeline: one run's lanes on the time axis it shares with the other run of a compare."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message

from kbdebug.replay import Replay
from kbdebug.ui.panes import lanes as L
from kbdebug.ui.panes.timeline import Timeline


@dataclass
class RunCycleClicked(Message):
    """Run ``run``'s lanes were clicked at ``cycle``."""

    run: str
    cycle: int


class SharedTimeline(Timeline, inherit_bindings=False):
    """A Timeline whose view the compare app sets: both runs' span, both at one scale.

    The view may start before cycle 0 or run past this run's end: aligned at the
    current call, the other run's lanes are shifted by the difference of the two
    cursors' cycles. Panning and zooming go through the app, which moves both.
    """

    # The timeline's keys but z: compare selects no future to zoom to.
    BINDINGS = [b for b in Timeline.BINDINGS if b.action != "app.zoom_future"]

    def __init__(
        self,
        replay: Replay,
        data: L.TimelineData,
        shared_end: int,
        run: str,
        *,
        id: str | None = None,
    ) -> None:
        #: Which run ("a" or "b") these lanes show.
        self.run = run
        #: The later of the two runs' ends: the axis covers both.
        self.shared_end = max(int(shared_end), data.end_time, 1)
        super().__init__(replay, data, id=id)
        self.view_span = float(self.shared_end + 1)

    @property
    def axis_end(self) -> int:
        """The last cycle the axis covers: the later run's end."""
        return self.shared_end

    def validate_view_span(self, span: float) -> float:
        full = float(self.shared_end + 1)
        return min(max(float(span), float(min(self.plot_width, full)), 1.0), full)

    def validate_view_start(self, start: float) -> float:
        full = float(self.shared_end + 1)
        return max(-full, min(float(start), full))

    def show_all(self) -> None:
        self.view_span = float(self.shared_end + 1)
        self.view_start = 0.0

    def follow(self) -> None:
        """The app keeps the cursors in view, both timelines at once."""

    def cursor_in_view(self) -> bool:
        t = float(self.replay.time)
        return self.view_start <= t < self.view_start + self.view_span

    def action_pan(self, direction: int) -> None:
        self.app.action_pan(direction)

    def on_click(self, event: events.Click) -> None:
        event.stop()
        column = event.x - self.label_width
        if column >= 0:
            self.post_message(RunCycleClicked(self.run, max(self.cycle_at(column), 0)))

    def on_resize(self) -> None:
        super().on_resize()
        self.app.call_after_refresh(self.app.sync_views)
