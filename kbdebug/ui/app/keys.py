"""The app's keys and panes: what the bindings, the key bar, the help and the palette list."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import App
from textual.binding import Binding


@dataclass(frozen=True)
class Key:
    """One debugger key: what the footer, the help screen and the command palette show."""

    key: str
    action: str
    short: str
    long: str
    footer: bool = True


KEYS = (
    Key(
        "n",
        "next_line(1)",
        "next",
        "Next: the next line of this function (a helper call is one step)",
    ),
    Key(
        "N",
        "next_line(-1)",
        "prev",
        "Reverse-next: back a line of this function (a helper call one step)",
        False,
    ),
    Key("s", "step_into(1)", "step", "Step: the next tl call of the focused PE, into helpers"),
    Key("S", "step_into(-1)", "step back", "Reverse-step: the previous tl call of the PE", False),
    Key(
        "o",
        "finish(1)",
        "finish",
        "Finish: out of the current helper, back on the line that called it",
    ),
    Key(
        "O",
        "finish(-1)",
        "reverse finish",
        "Reverse-finish: back to where the helper was entered from",
        False,
    ),
    Key(
        "t",
        "until(1)",
        "until",
        "Until: the next tl call of this function on a later line (out of a loop)",
        False,
    ),
    Key(
        "T",
        "until(-1)",
        "reverse until",
        "Reverse-until: the previous tl call of this function on an earlier line",
        False,
    ),
    Key("e", "step(1)", "event", "One raw event forward (any PE: issue, grant, wait...)", False),
    Key("E", "step(-1)", "event back", "One raw event backward", False),
    Key("c", "continue(1)", "continue", "Continue to the next breakpoint hit"),
    Key("C", "continue(-1)", "reverse", "Reverse-continue to the previous breakpoint hit"),
    Key("w", "toggle_stalled_wait", "stall break", "Toggle: break on a stalled tl.wait"),
    Key("question_mark", "help", "help", "Show every key"),
    Key("b", "toggle_line_breakpoint", "line break", "Toggle a breakpoint on the source line"),
    Key("B", "breakpoints", "breakpoints", "Breakpoint list: add, remove, enable, conditions"),
    Key(
        "p",
        "print_value",
        "print",
        "Print the selected future's tensor (else the one at the cursor): its slice, digest "
        "and, recorded with run --values, its first rows and columns",
        False,
    ),
    Key("f", "future_event(1)", "future", "Next lifecycle event of the selected future"),
    Key("F", "future_event(-1)", "future back", "Previous lifecycle event of the future", False),
    Key(
        "u",
        "chain(1)",
        "wait's cause",
        "At a stalled receive: go to the late send on the other PE, again to what held "
        "that PE, ... to the root cause",
        False,
    ),
    Key("d", "chain(-1)", "chain back", "Go back one step along the wait chain u follows", False),
    Key("left_square_bracket", "focus_pe(-1)", "PE-", "Focus the previous PE"),
    Key("right_square_bracket", "focus_pe(1)", "PE+", "Focus the next PE"),
    Key("g", "edge(-1)", "start", "Go to the start of the trace", False),
    Key("G", "edge(1)", "end", "Go to the end of the trace", False),
    Key("colon", "goto", "go to", "Go to an event (:1234) or a cycle (:t5000)"),
    Key(
        "slash",
        "search",
        "search",
        "Search events (kind, pe2, future 12, file.py:86, op); ; and , repeat it",
    ),
    Key(
        "semicolon",
        "search_again(1)",
        "next match",
        "Next match of the last / search (n is gdb's next here)",
        False,
    ),
    Key("comma", "search_again(-1)", "prev match", "Previous match of the last / search", False),
    Key("plus,equals_sign", "zoom(1)", "zoom in", "Zoom the timeline in", False),
    Key("minus", "zoom(-1)", "zoom out", "Zoom the timeline out", False),
    Key("z", "zoom_future", "zoom future", "Zoom the timeline to the selected future", False),
    Key("Z", "zoom_all", "whole trace", "Zoom the timeline out to the whole trace", False),
    Key("less_than_sign", "pan(-1)", "pan left", "Pan the timeline left", False),
    Key("greater_than_sign", "pan(1)", "pan right", "Pan the timeline right", False),
    Key("m", "mark", "mark", "Mark this position", False),
    Key("apostrophe", "jump_mark", "to mark", "Jump to the mark (again: back)"),
    Key("1", "focus_pane(1)", "timeline", "Focus pane 1: the timeline", False),
    Key("2", "focus_pane(2)", "source", "Focus pane 2: the source", False),
    Key("3", "focus_pane(3)", "futures", "Focus pane 3: the futures table", False),
    Key("4", "focus_pane(4)", "events", "Focus pane 4: the events", False),
    Key(
        "5", "focus_pane(5)", "findings", "Focus pane 5: the findings, biggest saving first", False
    ),
    Key(
        "6",
        "focus_pane(6)",
        "mesh",
        "Focus pane 6: the mesh, every PE's stall over the launch, end and efficiency",
        False,
    ),
    Key(
        "r", "reload", "reload", "Reload the trace if its file changed, keeping the position", False
    ),
    Key(
        "R", "rerun", "re-run", "Re-run the kbdebug run that recorded the trace, and reload", False
    ),
    Key("D", "compare_previous", "vs prev", "Compare the run R recorded over with this", False),
    Key("q", "quit", "quit", "Quit"),
    Key("ctrl+p", "command_palette", "palette", "Command palette: every action by name"),
)

#: Actions that work before a trace is open.
_ALWAYS = {"quit", "help", "command_palette"}


def bindings(keys: tuple[Key, ...]) -> list[Binding]:
    """The app's bindings for ``keys``: the key bar shows those with ``footer``."""
    return [
        Binding(key.key, key.action, key.short, show=key.footer, tooltip=key.long) for key in keys
    ]


def needs_trace(keys: tuple[Key, ...]) -> set[str]:
    """The actions of ``keys`` that need an open trace and the main screen."""
    return {key.action.split("(")[0] for key in keys} - _ALWAYS


def key_actions(keys: tuple[Key, ...]) -> dict[str, str]:
    """``keys`` by key name, for explaining the ones that do nothing at the moment."""
    return {name: key.action for key in keys for name in key.key.split(",")}


def key_display(app: App, key: Key) -> str:
    """How ``app`` shows ``key`` (its first key name): ``^p``, ``?``, ``+``."""
    return app.get_key_display(Binding(key.key.split(",")[0], key.action))


@dataclass(frozen=True)
class Pane:
    """A pane a number key focuses; its title shows the number."""

    number: int
    name: str
    #: The id of the pane's widget.
    widget: str
    #: The id of the tab that holds it, if it sits in a tab.
    tab: str | None = None


PANES = (
    Pane(1, "timeline", "timeline"),
    Pane(2, "source", "source"),
    Pane(3, "futures", "futures"),
    Pane(4, "events", "events", "events-tab"),
    Pane(5, "findings", "findings", "findings-tab"),
    Pane(6, "mesh", "mesh", "mesh-tab"),
)

#: Keys the key bar keeps at its right end whatever the width.
PINNED = ("ctrl+p", "question_mark", "q")
