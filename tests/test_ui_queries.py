"""The questions the screen asks of a trace: tl calls, stalls per line, search, ``:``, text."""

from __future__ import annotations

import numpy as np
import pytest
from test_ui_traces import fresh

from emulator.trace.schema import Kind
from kbdebug.analysis.summary import stall_by_pe_line
from kbdebug.replay import Cycle, EventKind, FindingHit, FuturePhase, SourceLine, StalledWait
from kbdebug.ui import queries as Q
from kbdebug.ui.screens.bpspec import parse_breakpoint


def test_next_event_moves_past_the_current_event_both_ways():
    events = np.array([3, 7, 9])
    assert Q.next_event(events, 0) == 3
    assert Q.next_event(events, 4) == 7  # current event is 3
    assert Q.next_event(events, 10) is None
    assert Q.next_event(events, 8, reverse=True) == 3  # current event 7
    assert Q.next_event(events, 4, reverse=True) is None


def test_the_source_gutters_stall_by_line_adds_up_every_stalled_cycle():
    replay = fresh("flawed_prefetch")
    stalls = stall_by_pe_line(replay.index)
    assert sum(stalls[0].values()) == int(replay.index.futures.stall.sum())
    assert all(file.endswith("attention.py") for file, _ in stalls[0])


def test_future_of_an_event_comes_from_its_future_or_its_command():
    replay = fresh("flawed_prefetch")
    c, k = replay.index.columns, replay.index.commands
    grant = int(np.flatnonzero((c.kind == Kind.CHAN_GRANT) & (k.future[c.cmd] >= 0))[0])
    assert Q.future_of_event(replay, grant) == int(k.future[c.cmd[grant]])
    assert Q.future_of_event(replay, -1) == -1


@pytest.mark.parametrize(
    ("text", "target"),
    [("1234", ("event", 1234)), (":#12", ("event", 12)), ("t5000", ("cycle", 5000)),
     ("@1_000", ("cycle", 1000)), ("e7", ("event", 7))],
)  # fmt: skip
def test_goto_reads_event_numbers_and_cycles(text, target):
    assert Q.parse_goto(text) == target


@pytest.mark.parametrize("text", ["", "abc", "t", "-5"])
def test_goto_rejects_anything_else(text):
    with pytest.raises(ValueError, match="event number"):
        Q.parse_goto(text)


def test_search_combines_words_and_wraps_around():
    replay = fresh("prefill")
    c = replay.index.columns
    waits = np.flatnonzero((c.kind == Kind.WAIT_END) & (c.pe == 2))
    assert Q.search(replay, "wait_end pe2", 0) == waits[0]
    assert Q.search(replay, "wait_end pe2", int(waits[-1]) + 1) == waits[0]
    assert Q.search(replay, "wait_end pe2", int(waits[3]) + 1, reverse=True) == waits[2]
    future = int(c.fut[waits[0]])
    hits = np.flatnonzero(Q.event_matches(replay, f"future {future}"))
    assert set(replay.future_events(future)) <= set(hits.tolist())
    assert Q.search(replay, "no_such_op", 0) is None
    with pytest.raises(ValueError):
        Q.search(replay, "  ", 0)


def test_search_by_source_line_finds_tl_calls_there():
    replay = fresh("flawed_prefetch")
    hits = np.flatnonzero(Q.event_matches(replay, "attention.py:86"))
    assert len(hits)
    assert {replay.index.loc(int(replay.index.columns.loc[i])).line for i in hits} == {86}


def test_banner_names_the_deadlocked_pes_futures_and_lines():
    text = Q.banner(fresh("deadlock"))
    assert text.startswith("did not complete: deadlock on PEs 0, 1 at cycle ")
    assert "PE 0 waits on receive future" in text and "PE 1 waits on receive future" in text
    assert Q.banner(fresh("flawed_prefetch")) is None


def test_cycles_fit_their_width():
    assert Q.cycles(842) == "842"
    assert Q.cycles(26944, 5) == "26944"
    assert Q.cycles(26944, 4) == "27k"
    assert Q.cycles(1_169_276, 5) == "1.17M"
    assert Q.cycles(6_499_896) == "6.5M"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("wait", StalledWait(min_stall=1)),
        ("wait >= 500 pe 0", StalledWait(min_stall=500, pe=0)),
        ("stall 800 at attention.py:86", StalledWait(min_stall=800, file="attention.py", line=86)),
        ("line 86", SourceLine(line=86)),
        ("attention.py:86 pe1", SourceLine(file="attention.py", line=86, pe=1)),
        ("future 3 ready", FuturePhase(future=3, phase="ready")),
        ("cycle 5000", Cycle(cycle=5000)),
        ("t5000", Cycle(cycle=5000)),
        ("deadlock", EventKind(kind=Kind.DEADLOCK)),
        ("kind wait_end pe 1", EventKind(kind=Kind.WAIT_END, pe=1)),
        ("finding KB1", FindingHit(prefix="KB1")),
    ],
)
def test_breakpoints_typed_as_text(text, expected):
    assert vars(parse_breakpoint(text)) == vars(expected)
    assert type(parse_breakpoint(text)) is type(expected)


@pytest.mark.parametrize(
    ("text", "words"),
    [("", "empty"), ("frob", "not a breakpoint"), ("future x", "needs an id"),
     ("future 3 done", "unknown phase"), ("wait pe", "did not understand"),
     ("kind nothing", "unknown event kind")],
)  # fmt: skip
def test_nonsense_breakpoints_say_what_was_wrong(text, words):
    with pytest.raises(ValueError, match=words):
        parse_breakpoint(text)
