"""The compare app's keys and layout: what each key does, and the screen at 160x48 and 80x24."""

from __future__ import annotations

#: Below this width only the focused run's lanes are shown (x flips to the other run).
NARROW_COLUMNS = 120

#: (key, action, footer label, help text, shown in the footer)
KEYS = (
    ("s", "step(1)", "step", "Step the focused run one event forward (the other follows)", True),
    ("S", "step(-1)", "back", "Step the focused run one event backward", False),
    (
        "n",
        "next_call(1)",
        "tl call",
        "Next tl call of the focused PE; the other run goes to the same call",
        True,
    ),
    ("N", "next_call(-1)", "prev call", "Previous tl call of the focused PE", False),
    ("c", "continue(1)", "continue", "Continue the focused run to its next breakpoint hit", True),
    ("C", "continue(-1)", "reverse", "Reverse-continue the focused run", False),
    (
        "w",
        "toggle_stalled_wait",
        "stall break",
        "Toggle: break on a stalled tl.wait (focused run)",
        True,
    ),
    (
        "b",
        "toggle_line_breakpoint",
        "line break",
        "Toggle a breakpoint on the source line (focused run)",
        False,
    ),
    ("B", "breakpoints", "breakpoints", "Breakpoint list of the focused run", False),
    ("x", "flip", "flip A/B", "Focus the other run: the keys move it, this one follows", True),
    ("a", "toggle_align", "align", "Align the timelines at cycle 0 or at the current call", True),
    ("left_square_bracket", "focus_pe(-1)", "PE-", "Focus the previous PE", False),
    ("right_square_bracket", "focus_pe(1)", "PE+", "Focus the next PE", False),
    ("g", "edge(-1)", "start", "Go to the start of the focused run", False),
    ("G", "edge(1)", "end", "Go to the end of the focused run", False),
    ("plus,equals_sign", "zoom(1)", "zoom in", "Zoom both timelines in", False),
    ("minus", "zoom(-1)", "zoom out", "Zoom both timelines out", False),
    ("Z", "zoom_all", "whole", "Zoom out to both whole runs", False),
    ("less_than_sign", "pan(-1)", "pan left", "Pan both timelines left", False),
    ("greater_than_sign", "pan(1)", "pan right", "Pan both timelines right", False),
    ("question_mark", "help", "help", "Show every key", True),
    ("q", "quit", "quit", "Quit", True),
)

CSS = """
CompareHeader { dock: top; }
SharedTimeline {
    max-height: 25%;
    border-top: solid $primary-darken-1;
    border-title-color: $text-muted;
    border-title-align: left;
}
SharedTimeline.-focused { border-title-color: $accent; border-title-style: bold; }
CompareSource {
    width: 1fr;
    border-top: solid $primary-darken-1;
    border-title-color: $text-muted;
    border-title-align: left;
}
#middle { height: 1fr; min-height: 4; }
FuturePair {
    width: 52;
    margin-left: 1;
    border-top: solid $primary-darken-1;
    border-title-color: $text-muted;
    border-title-align: left;
}
FindingGroupsView {
    height: 9;
    border-top: solid $primary-darken-1;
    border-title-color: $text-muted;
    border-title-align: left;
}
CompareSource:focus, FindingGroupsView:focus, SharedTimeline:focus { border-top: solid $accent; }
Screen.-narrow SharedTimeline { max-height: 6; }
Screen.-narrow SharedTimeline.-other { display: none; }
Screen.-narrow #middle { layout: vertical; }
Screen.-narrow FuturePair {
    width: 1fr; margin-left: 0; height: 4; min-height: 4; border-top: none;
}
Screen.-narrow FindingGroupsView { height: 4; }
"""
