"""Breakpoints: continue_ stops, both ways, exactly where a scan of the decoded events does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from replay_naive import write_trace

from emulator.trace.reader import read_trace
from emulator.trace.schema import FIELDS, Kind
from kbdebug.replay import (
    PHASES,
    Cycle,
    EventKind,
    FindingHit,
    FuturePhase,
    Replay,
    SourceLine,
    StalledWait,
)

TRACES = [
    "decode_prefetch",
    "flawed_prefetch",
    "prefill",
    "ring_attention",
    "deadlock",
    "error",
    "synthetic",
    "truncated",
]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Per trace name: (path, its events decoded)."""
    directory = tmp_path_factory.mktemp("replay_breakpoints")
    out = {}
    for name in TRACES:
        path = write_trace(name, directory)
        out[name] = (path, list(read_trace(path).iter_decoded()))
    return out


@pytest.fixture(params=TRACES)
def case(request, traces):
    path, events = traces[request.param]
    return Replay.open(path), events


# Brute force: one pass over the decoded events per question, no index.


def where(events, predicate) -> list[int]:
    return [i for i, e in enumerate(events) if predicate(e)]


def field(event, name: str):
    names = [n for n, _ in FIELDS[event[0]]]
    return event[3 + names.index(name)]


def at_line(loc, file, line) -> bool:
    if loc is None or (line is not None and loc.line != line):
        return False
    return file is None or loc.file == file or loc.file.endswith("/" + file)


def stalled_waits(events, min_stall=1, pe=None, file=None, line=None) -> list[int]:
    hits = []
    for i, e in enumerate(events):
        if e[0] != Kind.WAIT_BEGIN or (pe is not None and e[2] != pe):
            continue
        future = field(e, "future")
        if (file is not None or line is not None) and not at_line(field(e, "loc"), file, line):
            continue
        ends = [field(x, "stalled") for x in events if x[0] == Kind.WAIT_END and x[3] == future]
        if ends:
            if ends[0] >= max(min_stall, 1):
                hits.append(i)
        else:
            arrived = [j for j in where(events, lambda x: x[0] == Kind.COMPLETE) if j < i
                       and field(events[j], "future") == future]  # fmt: skip
            if not arrived:
                hits.append(i)
    return hits


def future_phase_events(events, future: int, phase: str) -> list[int]:
    issues = [e for e in events if e[0] == Kind.ISSUE and field(e, "future") == future]
    if not issues:
        return []
    cmd = field(issues[0], "cmd")
    kind, key, value = {
        "issued": (Kind.ISSUE, "future", future),
        "queued": (Kind.CHAN_REQUEST, "cmd", cmd),
        "transferring": (Kind.CHAN_GRANT, "cmd", cmd),
        "ready": (Kind.COMPLETE, "cmd", cmd),
        "waiting": (Kind.WAIT_BEGIN, "future", future),
        "resolved": (Kind.WAIT_END, "future", future),
    }[phase]
    return where(events, lambda e: e[0] == kind and field(e, key) == value)[:1]


def walk(replay: Replay, breakpoints, reverse: bool = False) -> list[int]:
    """Every stop of continue_ from one end to the other, checking where each leaves us."""
    replay.seek(replay.n_events if reverse else 0)
    stops = []
    while (hit := replay.continue_(reverse=reverse, breakpoints=breakpoints)) is not None:
        assert replay.position == hit.index + 1
        stops.append(hit.index)
    assert replay.position == (0 if reverse else replay.n_events)
    return stops


def assert_walks(replay: Replay, breakpoints, expected: list[int]) -> None:
    """Forward from the start stops at every hit; backward from the end at every hit before
    the last event (the one the end position is already on)."""
    expected = sorted(set(expected))
    assert walk(replay, breakpoints) == expected
    before_last = [i for i in expected if i < replay.n_events - 1]
    assert walk(replay, breakpoints, reverse=True) == before_last[::-1]


@pytest.mark.parametrize("min_stall", [0, 1, 50, 400, 10**9])
def test_stalled_wait_stops_where_a_scan_finds_stalls(case, min_stall):
    replay, events = case
    assert_walks(replay, [StalledWait(min_stall=min_stall)], stalled_waits(events, min_stall))


