"""The debugger's state at a position: computed from the index, or by applying events one by one.

Two independent ways to the same answer: ``state_at`` looks everything up in
the index (used for checkpoints), ``apply`` advances a state by one event (used
for stepping, and as the reference the tests compare ``state_at`` against).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.replay.index import NONE, TraceIndex

#: Future phases in lifecycle order; a future's phase only moves forward.
PHASES = ("issued", "queued", "transferring", "ready", "waited", "resolved")
ISSUED, QUEUED, TRANSFERRING, READY, WAITED, RESOLVED = range(6)
#: Phase code of a future not issued yet at a position.
NOT_ISSUED = -1


@dataclass
class PEState:
    """One PE at a position."""

    #: idle (not started), running, stalled, done, error or deadlocked.
    status: str = "idle"
    #: The future the PE waits on (stalled, or waiting on a ready one), else -1.
    future: int = NONE
    #: Loc id of the PE's latest tl call, -1 before the first.
    loc: int = NONE
    #: Scratch bytes in use.
    scratch: int = 0


@dataclass
class ChannelState:
    """One channel at a position: the command holding it and those queued behind."""

    occupant: int = NONE
    queue: list[int] = field(default_factory=list)


@dataclass
class State:
    """Everything the debugger shows at a position (after ``position`` events applied)."""

    position: int
    time: int
    pes: list[PEState]
    channels: list[ChannelState]
    #: Phase code of every issued future that is not resolved yet, by future id.
    live: dict[int, int]
    #: OP_LOG counts so far by (category string id, op string id).
    op_counts: dict[tuple[int, int], int]

    def copy(self) -> State:
        return copy.deepcopy(self)


def initial_state(index: TraceIndex) -> State:
    return State(
        position=0,
        time=0,
        pes=[PEState() for _ in range(index.n_pes)],
        channels=[ChannelState() for _ in range(len(index.channels))],
        live={},
        op_counts={},
    )


def apply(index: TraceIndex, state: State, i: int) -> None:
    """Advance ``state`` (at position i) over event i, in place."""
    c = index.columns
    kind = int(c.kind[i])
    pe = int(c.pe[i])
    state.position = i + 1
    state.time = int(c.time[i])
    loc = int(c.loc[i])
    if loc >= 0 and 0 <= pe < len(state.pes):
        state.pes[pe].loc = loc
    if kind == Kind.ISSUE:
        fut = int(c.fut[i])
        if fut >= 0:
            state.live[fut] = ISSUED
    elif kind in (Kind.CHAN_REQUEST, Kind.CHAN_GRANT, Kind.CHAN_RELEASE):
        cmd, ch = int(c.cmd[i]), int(c.chan[i])
        channel = state.channels[ch]
        if kind == Kind.CHAN_REQUEST:
            channel.queue.append(cmd)
            _advance(index, state, cmd, QUEUED)
        elif kind == Kind.CHAN_GRANT:
            if cmd in channel.queue:
                channel.queue.remove(cmd)
            channel.occupant = cmd
            _advance(index, state, cmd, TRANSFERRING)
        elif channel.occupant == cmd:
            channel.occupant = NONE
    elif kind == Kind.COMPLETE:
        _advance(index, state, int(c.cmd[i]), READY)
    elif kind == Kind.WAIT_BEGIN:
        fut = int(c.fut[i])
        if fut in state.live:
            state.live[fut] = max(state.live[fut], WAITED)
        p = state.pes[pe]
        p.status = "stalled" if _stall(index, fut) > 0 else "running"
        p.future = fut
    elif kind == Kind.WAIT_END:
        state.live.pop(int(c.fut[i]), None)
        p = state.pes[pe]
        p.status, p.future = "running", NONE
    elif kind == Kind.OP_LOG:
        key = (int(c.aux[i]), int(c.op[i]))
        state.op_counts[key] = state.op_counts.get(key, 0) + 1
    elif kind in (Kind.SCRATCH_ALLOC, Kind.SCRATCH_FREE):
        state.pes[pe].scratch = int(c.val[i])
    elif kind == Kind.KERNEL_START:
        state.pes[pe].status = "running"
    elif kind == Kind.KERNEL_END:
        p = state.pes[pe]
        p.status, p.future = "done", NONE
    elif kind == Kind.KERNEL_ERROR:
        p = state.pes[pe]
        p.status, p.future = "error", NONE
    elif kind == Kind.DEADLOCK:
        p = state.pes[pe]
        p.status, p.future = "deadlocked", int(c.fut[i])


def _advance(index: TraceIndex, state: State, cmd: int, phase: int) -> None:
    cmds = index.commands
    if 0 <= cmd < len(cmds.future):
        fut = int(cmds.future[cmd])
        if fut in state.live:
            state.live[fut] = max(state.live[fut], phase)


def _stall(index: TraceIndex, fut: int) -> int:
    futures = index.futures
    return int(futures.stall[fut]) if 0 <= fut < len(futures.stall) else 0


def _applied(events: np.ndarray, position: int) -> np.ndarray:
    """Whether each event index (-1 for never) is among the first ``position`` events."""
    return (events >= 0) & (events < position)


def future_phases(index: TraceIndex, position: int, ids: np.ndarray | None = None) -> np.ndarray:
    """Phase code of each future (all, or ``ids``) at ``position``; -1 if not issued yet."""
    f, cmds = index.futures, index.commands
    ids = np.arange(len(f.cmd)) if ids is None else np.asarray(ids, dtype=np.int64)
    cmd = f.cmd[ids]
    known = cmd >= 0
    cmd = np.where(known, cmd, 0)

    def at(events: np.ndarray) -> np.ndarray:
        return known & _applied(events, position)

    phase = np.full(len(ids), NOT_ISSUED, dtype=np.int8)
    for code, events in (
        (ISSUED, cmds.issue[cmd] if len(cmds.issue) else cmd),
        (QUEUED, cmds.request[cmd] if len(cmds.issue) else cmd),
        (TRANSFERRING, cmds.grant[cmd] if len(cmds.issue) else cmd),
        (READY, cmds.complete[cmd] if len(cmds.issue) else cmd),
    ):
        phase[at(events)] = code
    phase[_applied(f.wait_begin[ids], position)] = WAITED
    phase[_applied(f.wait_end[ids], position)] = RESOLVED
    return phase


def state_at(index: TraceIndex, position: int) -> State:
    """The state after the first ``position`` events, looked up in the index."""
    c = index.columns
    state = initial_state(index)
    state.position = position
    state.time = int(c.time[position - 1]) if position > 0 else 0
    for pe, p in enumerate(state.pes):
        locs = index.pe_loc_events[pe]
        k = np.searchsorted(locs, position)
        if k:
            p.loc = int(c.loc[locs[k - 1]])
        scratch = index.pe_scratch_events[pe]
        k = np.searchsorted(scratch, position)
        if k:
            p.scratch = int(c.val[scratch[k - 1]])
        status = index.pe_status_events[pe]
        k = np.searchsorted(status, position)
        if k:
            _status_from(index, p, int(status[k - 1]))
    cmds = index.commands
    for ch, channel in enumerate(state.channels):
        ids = index.channel_cmds[ch]
        requested = ids[_applied(cmds.request[ids], position)]
        granted = _applied(cmds.grant[requested], position)
        channel.queue = [int(x) for x in requested[~granted]]
        holding = requested[granted & ~_applied(cmds.release[requested], position)]
        channel.occupant = int(holding[-1]) if len(holding) else NONE
    # Future ids are handed out in issue order, so the issued ones are a prefix.
    issue_of_future = cmds.issue[index.futures.cmd] if len(cmds.issue) else np.empty(0, int)
    issued = int(np.count_nonzero(_applied(issue_of_future, position)))
    ids = np.arange(issued)
    phases = future_phases(index, position, ids)
    live = phases < RESOLVED
    state.live = {int(f): int(ph) for f, ph in zip(ids[live], phases[live], strict=True)}
    for key, events in index.op_log_events.items():
        count = int(np.searchsorted(events, position))
        if count:
            state.op_counts[key] = count
    return state


def _status_from(index: TraceIndex, p: PEState, i: int) -> None:
    c = index.columns
    kind = int(c.kind[i])
    if kind == Kind.KERNEL_START or kind == Kind.WAIT_END:
        p.status = "running"
    elif kind == Kind.WAIT_BEGIN:
        fut = int(c.fut[i])
        p.status = "stalled" if _stall(index, fut) > 0 else "running"
        p.future = fut
    elif kind == Kind.KERNEL_END:
        p.status = "done"
    elif kind == Kind.KERNEL_ERROR:
        p.status = "error"
    elif kind == Kind.DEADLOCK:
        p.status, p.future = "deadlocked", int(c.fut[i])
