"""The critical-path model of each PE: its kernel as a program, re-timed under other placements.

From the trace alone, each PE's kernel is rebuilt as the sequence of its tl steps
in program order (issues, compute, waits, host reads of loaded values) with the
hardware figures the header records. Two things are computed from it:

- **the bound**: a lower bound on the kernel's time for the same program under
  any placement of its issues. The kernel is one serial chain (compute and
  issue cycles add up); a wait on a load cannot end before the transfers of
  every load waited so far, spread over the read channels, plus the HBM
  latency, each load released no earlier than the last host read of loaded
  data before its issue (its address may come from that data); stores and
  sends drain through their channel plus latency before the kernel ends; a
  receive completes no earlier than its matching send arrived.
- **re-timing** (:meth:`Program.simulate`): the kernel's time for a given order
  of its steps, following the emulator's rules (FIFO channels that free up
  first, hold then latency, drain at the end). With the steps in their
  recorded order it reproduces the recorded time; a finding's estimated saving
  is the recorded order's time minus the time with its fix applied.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.replay.index import NONE, TraceIndex
from kbdebug.replay.summary import event_times, hold_cycles, kernel_spans

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay

# Step kinds of a program.
LOAD, STORE, SEND, RECV, COMPUTE, WAIT, OPAQUE, BARRIER = range(8)
#: A time that never comes (a receive never matched, a load never granted).
NEVER = 1 << 62
#: Host-read event kind (format 1.1); kernels that read loaded values on the host emit it.
HOST_READ = 17
#: Bound buckets (one per host read) updated per wait; older ones only ever under-count,
#: which keeps the bound a lower bound while its cost stays linear.
BUCKET_WINDOW = 256

_OP_STEP = {"load": LOAD, "load_async": LOAD, "store": STORE, "send": SEND, "recv_async": RECV}


@dataclass(frozen=True)
class PEBound:
    """One PE's achieved kernel time against its critical-path bound."""

    pe: int
    #: Cycles of the kernel's start and end on this PE (end of trace if it never ended).
    start: int
    end: int
    #: end - start.
    achieved: int
    #: No placement of this program's issues can make the kernel take less.
    bound: int
    #: bound / achieved (1.0 for a kernel that took no time).
    efficiency: float


@dataclass
class Hardware:
    """The figures of one PE the model needs, from the trace header."""

    issue: int
    hbm_latency: int
    ipcq_latency: int
    read_channels: int
    write_channels: int
    hbm_bytes_per_cycle: int

    @classmethod
    def of(cls, index: TraceIndex, pe: int) -> Hardware:
        config = index.header.get("config") or {}
        reads = sum(
            1 for ch in index.channels if ch.get("pe") == pe and ch.get("kind") == "dma_read"
        )
        writes = sum(
            1 for ch in index.channels if ch.get("pe") == pe and ch.get("kind") == "dma_write"
        )

        def number(name: str, default: int) -> int:
            value = config.get(name, default)
            return (
                int(value) if isinstance(value, int | float) and math.isfinite(value) else default
            )

        return cls(
            issue=max(number("issue_cycles", 4), 0),
            hbm_latency=max(number("hbm_latency", 500), 0),
            ipcq_latency=max(number("ipcq_latency", 100), 0),
            read_channels=max(reads or number("dma_read_channels", 1), 1),
            write_channels=max(writes or number("dma_write_channels", 1), 1),
            hbm_bytes_per_cycle=max(number("hbm_bytes_per_cycle", 48), 1),
        )