def test_stalled_wait_on_one_pe(case):
    replay, events = case
    for pe in range(replay.index.n_pes):
        assert_walks(replay, [StalledWait(pe=pe)], stalled_waits(events, pe=pe))


def test_stalled_wait_at_a_source_line(case):
    replay, events = case
    lines = {field(e, "loc") for e in events if e[0] == Kind.WAIT_BEGIN}
    for loc in sorted(lines):
        short = loc.file.rsplit("/", 1)[-1]
        for file in (None, loc.file, short):
            bp = StalledWait(min_stall=1, file=file, line=loc.line)
            assert_walks(replay, [bp], stalled_waits(events, file=file, line=loc.line))


def test_deadlocked_waits_are_stalled_waits_of_any_length(traces):
    path, events = traces["deadlock"]
    replay = Replay.open(path)
    receives = where(events, lambda e: e[0] == Kind.WAIT_BEGIN and field(e, "future") in (2, 3))
    hits = replay.hits(StalledWait(min_stall=10**12))
    assert hits.tolist() == receives and len(receives) == 2


def test_source_line_stops_where_the_kernel_reaches_the_line(case):
    replay, events = case
    kinds = (Kind.KERNEL_START, Kind.ISSUE, Kind.WAIT_BEGIN, Kind.KERNEL_ERROR)
    locs = {field(e, "loc") for e in events if e[0] in kinds} - {None}
    assert locs
    for loc in sorted(locs):
        for file, pe in ((None, None), (loc.file, None), (loc.file.rsplit("/", 1)[-1], 0)):
            expected = where(
                events,
                lambda e, f=file, p=pe, n=loc.line: (
                    e[0] in kinds and at_line(field(e, "loc"), f, n) and (p is None or e[2] == p)
                ),
            )
            assert_walks(replay, [SourceLine(file=file, line=loc.line, pe=pe)], expected)


def test_source_line_without_calls_never_stops(case):
    replay, _ = case
    assert walk(replay, [SourceLine(line=10**6)]) == []


@pytest.mark.parametrize("phase", PHASES)
def test_future_phase_stops_at_the_event_entering_it(case, phase):
    replay, events = case
    for future in range(replay.n_futures + 1):  # one past the last: never
        expected = future_phase_events(events, future, phase)
        assert_walks(replay, [FuturePhase(future=future, phase=phase)], expected)


def test_future_phase_waiting_is_being_waited_on_and_the_old_name_still_reads(case):
    replay, events = case
    assert "waiting" in PHASES and "waited" not in PHASES
    old = FuturePhase(future=1, phase="waited")
    assert old.phase == "waiting" and old.describe(replay) == "future 1 waiting"
    assert_walks(replay, [old], future_phase_events(events, 1, "waiting"))


def test_future_phase_rejects_an_unknown_phase():
    with pytest.raises(ValueError, match="unknown phase 'done'"):
        FuturePhase(future=1, phase="done")


@pytest.mark.parametrize("kind", list(Kind))
def test_event_kind_stops_at_every_event_of_the_kind(case, kind):
    replay, events = case
    assert_walks(replay, [EventKind(kind=kind)], where(events, lambda e: e[0] == kind))
    expected = where(events, lambda e: e[0] == kind and e[2] == 1)
    assert_walks(replay, [EventKind(kind=kind.name.lower(), pe=1)], expected)


def test_event_kind_rejects_an_unknown_name():
    with pytest.raises(ValueError, match="unknown event kind 'jump'"):
        EventKind(kind="jump")


