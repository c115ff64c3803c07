"""The debugger's state at a position: computed from the index, or by applying events one by one.

Two independent ways to the same answer: ``state_at`` looks everything up in
the index (used for checkpoints), ``apply`` / ``apply_events`` advance a state
event by event (used for stepping from a checkpoint).

What the state says, position by position (position p: events 0..p-1 applied):

- a PE is idle until its KERNEL_START, then running; a WAIT_BEGIN makes it
  stalled on the future if the wait blocks it (``Futures.blocks``), else it
  stays running with the future noted until the WAIT_END; KERNEL_END makes it
  done, KERNEL_ERROR error, DEADLOCK deadlocked (on the future it waits for);
  its ``loc`` is that of its latest event carrying one, its ``scratch`` that of
  its latest scratch event;
- a channel's occupant is the command granted and not yet released, its queue
  the commands requested and not yet granted, in request order;
- a future's phase is the furthest it has reached (issued at ISSUE, queued at
  its command's CHAN_REQUEST, transferring at CHAN_GRANT, ready at COMPLETE,
  waiting at WAIT_BEGIN: being waited on now), so a future waited before its data
  arrives stays waiting; it leaves ``live`` at its WAIT_END (resolved).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.replay.index import NONE, TraceIndex

#: Future phases in lifecycle order; a future's phase only moves forward.
PHASES = ("issued", "queued", "transferring", "ready", "waiting", "resolved")
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
    #: Loc id of the PE's latest located event (a tl call, its start), -1 before the first.
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
        """A copy sharing nothing mutable with this state."""
        return State(
            position=self.position,
            time=self.time,
            pes=[PEState(p.status, p.future, p.loc, p.scratch) for p in self.pes],
            channels=[ChannelState(c.occupant, c.queue.copy()) for c in self.channels],
            live=self.live.copy(),
            op_counts=self.op_counts.copy(),
        )


def initial_state(index: TraceIndex) -> State:
    return State(
        position=0,
        time=0,
        pes=[PEState() for _ in range(index.n_pes)],
        channels=[ChannelState() for _ in range(len(index.channels))],
        live={},
        op_counts={},
    )


_ISSUE = int(Kind.ISSUE)
_CHAN_REQUEST = int(Kind.CHAN_REQUEST)
_CHAN_GRANT = int(Kind.CHAN_GRANT)
_CHAN_RELEASE = int(Kind.CHAN_RELEASE)
_COMPLETE = int(Kind.COMPLETE)
_WAIT_BEGIN = int(Kind.WAIT_BEGIN)
_WAIT_END = int(Kind.WAIT_END)
_OP_LOG = int(Kind.OP_LOG)
_SCRATCH_ALLOC = int(Kind.SCRATCH_ALLOC)
_SCRATCH_FREE = int(Kind.SCRATCH_FREE)
_KERNEL_START = int(Kind.KERNEL_START)
_KERNEL_END = int(Kind.KERNEL_END)
_KERNEL_ERROR = int(Kind.KERNEL_ERROR)
_DEADLOCK = int(Kind.DEADLOCK)


def apply(index: TraceIndex, state: State, i: int) -> None:
    """Advance ``state`` (at position i) over event i, in place."""
    _apply_range(index, state, i, i + 1)


def apply_events(index: TraceIndex, state: State, stop: int) -> None:
    """Advance ``state`` over the events from its position up to ``stop``, in place."""
    _apply_range(index, state, state.position, stop)


def _lookup(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``table[ids]``, -1 where an id is outside the table."""
    ok = (ids >= 0) & (ids < len(table))
    return np.where(ok, table[np.where(ok, ids, 0)] if len(table) else NONE, NONE)


def _apply_range(index: TraceIndex, state: State, start: int, stop: int) -> None:
    if stop <= start:
        return
    c = index.columns
    window = slice(start, stop)
    cmds = c.cmd[window]
    futs = c.fut[window]
    # The future each event's command serves, and whether a wait on each event's
    # future blocks, looked up for the whole window at once.
    served_by = _lookup(index.commands.future, cmds).tolist()
    blocks = _lookup(index.futures.blocks, futs).tolist()
    pes, channels, live, op_counts = state.pes, state.channels, state.live, state.op_counts
    for kind, pe, cmd, fut, chan, loc, op, aux, val, served, blocking in zip(
        c.kind[window].tolist(),
        c.pe[window].tolist(),
        cmds.tolist(),
        futs.tolist(),
        c.chan[window].tolist(),
        c.loc[window].tolist(),
        c.op[window].tolist(),
        c.aux[window].tolist(),
        c.val[window].tolist(),
        served_by,
        blocks,
        strict=True,
    ):
        p = pes[pe]
        if loc >= 0:
            p.loc = loc
        if kind == _ISSUE:
            if fut >= 0:
                live[fut] = ISSUED
        elif kind == _CHAN_REQUEST:
            channels[chan].queue.append(cmd)
            if served in live and live[served] < QUEUED:
                live[served] = QUEUED
        elif kind == _CHAN_GRANT:
            channel = channels[chan]
            if cmd in channel.queue:
                channel.queue.remove(cmd)
            channel.occupant = cmd
            if served in live and live[served] < TRANSFERRING:
                live[served] = TRANSFERRING
        elif kind == _CHAN_RELEASE:
            channel = channels[chan]
            if channel.occupant == cmd:
                channel.occupant = NONE
        elif kind == _COMPLETE:
            if served in live and live[served] < READY:
                live[served] = READY
        elif kind == _WAIT_BEGIN:
            if fut in live:
                live[fut] = WAITED
            p.status = "stalled" if blocking == 1 else "running"
            p.future = fut
        elif kind == _WAIT_END:
            live.pop(fut, None)
            p.status, p.future = "running", NONE
        elif kind == _OP_LOG:
            key = (aux, op)
            op_counts[key] = op_counts.get(key, 0) + 1
        elif kind == _SCRATCH_ALLOC or kind == _SCRATCH_FREE:
            p.scratch = val
        elif kind == _KERNEL_START:
            p.status = "running"
        elif kind == _KERNEL_END:
            p.status, p.future = "done", NONE
        elif kind == _KERNEL_ERROR:
            p.status, p.future = "error", NONE
        elif kind == _DEADLOCK:
            p.status, p.future = "deadlocked", fut
    state.position = stop
    state.time = int(c.time[stop - 1])


