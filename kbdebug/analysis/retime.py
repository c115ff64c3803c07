"""Re-timing and the bound of a launch: every PE's program run by the emulator's rules, together.

Each PE's program runs as a generator that pauses when it needs a message whose
send another PE has not reached yet; :func:`simulate_launch` and
:func:`bound_launch` drive all of them in turns, so a fix on one PE re-times
every PE that receives from it.

- **Re-timing** follows the emulator: FIFO channels that free up first, a
  transfer's hold then its latency, a receive ready at the later of its post and
  its message's delivery, the kernel's end drained. With every step in its
  recorded place it reproduces the recorded run exactly.
- **The bound** is the critical path of the dataflow graph: compute and issue
  cycles in program order, each value needed at its first use (not its wait),
  arriving no earlier than its own transfer plus latency after the last host
  read (or receive wait) before its issue, and no earlier than the transfers of
  every load needed so far spread over the read channels (issue cycles left out
  of the chain, since a placement can hide them under a stall, but counted in the
  kernel's serial work); a load a receive gates (one that needs the message, or
  reads bytes another PE stores and is issued after the receive's wait) no earlier than
  the message, which holds those loads, not the kernel nor the other loads (their issues
  may move down with the receive's wait, below work that needs neither, or the others
  above it); a load that reads back
  a store waits for the store to land; a message no earlier than its send's
  bound on the sending PE, where a send leaves as soon as the data it sends is
  ready (its loaded or received value, or the compute that produced it) and the
  receives waited before it have arrived, not where the kernel issued it (a send
  issued after work it does not need moves up; one whose data the model cannot
  place stays where it was issued); a store likewise when the trace records what
  produced its data (format 1.6), the write channels then taking the stores in any
  order; stores and sends drained before the end; consecutive
  composite calls over the same B at the length of one call over all their rows.
  No placement of the program's issues and waits, on any PE, ends sooner.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING

import numpy as np

from kbdebug.analysis.composite_model import pipeline_length
from kbdebug.analysis.model import (
    BARRIER,
    COMPUTE,
    LOAD,
    NEVER,
    OPAQUE,
    RECV,
    SEND,
    STORE,
    WAIT,
    Program,
    _ints,
)

if TYPE_CHECKING:
    from kbdebug.analysis.model import Model

#: Bound buckets (one per host read or receive wait) updated per needed load; older ones
#: only ever under-count, which keeps the bound a lower bound while its cost stays linear.
BUCKET_WINDOW = 256

#: One PE's edit: (order of steps, commands per step or None, cycles per step or None).
Edit = tuple[Iterable[int], "list[int] | None", "np.ndarray | None"]


def _runs(order) -> Iterable[tuple[int, int]]:
    """``order`` as runs of consecutive steps, ``(first, end)`` each."""
    if isinstance(order, range) and order.step == 1:
        return [(order.start, order.stop)] if len(order) else []
    steps = np.asarray(order, dtype=np.int64)
    if not len(steps):
        return []
    breaks = np.flatnonzero(steps[1:] != steps[:-1] + 1) + 1
    firsts = steps[np.append(0, breaks)]
    ends = steps[np.append(breaks - 1, len(steps) - 1)] + 1
    return zip(firsts.tolist(), ends.tolist(), strict=True)


def _work_runs(prog: Program, cycles) -> tuple:
    if cycles is None:
        return prog._work_runs
    kinds = np.frombuffer(prog.kind, dtype=np.int8) if len(prog) else np.zeros(0, np.int8)
    work = (kinds == COMPUTE) | (kinds == OPAQUE)
    before = np.zeros(len(kinds) + 1, dtype=np.int64)
    np.cumsum(np.where(work, np.asarray(cycles, dtype=np.int64), 0), out=before[1:])
    return _ints(before), prog._work_runs[1]


def run_program(
    prog: Program, order, cmds=None, cycles=None, sent: dict[int, int] | None = None
) -> Generator[None, None, int]:
    """Re-time ``prog`` with its steps in ``order``; returns its length from its start.

    ``sent`` (shared by the PEs of one launch) gets each send's delivery and gives each
    receive its message's: the generator pauses until the sender got there. Without it,
    receives arrive as recorded.
    """
    hw = prog.hw
    issue, lat = hw.issue, hw.hbm_latency
    kinds = prog.kind
    steps_cycles = prog.cycles if cycles is None else cycles
    cmds = prog.cmd if cmds is None else cmds
    work_before, next_other = _work_runs(prog, cycles)
    reads = [0] * hw.read_channels
    writes = [0] * hw.write_channels
    links: dict[int, int] = {}
    arrival: dict[int, int] = {}
    posted: dict[int, int] = {}
    match, delivery = prog.match, prog.delivery
    t = prog.start
    drain = t
    for first, end in _runs(order):
        # Each step of the run that is not work, the work steps before it added up.
        s = next_other[first]
        if s != first:
            t += work_before[s if s < end else end] - work_before[first]
        while s < end:
            k = kinds[s]
            if k == WAIT:
                c = cmds[s]
                if c in posted:
                    if sent is None:
                        d = delivery.get(c, NEVER)
                    else:
                        m = match.get(c)
                        d = NEVER if m is None else sent.get(m)
                        while d is None:
                            yield
                            d = sent.get(m)
                    p = posted[c]
                    a = d if d > p else p
                else:
                    a = arrival.get(c, NEVER)
                if a > t:
                    t = a
            elif k == LOAD or k == STORE:
                t += issue
                # The DMA channel of its side that frees up first (lowest index on ties).
                free = reads if k == LOAD else writes
                i = free.index(min(free))
                g = free[i] if free[i] > t else t
                free[i] = g + steps_cycles[s]
                a = g + steps_cycles[s] + lat
                arrival[cmds[s]] = a
                if a > drain:
                    drain = a
            elif k == SEND:
                t += issue
                c = cmds[s]
                key = prog.link.get(c, -1)
                free = links.get(key, 0)
                g = free if free > t else t
                links[key] = g + steps_cycles[s]
                a = g + steps_cycles[s] + hw.ipcq_latency
                arrival[c] = a
                if sent is not None:
                    sent[c] = a
                if a > drain:
                    drain = a
            elif k == RECV:
                t += issue
                posted[cmds[s]] = t
            elif k == COMPUTE or k == OPAQUE:  # met alone only without the work runs
                t += steps_cycles[s]
            after = s + 1
            s = next_other[after]
            if s != after:
                t += work_before[s if s < end else end] - work_before[after]
    if prog.complete and drain > t:
        t = drain
    return t - prog.start


def _drive(gens: dict[int, Generator], progress: dict) -> dict[int, int]:
    """Run the PEs' generators in turns until all are done; PEs that can never get their
    message (a deadlock, in the recording or in an edit) take ``NEVER``."""
    out: dict[int, int] = {}
    active = dict(gens)
    while active:
        before = len(progress)
        finished = False
        for pe, gen in list(active.items()):
            try:
                next(gen)
            except StopIteration as stop:
                out[pe] = stop.value
                del active[pe]
                finished = True
        if not finished and len(progress) == before:
            for pe in active:
                out[pe] = NEVER
            break
    return out


#: PEs re-timed round by round before the whole downstream set is, at once.
EXPAND_PES = 8


def simulate_launch(
    model: Model, edits: dict[int, Edit], base: dict[int, int] | None = None
) -> tuple[dict[int, int], dict[int, int]]:
    """(per PE, its re-timed length; per send the re-timed PEs made or received, its
    delivery) with ``edits`` applied.

    Only the edited PEs and those that receive from them are re-timed; the others keep
    ``base`` (the recorded re-timing) and their sends its deliveries
    (:attr:`~kbdebug.analysis.model.Model.recorded_sent`, which holds every send's when
    ``base`` is None). PEs that share HBM stacks are re-timed with each stack's slots in
    grant order (:mod:`kbdebug.analysis.retime_shared`).
    """
    if model.shared is not None:
        from kbdebug.analysis.retime_shared import simulate_shared

        return simulate_shared(model, edits, base)
    programs = model.programs
    if base is None:
        return _retime(model, edits, set(programs), {}, {})
    # The edited PEs first, the others' messages as recorded; then, while some of their
    # messages arrive at another time, those messages' receivers too, each round from
    # the start. A PE whose messages all arrive as recorded ends as recorded (its
    # schedule depends on its program and its messages' arrivals), so this is exact;
    # past EXPAND_PES PEs the whole downstream set is re-timed at once, as a change
    # that goes round a ring would take a round per PE.
    recorded = model.recorded_sent
    receiver = model.receiver
    sends_of = model.sends_of
    dirty = set(edits) & set(programs)
    while len(dirty) <= EXPAND_PES:
        lengths, sent = _retime(model, edits, dirty, dict(base), inbound_sent(model, dirty))
        changed = {
            receiver[c][0]
            for pe in dirty
            for c in sends_of.get(pe, ())
            if c in recorded and sent.get(c) != recorded[c] and c in receiver
        } - dirty
        if not changed:
            return lengths, sent
        dirty |= changed
    pes = model.downstream(edits) & set(programs)
    return _retime(model, edits, pes, dict(base), inbound_sent(model, pes))


def inbound_sent(model: Model, pes: set[int]) -> dict[int, int]:
    """Per message a PE of ``pes`` receives from a PE outside them, its recorded delivery:
    what re-timing ``pes`` reads of the others (their own sends are re-timed anew). Built
    from the receives of ``pes``, not from every send of the launch, so a candidate fix of
    one PE costs that PE's work, not the mesh's."""
    recorded = model.recorded_sent
    sender = model.sender
    return {
        m: recorded[m]
        for pe in pes
        for m in model.programs[pe].match.values()
        if sender.get(m) not in pes and m in recorded
    }


def _retime(
    model: Model, edits: dict[int, Edit], pes: set[int], lengths: dict, sent: dict
) -> tuple[dict[int, int], dict[int, int]]:
    """Re-time ``pes`` together, their sends' deliveries added to ``sent`` (which holds
    the deliveries they read of the other PEs); the other PEs keep ``lengths``."""
    programs = model.programs
    gens = {}
    for pe in pes:
        prog = programs[pe]
        order, cmds, cycles = edits.get(pe, (range(len(prog)), None, None))
        gens[pe] = run_program(prog, order, cmds, cycles, sent)
    lengths.update(_drive(gens, sent))
    return lengths, sent


# --- the bound ----------------------------------------------------------------------


def _bound_cycles(prog: Program) -> np.ndarray:
    """Per step, its cycles in the bound: a run of consecutive composite calls that could
    be one call costs what one call over all their rows would."""
    cycles = np.frombuffer(prog.cycles, dtype=np.int64).copy() if len(prog) else np.zeros(0)
    if prog.unshared:
        # A transfer's recorded hold counts its wait for a shared stack, which depends on
        # the placement: the bound takes its hold with the stack to itself.
        for s, c in enumerate(prog.cmd):
            if c in prog.unshared and prog.kind[s] in (LOAD, STORE):
                cycles[s] = prog.unshared[c]
    for first, run in composite_runs(prog):
        if len(run) < 2:
            merged = pipeline_length(prog.hw, run)
            cycles[first] = min(int(cycles[first]), merged)
            continue
        steps = range(first, first + len(run))
        merged = pipeline_length(prog.hw, run)
        total = int(sum(cycles[s] for s in steps))
        if merged < total:
            cycles[first] = merged
            for s in steps[1:]:
                cycles[s] = 0
    return cycles


def composite_runs(prog: Program) -> list[tuple[int, list]]:
    """(first step, calls) of each run of composite calls, one right after the other in
    program order, each continuing the previous one's rows over the same B."""
    out: list[tuple[int, list]] = []
    for s in sorted(prog.composites):
        call = prog.composites[s]
        if out:
            first, run = out[-1]
            if first + len(run) == s and call.continues(run[-1]):
                run.append(call)
                continue
        out.append((s, [call]))
    return out


