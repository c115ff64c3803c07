"""Re-timing a launch whose PEs share HBM stacks: each stack's slots taken in grant order.

:func:`kbdebug.analysis.retime.simulate_launch` hands a launch with shared stacks
(:mod:`kbdebug.analysis.hbm_share`) here. Each PE's program runs as in
:func:`~kbdebug.analysis.retime.run_program`, except that a load or store is only put
on its channel's queue: when it reaches the head of the queue its grant cycle is known
(the later of its issue and the release before it), and :class:`Stacks` serves the
heads of every PE's queues in grant order (cycle, then the recorded order of
same-cycle grants), each taking its stack's next free slot and holding its channel
until the later of its own hold and that slot's end, as the emulator does. A program
pauses only where it needs a transfer not served yet (a wait on it, the choice among
several channels, the kernel's end): then every PE is paused, and the earliest head
of all is served. No PE can still ask for an earlier grant: one paused on a transfer
resumes after that transfer lands, one paused on a message after its sender moves on.
With nothing edited, every grant comes at its recorded cycle in its recorded order, so
the recorded schedule comes back exactly. Transfers that are no step of any program (a
composite's own) and those of the PEs a re-timing leaves as recorded take their slots
at their recorded grants, in the same order.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Generator

import numpy as np

from kbdebug.analysis.model import (
    COMPUTE,
    LOAD,
    NEVER,
    OPAQUE,
    RECV,
    SEND,
    STORE,
    WAIT,
    Program,
)

#: What a program yields when it needs a transfer that is not served yet.
NEED = 1


class _Transfer:
    """One load or store on its way through its channel's queue and its stack."""

    __slots__ = ("issued", "hold", "own", "slot", "stack", "key", "queue", "grant", "arrival")

    def __init__(self, issued, hold, own, slot, stack, key, queue):
        self.issued = issued
        #: Its hold without waiting for the stack (its recorded hold when not shared).
        self.hold = hold
        self.own = own
        self.slot = slot
        #: -1: it takes no slot of a stack.
        self.stack = stack
        self.key = key
        self.queue = queue
        self.grant = -1
        #: None until served.
        self.arrival = None


class _Queue:
    """A DMA channel of one PE: its transfers not served yet, oldest first."""

    __slots__ = ("pe", "waiting", "release", "busy", "latency")

    def __init__(self, pe: int, latency: int):
        self.pe = pe
        self.waiting: deque[_Transfer] = deque()
        #: Release cycle of its last served transfer.
        self.release = 0
        #: The emulator's busy_until: what the channel picks by among several.
        self.busy = 0
        self.latency = latency