def _applied(events: np.ndarray, position: int) -> np.ndarray:
    """Whether each event index (-1 for never) is among the first ``position`` events."""
    return (events >= 0) & (events < position)


def future_phases(index: TraceIndex, position: int, ids: np.ndarray | None = None) -> np.ndarray:
    """Phase code of each future (all, or ``ids``) at ``position``; -1 if not issued yet."""
    f = index.futures
    ids = np.arange(len(f.cmd)) if ids is None else np.asarray(ids, dtype=np.int64)
    phase = np.full(len(ids), NOT_ISSUED, dtype=np.int8)
    known = (ids >= 0) & (ids < len(f.cmd))
    ids = np.where(known, ids, 0)
    for code, events in (
        (ISSUED, f.issue),
        (QUEUED, f.request),
        (TRANSFERRING, f.grant),
        (READY, f.complete),
        (WAITED, f.wait_begin),
        (RESOLVED, f.wait_end),
    ):
        if len(events):
            # Later phases overwrite earlier ones: the furthest reached wins, so a future
            # waited on before its data arrived stays waited.
            phase[known & _applied(events[ids], position)] = code
    return phase


def state_at(index: TraceIndex, position: int) -> State:
    """The state after the first ``position`` events, looked up in the index."""
    position = max(0, min(int(position), index.n_events))
    c = index.columns
    state = initial_state(index)
    state.position = position
    state.time = int(c.time[position - 1]) if position > 0 else 0
    for pe, p in enumerate(state.pes):
        locs = index.pe_loc_events[pe]
        k = int(np.searchsorted(locs, position))
        if k:
            p.loc = int(c.loc[locs[k - 1]])
        scratch = index.pe_scratch_events[pe]
        k = int(np.searchsorted(scratch, position))
        if k:
            p.scratch = int(c.val[scratch[k - 1]])
        status = index.pe_status_events[pe]
        k = int(np.searchsorted(status, position))
        if k:
            _status_from(index, p, int(status[k - 1]))
    for channel, table in zip(state.channels, index.channel_tables, strict=True):
        # Commands released before the position form a prefix (done_by); the rest of
        # those requested before it are queued or hold the channel.
        first = int(np.searchsorted(table.done_by, position))
        last = int(np.searchsorted(table.request, position))
        if first >= last:
            continue
        part = slice(first, last)
        granted = _applied(table.grant[part], position)
        released = _applied(table.release[part], position)
        cmds = table.cmds[part]
        channel.queue = cmds[~granted].tolist()
        holding = cmds[granted & ~released]
        channel.occupant = int(holding[-1]) if len(holding) else NONE
    state.live = _live(index, position)
    for key, events in index.op_log_events.items():
        count = int(np.searchsorted(events, position))
        if count:
            state.op_counts[key] = count
    return state


def _live(index: TraceIndex, position: int) -> dict[int, int]:
    """Phase by future id of the futures issued and not resolved at ``position``."""
    t = index.live_table
    first = int(np.searchsorted(t.resolved_done_by, position))
    last = int(np.searchsorted(t.resolved_issue, position))
    resolved = t.resolved[first:last]
    resolved = resolved[index.futures.wait_end[resolved] >= position]
    never = t.unresolved[: int(np.searchsorted(t.unresolved_issue, position))]
    ids = np.sort(np.concatenate([resolved, never]))
    phases = future_phases(index, position, ids)
    return dict(zip(ids.tolist(), phases.tolist(), strict=True))


def _status_from(index: TraceIndex, p: PEState, i: int) -> None:
    c = index.columns
    kind = int(c.kind[i])
    if kind == _KERNEL_START or kind == _WAIT_END:
        p.status = "running"
    elif kind == _WAIT_BEGIN:
        fut = int(c.fut[i])
        blocks = index.futures.blocks
        p.status = "stalled" if 0 <= fut < len(blocks) and blocks[fut] else "running"
        p.future = fut
    elif kind == _KERNEL_END:
        p.status = "done"
    elif kind == _KERNEL_ERROR:
        p.status = "error"
    elif kind == _DEADLOCK:
        p.status, p.future = "deadlocked", int(c.fut[i])