def _bound_runs(prog: Program, cycles: np.ndarray) -> tuple:
    """(per step, the bound's work cycles before it; per step, the first step at or after
    it that is not work, needs data or produces what a send sends)."""
    n = len(prog)
    kinds = np.frombuffer(prog.kind, dtype=np.int8) if n else np.zeros(0, np.int8)
    needs = np.diff(np.frombuffer(prog.need_at, dtype=np.int64)) if n else np.zeros(0)
    work = ((kinds == COMPUTE) | (kinds == OPAQUE)) & (needs == 0)
    # The computes whose data a send sends: their end is when that send may leave.
    work[[p for p in prog.producer.values() if p >= 0]] = False
    before = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.where(work, cycles, 0), out=before[1:])
    other = np.append(~work, True)
    others_before = np.cumsum(other) - other
    return _ints(before), _ints(np.flatnonzero(other)[others_before])


def bound_program(prog: Program, sent: dict[int, int] | None) -> Generator[None, None, int]:
    """The bound of ``prog``'s length (see the module's docstring). ``sent``: per send
    command, its delivery's bound (filled for this PE's sends, read for its receives;
    None: receives as recorded). Fills ``prog.earliest``."""
    earliest = prog.earliest = {}
    hw = prog.hw
    issue, lat, n = hw.issue, hw.hbm_latency, hw.read_channels
    kinds, cmds = prog.kind, prog.cmd
    cycles = _bound_cycles(prog)
    transfer = {**prog.transfer, **prog.unshared} if prog.unshared else prog.transfer
    need_at, need = prog.need_at, prog.need
    t = prog.start
    # Per bucket (loads released after the same gate): release cycle, and release +
    # (transfers of the loads needed so far in this bucket or later) / read channels.
    release = [t + issue]
    peak = np.empty(64)
    peak[0] = float(t + issue)
    best = 0.0
    bucket_of: dict[int, int] = {}
    counted: set[int] = set()
    writes = [0] * hw.write_channels
    first_write, write_work = NEVER, 0
    links: dict[int, int] = {}
    done_by: dict[int, int] = {}
    landing: dict[int, int] = {}
    drain = t
    # Per producing compute step, its end; the latest arrival of a receive waited so far
    # (or a host read): a send leaves no earlier than either.
    producer = prog.producer
    done_at: dict[int, int] = {}
    gated = t
    # The earliest a load the latest receive gates may leave: its message's arrival, and no
    # earlier than the kernel got to the step that first needed it. Only those loads wait
    # for it (the others may move above the receive's wait, with it moved down).
    gate_release = t + issue
    signalled = prog.signalled
    steps = len(kinds)
    work_before, next_special = _bound_runs(prog, cycles)
    s = 0
    while s < steps:
        o = next_special[s]
        if o != s:  # a run of work steps that need nothing: their cycles add up
            t += work_before[o] - work_before[s]
            s = o
            continue
        k = kinds[s]
        # A send does not hold the kernel: what it needs delays only its own departure;
        # nor does a store whose producer the trace recorded (format 1.6).
        departs = k == SEND or (k == STORE and s in producer)
        # Nor does a load that a receive gates: its issue may move down with the receive's
        # wait, below work that needs neither (the message holds only the load's release).
        ready = gated
        gate = False
        if need_at[s + 1] > need_at[s]:
            arrived = 0
            for c in need[need_at[s] : need_at[s + 1]]:
                if c in bucket_of:  # a load
                    if c not in counted:
                        counted.add(c)
                        b = bucket_of[c]
                        lo = max(0, b + 1 - BUCKET_WINDOW)
                        window = peak[lo : b + 1]
                        window += transfer[c] / n
                        best = max(best, float(window.max()))
                        earliest[c] = max(math.ceil(best) + lat, done_by[c])
                    a = earliest[c]
                elif c in prog.delivery:  # a receive
                    gate = True
                    if sent is None:
                        a = prog.delivery[c]
                    else:
                        m = prog.match.get(c)
                        a = NEVER if m is None else sent.get(m)
                        while a is None:
                            yield
                            a = sent.get(m)
                    earliest.setdefault(c, a)
                    arrived = max(arrived, a)
                    if k == LOAD:
                        continue
                else:
                    a = done_by.get(c, t)
                    earliest.setdefault(c, a)
                if departs:
                    ready = max(ready, a)
                elif a > t:
                    t = a
            if gate:
                gated = max(gated, arrived)
                gate_release = max(gate_release, max(t, arrived) + issue)
        if k == LOAD:
            c = cmds[s]
            bucket_of[c] = len(release) - 1
            single = release[-1] + cycles[s] + lat
            if gate or c in signalled:
                single = max(single, gate_release + cycles[s] + lat)
            for st in prog.fences.get(c, ()):
                single = max(single, landing.get(st, 0) + cycles[s] + lat)
            done_by[c] = single
            drain = max(drain, single)
        elif k == STORE or k == SEND:
            c = cmds[s]
            p = producer.get(s)
            if p is not None:  # -1: made where the model cannot say; -2: by no compute
                ready = max(ready, done_at.get(p, t) if p >= 0 else t if p == -1 else ready)
            if k == STORE and p is None:
                i = writes.index(min(writes))
                g = max(writes[i], t)
                writes[i] = g + cycles[s]
                a = g + cycles[s] + lat
                landing[c] = a
            elif k == STORE:
                # A store that may leave once its data is ready may leave in any order:
                # the write channels bound only the total, from the first one ready.
                g = ready
                first_write = min(first_write, ready)
                write_work += int(cycles[s])
                drain = max(drain, first_write + -(-write_work // hw.write_channels) + lat)
                a = g + cycles[s] + lat
                landing[c] = a
            else:
                key = prog.link.get(c, -1)
                g = max(links.get(key, 0), ready)
                links[key] = g + cycles[s]
                a = g + cycles[s] + hw.ipcq_latency
                if sent is not None:
                    sent[c] = a
            done_by[c] = a
            drain = max(drain, a)
        elif k == COMPUTE or k == OPAQUE:
            t += int(cycles[s])
            done_at[s] = t
        elif k == BARRIER:
            gated = max(gated, t)
            release.append(t + issue)
            peak = _put(peak, len(release) - 1, float(t + issue))
        s += 1
    if prog.complete:
        # Every load lands before the kernel ends, needed or not.
        for c, b in bucket_of.items():
            if c not in counted:
                counted.add(c)
                lo = max(0, b + 1 - BUCKET_WINDOW)
                window = peak[lo : b + 1]
                window += transfer[c] / n
                best = max(best, float(window.max()))
        if bucket_of:
            t = max(t, math.ceil(best) + lat)
        t = max(t, drain)
    # Issue cycles are serial work too, but a placement can hide any of them under a
    # stall (an issue moved above a wait, a wait moved below an issue): the chain leaves
    # them out, and the kernel is at least all of its work end to end.
    step_kinds = np.frombuffer(kinds, dtype=np.int8) if steps else np.zeros(0, np.int8)
    issues = int(np.isin(step_kinds, (LOAD, STORE, SEND, RECV)).sum())
    work = int(cycles[(step_kinds == COMPUTE) | (step_kinds == OPAQUE)].sum())
    t = max(t, prog.start + work + issue * issues)
    if prog.shares and prog.complete:
        # Its own slots on a shared stack come one after another, the first no earlier
        # than its first issue, and the last lands before the kernel ends.
        slots = sum(share[2] for share in prog.shares.values())
        t = max(t, prog.start + issue + slots + lat)
    return int(min(t, NEVER) - prog.start)


def bound_launch(model: Model) -> dict[int, int]:
    """Per PE, the bound of its kernel's length, all PEs together."""
    sent: dict[int, int] = {}
    gens = {pe: bound_program(prog, sent) for pe, prog in model.programs.items()}
    return _drive(gens, sent)


def _put(values: np.ndarray, at: int, value: float) -> np.ndarray:
    """``values`` with ``value`` at ``at`` (the next free place), doubled first if full."""
    if at == len(values):
        values = np.concatenate([values, np.empty(len(values))])
    values[at] = value
    return values
