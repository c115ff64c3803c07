"""The compare mode's keys (the app's, said of the focused run, and x and a) and its help."""

from __future__ import annotations

from dataclasses import replace

from kbdebug.ui.app.keys import KEYS as SINGLE_RUN_KEYS
from kbdebug.ui.app.keys import Key

#: Below this width only the focused run's lanes are shown (x flips to the other run).
NARROW_COLUMNS = 120


def _key(action: str, long: str | None = None, *, footer: bool = False) -> Key:
    """The app's key for ``action`` (the same key and label as in one run), its help
    said of the focused run or of both timelines."""
    key = _SINGLE_RUN[action]
    return replace(key, long=long or key.long, footer=footer)


_SINGLE_RUN = {key.action: key for key in SINGLE_RUN_KEYS}

#: In the order the key bar shows them as far as there is room: at 80 columns
#: (one run's lanes) n, s, x and c.
KEYS = (
    _key(
        "next_line(1)",
        "Next tl call of this function in the focused run (over helpers); the other run "
        "goes to the same call",
        footer=True,
    ),
    _key("next_line(-1)"),
    _key("step_into(1)", "Step: the next tl call of the focused PE, into helpers", footer=True),
    _key("step_into(-1)"),
    _key("finish(1)"),
    _key("finish(-1)"),
    _key("until(1)"),
    _key("until(-1)"),
    _key("step(1)", "Step the focused run one event forward (the other follows)"),
    _key("step(-1)", "Step the focused run one event backward"),
    Key("x", "flip", "flip A/B", "Focus the other run: the keys move it, this one follows"),
    _key("continue(1)", "Continue the focused run to its next breakpoint hit", footer=True),
    _key("continue(-1)", "Reverse-continue the focused run"),
    _key("toggle_stalled_wait", "Toggle: break on a stalled tl.wait (focused run)", footer=True),
    _key("toggle_line_breakpoint", "Toggle a breakpoint on the source line (focused run)"),
    _key("breakpoints", "Breakpoint list of the focused run"),
    Key("a", "toggle_align", "align", "Align the timelines at cycle 0 or at the current call"),
    _key("print_value", "Print the focused run's tensor at its cursor: slice, digest, values"),
    _key("chain(1)", "At a stalled receive of the focused run: go to its cause on another PE"),
    _key("chain(-1)", "Go back one step along the wait chain (focused run)"),
    _key("focus_pe(-1)"),
    _key("focus_pe(1)"),
    _key("edge(-1)", "Go to the start of the focused run"),
    _key("edge(1)", "Go to the end of the focused run"),
    _key("zoom(1)", "Zoom both timelines in"),
    _key("zoom(-1)", "Zoom both timelines out"),
    _key("zoom_all", "Zoom out to both whole runs"),
    _key("pan(-1)", "Pan both timelines left"),
    _key("pan(1)", "Pan both timelines right"),
    Key(
        "5",
        "focus_findings",
        "findings",
        "Focus the findings: hazards, then findings, fixed in B, new in B and still there",
        False,
    ),
    Key(
        "6",
        "focus_mesh",
        "mesh",
        "Focus the mesh: the focused run's PEs, each one's stall, end and efficiency",
        False,
    ),
    _key("help", footer=True),
    _key("quit", footer=True),
    _key("command_palette", footer=True),
)

#: What ? says before the keys.
INTRO = (
    "Run A (before) and run B (after) on one time axis at one scale, A's lanes above B's. "
    "The keys move the focused run (▸ in the header; x flips to the other one), and the other "
    "run follows call by call: the same source call, matched across edits, and the same "
    "occurrence. When the other run never made that call, the status line says 'not in B' "
    "(or A) and the other cursor stays; what the keys did to the focused run is said as "
    "in one run, after its name (A: cannot step: at the start of the trace). Breakpoints "
    "(w, b, B) belong to the focused run. "
    "The source shows A's and B's line numbers side by side (a line only one run has is "
    "blank in the other's column), the stall of each line's waits in A and in B and the "
    "change, ▶ the focused run's line and ▷ the other's. Below 120 columns only the focused "
    "run's lanes are shown. Tab moves between the panes; Enter on a finding goes to it in "
    "its run, on a source line toggles a breakpoint.\n"
)