def test_cycle_stops_at_the_first_event_at_or_after_it(case):
    replay, events = case
    times = sorted({e[1] for e in events})
    for cycle in [0, 1, *times[:: max(1, len(times) // 12)], times[-1], times[-1] + 1]:
        expected = [i for i, e in enumerate(events) if e[1] >= cycle][:1]
        assert_walks(replay, [Cycle(cycle=cycle)], expected)


def test_finding_stops_at_the_events_of_matching_findings(case):
    replay, events = case
    n = len(events)
    found = (
        SimpleNamespace(id="KB101:k.py:3", rule="KB101", events=(n // 2, 0, n - 1)),
        SimpleNamespace(id="KB104:k.py:9", rule="KB104", events=(n // 3,)),
    )
    assert_walks(replay, [FindingHit(findings=found)], [0, n // 3, n // 2, n - 1])
    assert_walks(replay, [FindingHit(prefix="KB101", findings=found)], [0, n // 2, n - 1])
    assert_walks(replay, [FindingHit(prefix="KB104:k.py", findings=found)], [n // 3])
    assert_walks(replay, [FindingHit(prefix="KB999", findings=found)], [])


def test_a_finding_breakpoint_set_before_the_findings_hits_once_they_arrive(case):
    """The app sets a findings breakpoint before its worker has the findings: it hits
    nothing then, and every finding's event once they are handed in (its search is not
    kept from before)."""
    replay, events = case
    n = len(events)
    early = FindingHit(prefix="KB101")
    replay.breakpoints.append(early)
    assert list(early.hits(replay)) == []
    assert replay.continue_() is None
    replay.seek(0)
    early.findings = (SimpleNamespace(id="KB101:k.py:3", rule="KB101", events=(n // 2,)),)
    assert list(early.hits(replay)) == [n // 2]
    hit = replay.continue_()
    assert hit is not None and hit.index == n // 2


def test_several_breakpoints_stop_at_the_nearest_hit_of_any(case):
    replay, events = case
    breakpoints = [EventKind(kind=Kind.WAIT_END), StalledWait(), Cycle(cycle=events[-1][1])]
    expected = (
        where(events, lambda e: e[0] == Kind.WAIT_END)
        + stalled_waits(events)
        + [i for i, e in enumerate(events) if e[1] >= events[-1][1]][:1]
    )
    assert_walks(replay, breakpoints, expected)


def test_continue_uses_the_replays_enabled_breakpoints(case):
    replay, events = case
    waits = EventKind(kind=Kind.WAIT_BEGIN)
    issues = EventKind(kind=Kind.ISSUE, enabled=False)
    replay.breakpoints = [waits, issues]
    assert walk(replay, None) == where(events, lambda e: e[0] == Kind.WAIT_BEGIN)
    issues.enabled, waits.enabled = True, False
    assert walk(replay, None) == where(events, lambda e: e[0] == Kind.ISSUE)


def test_changing_a_breakpoint_searches_again(case):
    replay, events = case
    bp = StalledWait(min_stall=1)
    assert replay.hits(bp).tolist() == stalled_waits(events, 1)
    bp.min_stall = 300
    assert replay.hits(bp).tolist() == stalled_waits(events, 300)


def test_next_hit_from_every_position_matches_a_scan(case):
    replay, events = case
    bp = EventKind(kind=Kind.COMPLETE)
    hits = where(events, lambda e: e[0] == Kind.COMPLETE)
    for position in range(replay.n_events + 1):
        replay.seek(position)
        forward = [i for i in hits if i >= position][:1]
        backward = [i for i in hits if i < position - 1][-1:]
        assert [h.index for h in [replay.next_hit(breakpoints=[bp])] if h] == forward
        found = replay.next_hit(reverse=True, breakpoints=[bp])
        assert ([found.index] if found else []) == backward
        assert replay.position == position


def test_continue_at_the_end_returns_none_and_stays_at_the_end(case):
    replay, _ = case
    bp = EventKind(kind=Kind.KERNEL_START)
    replay.seek(replay.n_events)
    assert replay.continue_(breakpoints=[bp]) is None
    assert replay.position == replay.n_events
    replay.seek(0)
    assert replay.continue_(reverse=True, breakpoints=[bp]) is None
    assert replay.position == 0


def test_continue_without_breakpoints_runs_to_either_end(case):
    replay, _ = case
    replay.seek(replay.n_events // 2)
    assert replay.continue_() is None and replay.position == replay.n_events
    assert replay.continue_(reverse=True) is None and replay.position == 0


def test_hit_describes_the_breakpoint_and_the_event(case):
    replay, _ = case
    hit = replay.continue_(breakpoints=[EventKind(kind=Kind.KERNEL_START)])
    assert hit is not None
    assert hit.describe(replay).startswith("event kernel_start: #0 t=0 PE0 kernel_start")