class Stacks:
    """The shared stacks while a launch is re-timed: the heads of the channels' queues,
    served in grant order, each taking its stack's next free slot."""

    def __init__(self, n_stacks: int, pinned: dict[int, tuple[np.ndarray, ...]]):
        """``pinned``: per stack, the (grant cycles, order keys, slots) of the slots taken
        as recorded, sorted by grant and key; in the heads, each stack's next one."""
        self.free_at = [0] * n_stacks
        self.heads: list[tuple[int, int, int, object]] = []
        self._pinned = pinned
        self._next = dict.fromkeys(pinned, 0)
        for stack, (grants, keys, _) in pinned.items():
            if len(grants):
                self.heads.append((int(grants[0]), int(keys[0]), -1, stack))
        heapq.heapify(self.heads)
        self._seq = 0

    def _push(self, grant: int, key: int, item) -> None:
        self._seq += 1
        heapq.heappush(self.heads, (grant, key, self._seq, item))

    def _serve_pinned(self, stack: int) -> None:
        """Serve the stack's slots taken as recorded up to the next head of any stack:
        nothing can come between them (no program waits on them)."""
        grants, keys, slots = self._pinned[stack]
        first = self._next[stack]
        end = len(grants)
        if self.heads:
            grant, key = self.heads[0][0], self.heads[0][1]
            lo = first + int(np.searchsorted(grants[first:], grant, "left"))
            hi = first + int(np.searchsorted(grants[first:], grant, "right"))
            end = max(first + 1, lo + int(np.searchsorted(keys[lo:hi], key)))
        free = self.free_at[stack]
        if end - first < 8:
            for i in range(first, end):
                g = int(grants[i])
                free = (free if free > g else g) + int(slots[i])
        else:
            # free after slot k: the slots from j to k back to back from the latest of
            # free and each grant j before it (a max-plus scan, one pass).
            run = slots[first:end]
            taken = np.cumsum(run)
            free = int(taken[-1]) + max(free, int((grants[first:end] - (taken - run)).max()))
        self.free_at[stack] = free
        self._next[stack] = end
        if end < len(grants):
            heapq.heappush(self.heads, (int(grants[end]), int(keys[end]), -1, stack))

    def submit(self, tr: _Transfer) -> None:
        """Put ``tr`` on its channel's queue (its grant waits for the ones before it)."""
        q = tr.queue
        q.busy = (q.busy if q.busy > tr.issued else tr.issued) + tr.own
        q.waiting.append(tr)
        if len(q.waiting) == 1:
            self._head(q)

    def _head(self, q: _Queue) -> None:
        """The first transfer of ``q`` knows its grant: take its slot now if it has none
        to take, else wait in the heads for its turn."""
        while q.waiting:
            tr = q.waiting[0]
            tr.grant = q.release if q.release > tr.issued else tr.issued
            if tr.stack >= 0:
                self._push(tr.grant, tr.key, tr)
                return
            self._release(tr, tr.hold)

    def _release(self, tr: _Transfer, hold: int) -> None:
        q = tr.queue
        q.waiting.popleft()
        q.release = tr.grant + hold
        q.busy += hold - tr.own
        tr.arrival = q.release + q.latency

    def serve(self) -> _Transfer | None:
        """Serve the earliest head: the transfer (None for slots taken as recorded)."""
        grant, _, _, item = heapq.heappop(self.heads)
        if type(item) is int:
            self._serve_pinned(item)
            return None
        tr = item
        start = self.free_at[tr.stack] if self.free_at[tr.stack] > grant else grant
        self.free_at[tr.stack] = start + tr.slot
        end = start + tr.slot - grant
        self._release(tr, tr.hold if tr.hold > end else end)
        self._head(tr.queue)
        return tr


def run_shared(
    prog: Program, order, cmds, cycles, sent: dict[int, int], stacks: Stacks
) -> Generator[int | None, None, int]:
    """Re-time ``prog`` with its steps in ``order`` on shared stacks; returns its length.

    Yields None while it waits for a message another PE has not sent, ``NEED`` while it
    waits for one of its transfers that ``stacks`` has not served."""
    hw = prog.hw
    issue, lat = hw.issue, hw.hbm_latency
    kinds = prog.kind
    steps_cycles = prog.cycles if cycles is None else cycles
    cmds = prog.cmd if cmds is None else cmds
    from kbdebug.analysis.retime import _runs, _work_runs

    work_before, next_other = _work_runs(prog, cycles)
    reads = [_Queue(prog.pe, lat) for _ in range(hw.read_channels)]
    writes = [_Queue(prog.pe, lat) for _ in range(hw.write_channels)]
    shares, unshared = prog.shares, prog.unshared
    mine: list[_Transfer] = []
    transfer: dict[int, _Transfer] = {}
    links: dict[int, int] = {}
    arrival: dict[int, int] = {}
    posted: dict[int, int] = {}
    match = prog.match
    t = prog.start
    drain = t
    for first, end in _runs(order):
        s = next_other[first]
        if s != first:
            t += work_before[s if s < end else end] - work_before[first]
        while s < end:
            k = kinds[s]
            if k == WAIT:
                c = cmds[s]
                if c in posted:
                    m = match.get(c)
                    d = NEVER if m is None else sent.get(m)
                    while d is None:
                        yield None
                        d = sent.get(m)
                    p = posted[c]
                    a = d if d > p else p
                elif c in transfer:
                    tr = transfer[c]
                    while tr.arrival is None:
                        yield NEED
                    a = tr.arrival
                else:
                    a = arrival.get(c, NEVER)
                if a > t:
                    t = a
            elif k == LOAD or k == STORE:
                t += issue
                side = reads if k == LOAD else writes
                if len(side) > 1:
                    # The emulator picks by busy_until, which knows the slots of the
                    # transfers granted by now: those are served first.
                    while any(tr.arrival is None and 0 <= tr.grant <= t for tr in mine):
                        yield NEED
                    busy = [q.busy for q in side]
                    q = side[busy.index(min(busy))]
                else:
                    q = side[0]
                c = cmds[s]
                share = shares.get(c)
                if share is None:
                    tr = _Transfer(t, steps_cycles[s], steps_cycles[s], 0, -1, 0, q)
                else:
                    stack, _, slot, key, own = share
                    tr = _Transfer(t, unshared[c], own, slot, stack, key, q)
                transfer[c] = tr
                mine.append(tr)
                stacks.submit(tr)
            elif k == SEND:
                t += issue
                c = cmds[s]
                key = prog.link.get(c, -1)
                free = links.get(key, 0)
                g = free if free > t else t
                links[key] = g + steps_cycles[s]
                a = g + steps_cycles[s] + hw.ipcq_latency
                arrival[c] = a
                sent[c] = a
                if a > drain:
                    drain = a
            elif k == RECV:
                t += issue
                posted[cmds[s]] = t
            elif k == COMPUTE or k == OPAQUE:
                t += steps_cycles[s]
            after = s + 1
            s = next_other[after]
            if s != after:
                t += work_before[s if s < end else end] - work_before[after]
    if prog.complete:
        for tr in mine:
            while tr.arrival is None:
                yield NEED
            if tr.arrival > drain:
                drain = tr.arrival
        if drain > t:
            t = drain
    return t - prog.start


