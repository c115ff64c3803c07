"""The p key: print the value of the selected future's tensor (its digest, its kept values)."""

from __future__ import annotations

from emulator.trace.errors import TraceFormatError
from kbdebug.replay.values import Values
from kbdebug.replay.values_file import ValuesFileError
from kbdebug.ui.screens.value_screen import ValueScreen
from kbdebug.ui.value_text import value_lines


class ValueActions:
    """DebuggerApp's p (a mixin: the state is the app's)."""

    def action_print_value(self) -> None:
        future = self.future_under_cursor()
        if future < 0:
            self._refuse(
                self.in_run("no future here: pick one in the futures table (3), or step to a wait")
            )
            return
        try:
            # The modal's border and padding take 4 columns of the screen.
            lines = value_lines(Values.of(self.replay), future, self.size.width - 4)
        except (OSError, TraceFormatError, ValuesFileError) as e:
            self._refuse(self.in_run(f"cannot read the values: {e}"))
            return
        self.push_screen(ValueScreen(self.in_run(f"p: future {future}"), lines))

    def future_under_cursor(self) -> int:
        """The selected future, else that of the event at the cursor (a wait, an issue...)."""
        selected = getattr(self, "selected_future", -1)
        if selected >= 0:
            return selected
        event = self.replay.position - 1
        if event < 0:
            return -1
        return int(self.replay.index.columns.fut[event])  # -1 for an event without one