@dataclass
class Program:
    """One PE's kernel as steps in program order, with what re-timing each step needs."""

    pe: int
    hw: Hardware
    #: Cycle the kernel started, and its recorded end (end of trace if it never ended).
    start: int
    end: int
    #: Whether the kernel ran to its end (no error, deadlock or cut).
    complete: bool
    #: Per step: kind, command id (the waited command for WAIT), event index, cycles
    #: (transfer or compute hold; an opaque step's recorded length), the recorded cycle.
    # Flat arrays, not lists: 1 or 8 bytes a step instead of 8 plus an int object of 32
    # for most values (at ten million events a list of command ids held ~150 MB, and
    # its objects, spread among freed ones, kept the allocator's arenas resident). An
    # item read from them costs a little more than from a list; the re-timing loops
    # read a few per step.
    kind: array[int] = field(default_factory=lambda: array("b"))
    cmd: array[int] = field(default_factory=lambda: array("q"))
    event: array[int] = field(default_factory=lambda: array("q"))
    cycles: array[int] = field(default_factory=lambda: array("q"))
    at: array[int] = field(default_factory=lambda: array("q"))
    #: Per command of this PE: when its data arrives whatever this PE does (receives:
    #: the matching send's delivery), and the link a send uses.
    delivery: dict[int, int] = field(default_factory=dict)
    link: dict[int, int] = field(default_factory=dict)
    #: Per load, store or send command of this PE: its transfer cycles.
    transfer: dict[int, int] = field(default_factory=dict)
    #: Filled by ``bound``: per waited command, the earliest its data can arrive.
    earliest: dict[int, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def achieved(self) -> int:
        return self.end - self.start

    @cached_property
    def recorded_time(self) -> int:
        """The re-timed length with the steps in their recorded order."""
        return self.simulate(range(len(self.kind)))

    @cached_property
    def bound_cycles(self) -> int:
        """``bound()``, computed once (never above the recorded length)."""
        return min(self.bound(), self.achieved)

    @cached_property
    def _work_runs(self) -> tuple[array[int], array[int]]:
        """(per step, the compute and opaque cycles of the steps before it; per step, the
        first step at or after it that is neither): re-timing adds up a run of work
        steps at once instead of one by one (most steps of a kernel are its work)."""
        kinds = np.frombuffer(self.kind, dtype=np.int8) if len(self) else np.zeros(0, np.int8)
        cycles = np.frombuffer(self.cycles, dtype=np.int64) if len(self) else np.zeros(0, np.int64)
        work = (kinds == COMPUTE) | (kinds == OPAQUE)
        before = np.zeros(len(kinds) + 1, dtype=np.int64)
        np.cumsum(np.where(work, cycles, 0), out=before[1:])
        # The first non-work step at or after s is the k-th non-work step (or the end),
        # k being the number of non-work steps before s.
        other = np.append(~work, True)
        others_before = np.cumsum(other) - other
        next_other = np.flatnonzero(other)[others_before]
        return _ints(before), _ints(next_other)

    @staticmethod
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

    def simulate(self, order, cmds: list[int] | None = None) -> int:
        """The kernel's length (cycles from its start) with its steps run in ``order``;
        ``cmds`` replaces the command each step names (a wait re-pointed elsewhere)."""
        hw = self.hw
        issue, lat = hw.issue, hw.hbm_latency
        kinds, cycles = self.kind, self.cycles
        cmds = self.cmd if cmds is None else cmds
        work_before, next_other = self._work_runs
        reads = [0] * hw.read_channels
        writes = [0] * hw.write_channels
        links: dict[int, int] = {}
        arrival: dict[int, int] = {}
        t = self.start
        drain = t
        for first, end in self._runs(order):
            # Each step of the run that is not work, the work steps before it added up.
            s = next_other[first]
            if s != first:
                t += work_before[s if s < end else end] - work_before[first]
            while s < end:
                k = kinds[s]
                if k == WAIT:
                    a = arrival.get(cmds[s], NEVER)
                    if a > t:
                        t = a
                elif k == LOAD or k == STORE:
                    t += issue
                    # The DMA channel of its side that frees up first (lowest index on ties).
                    free = reads if k == LOAD else writes
                    i = free.index(min(free))
                    g = free[i] if free[i] > t else t
                    free[i] = g + cycles[s]
                    a = g + cycles[s] + lat
                    arrival[cmds[s]] = a
                    if a > drain:
                        drain = a
                elif k == SEND:
                    t += issue
                    c = cmds[s]
                    free = links.get(self.link.get(c, -1), 0)
                    g = free if free > t else t
                    links[self.link.get(c, -1)] = g + cycles[s]
                    a = g + cycles[s] + hw.ipcq_latency
                    arrival[c] = a
                    if a > drain:
                        drain = a
                elif k == RECV:
                    t += issue
                    c = cmds[s]
                    d = self.delivery.get(c, NEVER)
                    arrival[c] = d if d > t else t
                elif k == COMPUTE or k == OPAQUE:  # met alone only without _work_runs' runs
                    t += cycles[s]
                after = s + 1
                s = next_other[after]
                if s != after:
                    t += work_before[s if s < end else end] - work_before[after]
        if self.complete and drain > t:
            t = drain
        return t - self.start

    def bound(self) -> int:
        """A lower bound on the kernel's length under any placement of its issues.

        Also fills ``earliest``: per waited command, the earliest cycle any
        placement lets its data arrive (the wait's unavoidable end).
        """
        earliest = self.earliest = {}
        hw = self.hw
        issue, lat, n = hw.issue, hw.hbm_latency, hw.read_channels
        kinds, cmds, cycles = self.kind, self.cmd, self.cycles
        t = self.start
        # Per bucket (loads released after the same host read): release cycle, and
        # release + (transfers waited so far in this bucket or later) / read channels.
        release = [t + issue]
        # Grown by doubling (np.append copied it whole at every host read: quadratic in
        # a kernel that reads a page table entry per tile); buckets 0..len(release)-1.
        peak = np.empty(64)
        peak[0] = float(t + issue)
        best = 0.0
        bucket_of: dict[int, int] = {}
        counted: set[int] = set()
        fences: set[int] = set()
        writes = [0] * hw.write_channels
        links: dict[int, int] = {}
        done_by: dict[int, int] = {}
        drain = t
        work_before, next_other = self._work_runs
        s, steps = 0, len(kinds)
        while s < steps:
            o = next_other[s]
            if o != s:  # a run of work steps: their cycles add up
                t += work_before[o] - work_before[s]
                s = o
                continue
            k = kinds[s]
            c = cmds[s]
            if k == BARRIER:
                release.append(t + issue)
                peak = _put(peak, len(release) - 1, float(t + issue))
            elif k == LOAD:
                t += issue
                bucket_of[c] = len(release) - 1
                single = release[-1] + cycles[s] + lat
                done_by[c] = single
                if single > drain:
                    drain = single
            elif k == STORE or k == SEND:
                t += issue
                fences.add(c)
                if k == STORE:
                    i = writes.index(min(writes))
                    g = max(writes[i], t)
                    writes[i] = g + cycles[s]
                    a = g + cycles[s] + lat
                else:
                    key = self.link.get(c, -1)
                    g = max(links.get(key, 0), t)
                    links[key] = g + cycles[s]
                    a = g + cycles[s] + hw.ipcq_latency
                done_by[c] = a
                drain = max(drain, a)
            elif k == RECV:
                t += issue
                done_by[c] = max(self.delivery.get(c, NEVER), t)
            elif k == COMPUTE or k == OPAQUE:  # met alone only without _work_runs' runs
                t += cycles[s]
            elif k == WAIT:
                b = bucket_of.get(c)
                if b is not None and c not in counted:
                    counted.add(c)
                    lo = max(0, b + 1 - BUCKET_WINDOW)
                    window = peak[lo : b + 1]
                    window += self.transfer[c] / n
                    best = max(best, float(window.max()))
                    a = max(math.ceil(best) + lat, done_by.get(c, 0))
                else:
                    a = done_by.get(c, NEVER)
                earliest.setdefault(c, a)
                t = max(t, a)
                if c in fences:
                    # Later loads may read what the store wrote: released only now.
                    release.append(t + issue)
                    peak = _put(peak, len(release) - 1, float(t + issue))
            s += 1
        if self.complete:
            t = max(t, drain)
        return min(t, NEVER) - self.start


@dataclass
class Model:
    """Every PE's program, built once per trace."""

    index: TraceIndex
    programs: dict[int, Program]
    #: Per command: the event index of its ISSUE and the step of it in its PE's program.
    step_of_issue: dict[int, int]

    def bounds(self) -> list[PEBound]:
        out = []
        for pe, prog in sorted(self.programs.items()):
            achieved = prog.achieved
            bound = prog.bound_cycles
            out.append(
                PEBound(
                    pe=pe,
                    start=prog.start,
                    end=prog.end,
                    achieved=achieved,
                    bound=bound,
                    efficiency=bound / achieved if achieved > 0 else 1.0,
                )
            )
        return out


def build_model(index: TraceIndex) -> Model:
    """Rebuild each PE's program from the trace."""
    c = index.columns
    cmds = index.commands
    futs = index.futures
    n_cmds = len(cmds.issue)
    hold = hold_cycles(index).astype(np.int64)
    t_complete = event_times(index, cmds.complete)
    complete_ev = np.asarray(cmds.complete, dtype=np.int64)
    step_of_op = _step_of_command(index)
    starts, ends = kernel_spans(index)
    kinds_wanted = [Kind.ISSUE, Kind.WAIT_BEGIN, HOST_READ]
    rel = np.flatnonzero(np.isin(c.kind, kinds_wanted))
    order = np.argsort(c.pe[rel], kind="stable")
    rel = rel[order]
    pes = c.pe[rel]
    bounds = np.searchsorted(pes, np.arange(index.n_pes + 1))
    fut_cmd = np.asarray(futs.cmd, dtype=np.int64)
    status = (index.footer or {}).get("status")
    # Receives: the send each was matched with, and when that send was delivered.
    recv_ev = np.flatnonzero(c.kind == Kind.IPCQ_RECV)
    recv_delivery: dict[int, int] = {}
    for send_cmd, fut in zip(c.cmd[recv_ev].tolist(), c.fut[recv_ev].tolist(), strict=True):
        if 0 <= fut < len(fut_cmd) and 0 <= send_cmd < n_cmds and t_complete[send_cmd] >= 0:
            recv_delivery[int(fut_cmd[fut])] = int(t_complete[send_cmd])
    ended_ok = set(np.flatnonzero(c.kind == Kind.KERNEL_END).tolist())
    pe_ended = {int(c.pe[e]) for e in ended_ok}
    programs: dict[int, Program] = {}
    step_of_issue: dict[int, int] = {}
    for pe in range(index.n_pes):
        if starts[pe] < 0:
            continue
        hw = Hardware.of(index, pe)
        prog = Program(
            pe=pe,
            hw=hw,
            start=int(starts[pe]),
            end=int(ends[pe]),
            complete=pe in pe_ended and status in (None, "ok") and not index.truncated,
        )
        events = rel[bounds[pe] : bounds[pe + 1]].astype(np.int64)
        kind = c.kind[events]
        cmd = c.cmd[events].astype(np.int64)
        fut = c.fut[events].astype(np.int64)
        at = c.time[events].astype(np.int64)
        # Each event's step (-1: none): an issue's from its op, a wait's on a future with a
        # command, and a host read (the only other kind here) a barrier.
        step = np.full(len(events), -1, dtype=np.int64)
        issued = np.flatnonzero((kind == Kind.ISSUE) & (cmd >= 0) & (cmd < n_cmds))
        step[issued] = step_of_op[cmd[issued]]
        waited_cmd = np.full(len(events), -1, dtype=np.int64)
        waits = np.flatnonzero((kind == Kind.WAIT_BEGIN) & (fut >= 0) & (fut < len(fut_cmd)))
        waited_cmd[waits] = fut_cmd[fut[waits]]
        step[waited_cmd >= 0] = WAIT
        step[kind == HOST_READ] = BARRIER
        # A composite's own commands are not steps: its one opaque step covers them, up to
        # its completion (the end of the run if it never completed).
        for i in np.flatnonzero(step == OPAQUE).tolist():
            if step[i] != OPAQUE:  # inside an earlier composite
                continue
            done = int(complete_ev[cmd[i]])
            skip_until = done if done >= 0 else 1 << 62
            step[i + 1 : int(np.searchsorted(events, skip_until, side="right"))] = -1
        kept = np.flatnonzero(step >= 0)
        step, cmd, at, events = step[kept], cmd[kept], at[kept], events[kept]
        step_cmd = np.where(
            step == WAIT, waited_cmd[kept], np.where(step == BARRIER, fut[kept], cmd)
        )
        # An issue's cycles: compute holds its engine; a load or store its channel (or, never
        # granted, its bytes at the HBM's rate); a send its link, a cycle at least.
        cycles = np.zeros(len(step), dtype=np.int64)
        compute = np.flatnonzero(step == COMPUTE)
        cycles[compute] = hold[cmd[compute]]
        moved = np.flatnonzero((step == LOAD) | (step == STORE))
        held = hold[cmd[moved]]
        by_size = -(-cmds.nbytes[cmd[moved]].astype(np.int64) // hw.hbm_bytes_per_cycle)
        cycles[moved] = np.where(held > 0, held, np.maximum(by_size, 1))
        send = step == SEND
        cycles[send] = np.maximum(hold[cmd[send]], 1)
        opaque = np.flatnonzero(step == OPAQUE)
        if len(opaque):
            finished = complete_ev[cmd[opaque]] >= 0
            end_at = np.where(finished, t_complete[cmd[opaque]], prog.end)
            cycles[opaque] = np.maximum(end_at - at[opaque], 0)
        prog.kind.frombytes(memoryview(step.astype(np.int8)).cast("B"))
        prog.cmd, prog.event = _ints(step_cmd), _ints(events)
        prog.cycles, prog.at = _ints(cycles), _ints(at)
        transfers = np.flatnonzero(np.isin(step, (LOAD, STORE, SEND, RECV)))
        issue_cmds = cmd[transfers].tolist()
        prog.transfer = dict(zip(issue_cmds, cycles[transfers].tolist(), strict=True))
        step_of_issue.update(zip(issue_cmds, transfers.tolist(), strict=True))
        sends = cmd[send].tolist()
        prog.link = dict(zip(sends, cmds.channel[sends].astype(np.int64).tolist(), strict=True))
        prog.delivery = {r: recv_delivery.get(r, NEVER) for r in cmd[step == RECV].tolist()}
        programs[pe] = prog
    return Model(index, programs, step_of_issue)


def _step_of_command(index: TraceIndex) -> np.ndarray:
    """Per command: the step its issue is (LOAD... from its op, COMPUTE for another op on
    a GEMM or MATH engine, OPAQUE for a composite), -1 for an issue that is no step."""
    cmds = index.commands
    strings = index.strings
    ops = np.asarray(cmds.op, dtype=np.int64)
    # Per string id (ops are a few strings): the step its op name gives.
    named = np.full(len(strings) + 1, -1, dtype=np.int64)
    computes = np.zeros(len(strings) + 1, dtype=bool)
    for sid in np.unique(ops[(ops >= 0) & (ops < len(strings))]).tolist():
        name = strings[sid]
        named[sid] = OPAQUE if name == "composite" else _OP_STEP.get(name, -1)
        computes[sid] = name != "composite" and name not in _OP_STEP
    known = np.where((ops >= 0) & (ops < len(strings)), ops, len(strings))
    # An op that is not a transfer is a step only on a compute engine.
    engine = np.array(
        [str(ch.get("kind", "")) in ("gemm", "math") for ch in index.channels] + [False]
    )
    channels = np.asarray(cmds.channel, dtype=np.int64)
    on_engine = engine[np.where((channels >= 0) & (channels < len(engine) - 1), channels, -1)]
    computes[len(strings)] = True  # an op id out of range names "": not a transfer
    return np.where(computes[known] & on_engine, COMPUTE, named[known])


def _put(values: np.ndarray, at: int, value: float) -> np.ndarray:
    """``values`` with ``value`` at ``at`` (the next free place), doubled first if full."""
    if at == len(values):
        values = np.concatenate([values, np.empty(len(values))])
    values[at] = value
    return values


def _ints(column: np.ndarray) -> array[int]:
    """``column`` as a flat int64 array: indexed from Python about as fast as a list,
    at 8 bytes an item instead of ~40 (a list of ints past 256 holds an object each)."""
    out = array("q")
    # From the array's own buffer: tobytes() would make a third copy on the way.
    out.frombytes(memoryview(np.ascontiguousarray(column, dtype=np.int64)).cast("B"))
    return out


def model_of(replay: Replay) -> Model:
    """The model of ``replay``'s trace, built once and kept on the index."""
    index = replay.index
    cached = getattr(index, "_kbdebug_model", None)
    if cached is None:
        cached = build_model(index)
        index._kbdebug_model = cached
    return cached


def pe_bounds(replay: Replay) -> list[PEBound]:
    """The critical-path bound of every PE that ran a kernel."""
    return model_of(replay).bounds()


__all__ = ["NONE", "PEBound", "Program", "build_model", "model_of", "pe_bounds"]