def drive_shared(gens: dict[int, Generator], sent: dict[int, int], stacks: Stacks):
    """Run the PEs' programs until all are done, serving the stacks' earliest head
    whenever every PE waits; PEs that can never go on take ``NEVER``."""
    out: dict[int, int] = {}
    waiting_message: set[int] = set()
    waiting_transfer: set[int] = set()

    def advance(pe: int) -> None:
        try:
            why = next(gens[pe])
        except StopIteration as stop:
            out[pe] = stop.value
            return
        (waiting_message if why is None else waiting_transfer).add(pe)

    for pe in gens:
        advance(pe)
    seen = -1
    while len(out) < len(gens):
        if waiting_message and len(sent) != seen:
            seen = len(sent)
            for pe in sorted(waiting_message):
                waiting_message.discard(pe)
                advance(pe)
            continue
        if not stacks.heads:
            for pe in gens:
                out.setdefault(pe, NEVER)
            break
        tr = stacks.serve()
        if tr is None:
            continue
        pe = tr.queue.pe
        if pe in waiting_transfer:
            waiting_transfer.discard(pe)
            advance(pe)
    return out


def simulate_shared(model, edits: dict, base: dict[int, int] | None = None):
    """:func:`kbdebug.analysis.retime.simulate_launch` on shared stacks: the edited PEs
    and those that receive from them are re-timed; the others keep ``base``, their sends
    its deliveries and their transfers the stack's slots as recorded (a fix on every PE
    of a stack re-times every one of them)."""
    from kbdebug.analysis.retime import inbound_sent

    programs = model.programs
    shared = model.shared
    stack_of = {pe: i for i, pes in enumerate(shared.stacks) for pe in pes}
    if base is None:
        pes = set(programs)
        sent: dict[int, int] = {}
        lengths: dict[int, int] = {}
    else:
        pes = model.downstream(edits) & set(programs)
        sent = inbound_sent(model, pes)
        lengths = dict(base)
    touched = {stack_of[pe] for pe in pes if pe in stack_of}
    timed = np.fromiter(pes, dtype=np.int64, count=len(pes))
    pinned = {}
    for i in touched:
        grants, keys, slots, owners = shared.taken[i]
        keep = ~np.isin(owners, timed)
        pinned[i] = (grants[keep], keys[keep], slots[keep])
    stacks = Stacks(len(shared.stacks), pinned)
    gens = {}
    for pe in pes:
        prog = programs[pe]
        order, cmds, cycles = edits.get(pe, (range(len(prog)), None, None))
        gens[pe] = run_shared(prog, order, cmds, cycles, sent, stacks)
    lengths.update(drive_shared(gens, sent, stacks))
    return lengths, sent
