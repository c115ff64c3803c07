"""The dataflow model of a launch: every PE's kernel as a program, with what each step needs.

From the trace alone, each PE's kernel is rebuilt as the sequence of its tl steps
in program order (issues, compute, waits, host reads of loaded values, composite
calls) with the hardware figures the header records, and the true dependencies
between them:

- a loaded or received value is needed at its **first use**: the first compute,
  store, send or host read that consumes it (format 1.3 records what each command
  reads; older traces fall back to the value's ``tl.wait``);
- a receive's data follows the matching send on the other PE, and a send needs only
  the data it sends: a loaded or received value, or the compute that produced it
  (format 1.6 records it for each store and send, :mod:`kbdebug.analysis.provenance`;
  in older traces the latest compute before the send whose output has the sent tile's
  shape and dtype is taken), so the bound lets a send (and, with the recorded
  producer, a store) leave as soon as that data is ready, wherever the kernel issued it;
- a host read of loaded data gates the addresses issued after it;
- a load that reads back bytes an earlier store of the same PE wrote needs the store
  landed and is never issued above the store's wait (its issue when it was not waited:
  a hazard), and a wait on an access never moves below a later store to its bytes;
- a wait on a receive also orders the stores and sends issued after it, and the loads
  of bytes another PE stores (the message may be the signal that their data is ready).

:mod:`kbdebug.analysis.retime` re-times these programs, all PEs together, and
computes the bound from the same steps.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.analysis.composite_model import Composite, composites_of
from kbdebug.replay.index import NONE, TraceIndex
from kbdebug.replay.timing import event_times, hold_cycles, kernel_spans

if TYPE_CHECKING:
    from kbdebug.analysis.hbm_share import ProgramShare, SharedHbm
    from kbdebug.replay.replay import Replay

# Step kinds of a program.
LOAD, STORE, SEND, RECV, COMPUTE, WAIT, OPAQUE, BARRIER = range(8)
#: A time that never comes (a receive never matched, a load never granted).
NEVER = 1 << 62
#: Host-read event kind (format 1.1); kernels that read loaded values on the host emit it.
HOST_READ = 17
#: What-a-command-reads event kind (format 1.3): (cmd, future).
READS = 25

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
    #: No placement of this program's issues and waits can make the kernel take less
    #: (the raw figure: never clamped to ``achieved``).
    bound: int
    #: bound / achieved; None when the run did not complete (no efficiency is claimed).
    efficiency: float | None
    #: Whether this PE's kernel ran to its end in a run that completed.
    complete: bool = True


@dataclass
class Hardware:
    """The figures of one PE the model needs, from the trace header."""

    issue: int
    hbm_latency: int
    ipcq_latency: int
    read_channels: int
    write_channels: int
    hbm_bytes_per_cycle: int
    composite_depth: int = 2
    scratch_bytes: int = 1 << 20

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
            if isinstance(value, bool) or not isinstance(value, int | float):
                return default
            return int(value) if math.isfinite(value) else default

        return cls(
            issue=max(number("issue_cycles", 4), 0),
            hbm_latency=max(number("hbm_latency", 500), 0),
            ipcq_latency=max(number("ipcq_latency", 100), 0),
            read_channels=max(reads or number("dma_read_channels", 1), 1),
            write_channels=max(writes or number("dma_write_channels", 1), 1),
            hbm_bytes_per_cycle=max(number("hbm_bytes_per_cycle", 48), 1),
            composite_depth=max(number("composite_depth", 2), 1),
            scratch_bytes=max(number("scratch_bytes", 1 << 20), 1),
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
    #: Per step: kind, command id (the waited command for WAIT, the host-read one for
    #: BARRIER), event index, cycles (transfer or compute hold; an opaque step's recorded
    #: length), the recorded cycle. Flat arrays, not lists: 1 to 8 bytes a step instead
    #: of 8 plus an int object of 32 for most values (``event`` and ``at`` are 4-byte
    #: items when every value fits: read them from Python, not as int64 buffers).
    kind: array[int] = field(default_factory=lambda: array("b"))
    cmd: array[int] = field(default_factory=lambda: array("q"))
    event: array[int] = field(default_factory=lambda: array("q"))
    cycles: array[int] = field(default_factory=lambda: array("q"))
    at: array[int] = field(default_factory=lambda: array("q"))
    #: Per receive command of this PE: when its data arrived in the recording (the
    #: matching send's delivery), and the send it was matched with.
    delivery: dict[int, int] = field(default_factory=dict)
    match: dict[int, int] = field(default_factory=dict)
    #: Per send command: the link it uses.
    link: dict[int, int] = field(default_factory=dict)
    #: Per load or store command of this PE: its transfer cycles (a send's or a
    #: receive's is its step's ``cycles``: a ring's messages outnumber its loads).
    transfer: dict[int, int] = field(default_factory=dict)
    #: Per step: the commands whose data it needs (CSR: need[need_at[s]:need_at[s + 1]]).
    need_at: array[int] = field(default_factory=lambda: array("q"))
    need: array[int] = field(default_factory=lambda: array("q"))
    #: Per wait step on a load or receive: the step that first needs its data
    #: (len(self) when nothing does; the wait itself when the trace cannot say).
    first_use: dict[int, int] = field(default_factory=dict)
    #: Per send step that reads no loaded or received data: the step of the compute that
    #: produced what it sends (-1: none matches, the send stays where it was issued).
    #: With recorded provenance (format 1.6) stores too, and -2 (``NO_COMPUTE``) for one
    #: whose data no compute made: it leaves once its needs and floor allow.
    producer: dict[int, int] = field(default_factory=dict)
    #: Per load command: the earlier stores of this PE whose bytes it reads back (waited
    #: before it, or landed before it read in this run).
    fences: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: Load commands issued after a receive's wait that read bytes another PE stores: the
    #: message may be what says those bytes landed, so none leaves before it arrives.
    signalled: frozenset[int] = frozenset()
    #: Per wait step on a receive whose first use is a load it gates: (that load's step,
    #: the step the wait and the load may move down to, just before it), when work lies
    #: between (the KB109 edit moves both).
    carried: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: Per load or store command: the step of the first later store of this PE to
    #: overlapping bytes (a wait on the access may not move below it).
    overwritten_at: dict[int, int] = field(default_factory=dict)
    #: Per step: the last step before it that no issue may move above (a host read, a
    #: wait on a receive; for a load also the wait of a store it reads back); -1: none.
    floor: array[int] = field(default_factory=lambda: array("q"))
    #: Whether the trace says what each command reads (format 1.3).
    knows_reads: bool = False
    #: Composite calls by step.
    composites: dict[int, Composite] = field(default_factory=dict)
    #: Peak scratch bytes in use during the run.
    scratch_peak: int = 0
    #: Filled by the bound: per waited command, the earliest its data can arrive.
    earliest: dict[int, int] = field(default_factory=dict)
    #: Per load or store command sharing an HBM stack's bandwidth: its share (stack,
    #: recorded stall, slot, grant order, own transfer cycles;
    #: :mod:`kbdebug.analysis.hbm_share`), and its hold alone on the stack (the later of
    #: its own transfer and its slot). Its step's ``cycles`` stay the recorded hold, the
    #: stall for the stack included. Empty without sharing.
    shares: dict[int, ProgramShare] = field(default_factory=dict)
    unshared: dict[int, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def achieved(self) -> int:
        return self.end - self.start

    def needs(self, s: int) -> array[int]:
        return self.need[self.need_at[s] : self.need_at[s + 1]]

    @cached_property
    def recorded_time(self) -> int:
        """The re-timed length with the steps in their recorded order (this PE alone,
        receives at their recorded deliveries)."""
        return self.simulate(range(len(self.kind)))

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

    def simulate(self, order, cmds=None, cycles=None) -> int:
        """The kernel's length (cycles from its start) with its steps run in ``order``;
        ``cmds`` replaces the command each step names (a wait re-pointed elsewhere),
        ``cycles`` a step's cycles (a merged composite). Receives arrive as recorded."""
        from kbdebug.analysis.retime import run_program

        gen = run_program(self, order, cmds, cycles, None)
        try:
            while True:
                next(gen)
        except StopIteration as stop:
            return stop.value

    def bound(self) -> int:
        """A lower bound on the kernel's length (this PE alone, receives as recorded)."""
        from kbdebug.analysis.retime import bound_program

        gen = bound_program(self, None)
        try:
            while True:
                next(gen)
        except StopIteration as stop:
            return stop.value


@dataclass
class Model:
    """Every PE's program, built once per trace, with the launch's bound and re-timing."""

    index: TraceIndex
    programs: dict[int, Program]
    #: Per send command: the PE that sent it.
    sender: dict[int, int] = field(default_factory=dict)
    #: Whether the run completed (footer ok, every PE that started ended, not cut).
    complete: bool = True
    #: The HBM stacks whose bandwidth groups of PEs share (None: nothing shared).
    shared: SharedHbm | None = None

    @cached_property
    def _base(self):
        from kbdebug.analysis.retime import simulate_launch

        return simulate_launch(self, {})

    @property
    def recorded(self) -> dict[int, int]:
        """Per PE, the re-timed length of the recorded program, all PEs together."""
        return self._base[0]

    @property
    def recorded_sent(self) -> dict[int, int]:
        return self._base[1]

    @cached_property
    def bound_lengths(self) -> dict[int, int]:
        """Per PE, the raw critical-path bound of its kernel's length (all PEs together)."""
        from kbdebug.analysis.retime import bound_launch

        return bound_launch(self)

    @property
    def end(self) -> int:
        """The launch's recorded end: the last PE's."""
        return max((p.end for p in self.programs.values()), default=0)

    @property
    def start(self) -> int:
        return min((p.start for p in self.programs.values()), default=0)

    def bounds(self) -> list[PEBound]:
        bounds = self.bound_lengths
        out = []
        for pe, prog in sorted(self.programs.items()):
            achieved = prog.achieved
            complete = self.complete and prog.complete
            bound = bounds[pe]
            efficiency = None
            if complete:
                efficiency = bound / achieved if achieved > 0 else 1.0
            out.append(
                PEBound(
                    pe=pe,
                    start=prog.start,
                    end=prog.end,
                    achieved=achieved,
                    bound=bound,
                    efficiency=efficiency,
                    complete=complete,
                )
            )
        return out

    def downstream(self, pes) -> set[int]:
        """``pes`` and every PE that receives, directly or not, from one of them."""
        receivers: dict[int, set[int]] = self._receivers
        out = set(pes)
        todo = list(out)
        while todo:
            pe = todo.pop()
            for other in receivers.get(pe, ()):
                if other not in out:
                    out.add(other)
                    todo.append(other)
        return out

    @cached_property
    def receiver(self) -> dict[int, tuple[int, int]]:
        """Per send command to another PE: (the PE that received it, its receive command)."""
        out: dict[int, tuple[int, int]] = {}
        for pe, prog in self.programs.items():
            for recv, send in prog.match.items():
                src = self.sender.get(send)
                if src is not None and src != pe:
                    out[send] = (pe, recv)
        return out

    @cached_property
    def step_of_issue(self) -> dict[int, int]:
        """Per load, store, send or receive command: the step of its issue in its PE's
        program (made when asked: the model itself never needs it)."""
        out: dict[int, int] = {}
        for prog in self.programs.values():
            if not len(prog):
                continue
            kinds = np.frombuffer(prog.kind, dtype=np.int8)
            steps = np.flatnonzero(np.isin(kinds, (LOAD, STORE, SEND, RECV)))
            cmds = np.frombuffer(prog.cmd, dtype=np.int64)[steps]
            out.update(zip(cmds.tolist(), steps.tolist(), strict=True))
        return out

    @cached_property
    def sends_of(self) -> dict[int, list[int]]:
        """Per PE that sends, its send commands (in issue order)."""
        out: dict[int, list[int]] = {}
        for send, pe in self.sender.items():
            out.setdefault(pe, []).append(send)
        return out

    @cached_property
    def _receivers(self) -> dict[int, set[int]]:
        out: dict[int, set[int]] = {}
        for send, (pe, _) in self.receiver.items():
            out.setdefault(self.sender[send], set()).add(pe)
        return out


def build_model(index: TraceIndex) -> Model:
    """Rebuild each PE's program from the trace."""
    c = index.columns
    cmds = index.commands
    futs = index.futures
    n_cmds = len(cmds.issue)
    hold = hold_cycles(index).astype(np.int64)
    t_complete = event_times(index, cmds.complete)
    t_read = event_times(index, cmds.grant)
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
    version = tuple(index.header.get("version") or (1, 0))
    knows_reads = version >= (1, 3)
    # Receives: the send each was matched with, and when that send was delivered.
    recv_ev = np.flatnonzero(c.kind == Kind.IPCQ_RECV)
    recv_delivery: dict[int, int] = {}
    recv_match: dict[int, int] = {}
    for send_cmd, fut in zip(c.cmd[recv_ev].tolist(), c.fut[recv_ev].tolist(), strict=True):
        if 0 <= fut < len(fut_cmd) and 0 <= send_cmd < n_cmds and t_complete[send_cmd] >= 0:
            recv_delivery[int(fut_cmd[fut])] = int(t_complete[send_cmd])
            recv_match[int(fut_cmd[fut])] = int(send_cmd)
    # What each command reads (format 1.3): (consumer command, needed command) pairs.
    reads_ev = np.flatnonzero(c.kind == READS) if knows_reads else np.zeros(0, np.int64)
    read_by = c.cmd[reads_ev].astype(np.int64)
    read_fut = c.fut[reads_ev].astype(np.int64)
    ok = (read_by >= 0) & (read_by < n_cmds) & (read_fut >= 0) & (read_fut < len(fut_cmd))
    read_by, read_cmd = read_by[ok], fut_cmd[read_fut[ok]]
    read_pe = np.asarray(cmds.pe, dtype=np.int64)[read_by] if len(read_by) else read_by
    scratch_ev = np.flatnonzero(c.kind == Kind.SCRATCH_ALLOC)
    ended_ok = set(np.flatnonzero(c.kind == Kind.KERNEL_END).tolist())
    pe_ended = {int(c.pe[e]) for e in ended_ok}
    store_ids = [i for i, name in enumerate(index.strings) if name == "store"]
    is_store = np.isin(np.asarray(cmds.op, dtype=np.int64), store_ids)
    store_lo = np.asarray(cmds.addr, dtype=np.int64)[is_store]
    stores = (
        store_lo,
        store_lo + np.asarray(cmds.nbytes, dtype=np.int64)[is_store],
        np.asarray(cmds.pe, dtype=np.int64)[is_store],
    )
    load_ids = [i for i, name in enumerate(index.strings) if name in ("load", "load_async")]
    is_load = np.isin(np.asarray(cmds.op, dtype=np.int64), load_ids)
    load_lo = np.asarray(cmds.addr, dtype=np.int64)[is_load]
    loads = (
        load_lo,
        load_lo + np.asarray(cmds.nbytes, dtype=np.int64)[is_load],
        np.asarray(cmds.pe, dtype=np.int64)[is_load],
    )
    run_ok = status in (None, "ok") and not index.truncated and index.footer is not None
    from kbdebug.analysis.dependencies import dependencies, send_producers
    from kbdebug.analysis.oob import outside_commands

    # Accesses outside their tensor (KB204) read or write bytes they did not mean to:
    # no fence is built on them.
    outside = frozenset(outside_commands(index))
    from kbdebug.analysis.provenance import recorded_producers, use_recorded_producers

    made_by = recorded_producers(index)

    programs: dict[int, Program] = {}
    sender: dict[int, int] = {}
    for pe in range(index.n_pes):
        if starts[pe] < 0:
            continue
        hw = Hardware.of(index, pe)
        prog = Program(
            pe=pe,
            hw=hw,
            start=int(starts[pe]),
            end=int(ends[pe]),
            complete=pe in pe_ended and run_ok,
            knows_reads=knows_reads,
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
        inner: dict[int, np.ndarray] = {}
        for i in np.flatnonzero(step == OPAQUE).tolist():
            if step[i] != OPAQUE:  # inside an earlier composite
                continue
            done = int(complete_ev[cmd[i]])
            skip_until = done if done >= 0 else 1 << 62
            stop = int(np.searchsorted(events, skip_until, side="right"))
            inside = events[i + 1 : stop]
            inner[i] = c.cmd[inside[c.kind[inside] == Kind.ISSUE]].astype(np.int64)
            step[i + 1 : stop] = -1
        kept = np.flatnonzero(step >= 0)
        all_cmd = cmd
        position = np.full(len(events), -1, dtype=np.int64)
        position[kept] = np.arange(len(kept))
        step, cmd, at, events = step[kept], cmd[kept], at[kept], events[kept]
        host_fut = fut[kept]
        step_cmd = np.where(
            step == WAIT,
            waited_cmd[kept],
            np.where(
                step == BARRIER,
                np.where(
                    (host_fut >= 0) & (host_fut < len(fut_cmd)),
                    fut_cmd[np.clip(host_fut, 0, max(len(fut_cmd) - 1, 0))],
                    -1,
                )
                if len(fut_cmd)
                else -1,
                cmd,
            ),
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
        prog.cmd, prog.event = _ints(step_cmd), _small_ints(events)
        prog.cycles, prog.at = _ints(cycles), _small_ints(at)
        moves = np.flatnonzero((step == LOAD) | (step == STORE))
        prog.transfer = dict(zip(cmd[moves].tolist(), cycles[moves].tolist(), strict=True))
        sends = cmd[send].tolist()
        sender.update((s, pe) for s in sends)
        prog.link = dict(zip(sends, cmds.channel[sends].astype(np.int64).tolist(), strict=True))
        recvs = cmd[step == RECV].tolist()
        prog.delivery = {r: recv_delivery.get(r, NEVER) for r in recvs}
        prog.match = {r: recv_match[r] for r in recvs if r in recv_match}
        # Steps of this PE's commands (compute included), for what each reads.
        issue_steps = np.flatnonzero(np.isin(step, (LOAD, STORE, SEND, RECV, COMPUTE, OPAQUE)))
        step_of_cmd = dict(zip(cmd[issue_steps].tolist(), issue_steps.tolist(), strict=True))
        mine = read_pe == pe
        pairs = [
            (step_of_cmd[b], n)
            for b, n in zip(read_by[mine].tolist(), read_cmd[mine].tolist(), strict=True)
            if b in step_of_cmd
        ]
        dependencies(
            prog, pairs, cmds.addr, cmds.nbytes, stores, (t_complete, t_read), outside, loads
        )
        send_producers(prog, pairs, cmds.shape, cmds.dtype)
        if made_by is not None:
            use_recorded_producers(prog, made_by, step_of_cmd)
        prog.composites = {}
        for i, inside in inner.items():
            composite = composites_of(index, int(all_cmd[i]), inside, hold, hw)
            if composite is not None and position[i] >= 0:
                prog.composites[int(position[i])] = composite
        mine_alloc = scratch_ev[c.pe[scratch_ev] == pe]
        prog.scratch_peak = int(c.val[mine_alloc].max()) if len(mine_alloc) else 0
        programs[pe] = prog
    complete = run_ok and all(p.complete for p in programs.values())
    model = Model(index, programs, sender, complete)
    from kbdebug.analysis.hbm_share import share_transfers, shared_hbm

    model.shared = shared_hbm(index)
    if model.shared is not None:
        share_transfers(model)
    return model


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


def _ints(column: np.ndarray) -> array[int]:
    """``column`` as a flat int64 array: indexed from Python about as fast as a list,
    at 8 bytes an item instead of ~40 (a list of ints past 256 holds an object each)."""
    out = array("q")
    # From the array's own buffer: tobytes() would make a third copy on the way.
    out.frombytes(memoryview(np.ascontiguousarray(column, dtype=np.int64)).cast("B"))
    return out


def _small_ints(column: np.ndarray) -> array[int]:
    """``column`` as a flat array of 4-byte items when every value fits, else as _ints."""
    if len(column) and not (-(2**31) <= column.min() and column.max() < 2**31):
        return _ints(column)
    out = array("i")
    out.frombytes(memoryview(np.ascontiguousarray(column, dtype=np.int32)).cast("B"))
    return out


def launch_efficiency(
    bounds: list[PEBound], balanced_end: int | None = None, stack_ends: tuple[int, ...] = ()
) -> tuple[int, float | None]:
    """(the launch's bound in cycles from its start; bound / achieved of the launch, None
    when the run did not complete). What compare, sweep and the compare header show.

    The launch's bound is its last PE's bound end, or ``balanced_end`` when earlier: the
    least end the launch could reach with the work of its imbalanced PEs split evenly
    over the PEs (:attr:`kbdebug.analysis.imbalance.Imbalance.balanced_end`), so a launch
    whose PEs each sit at their own bound, the work split unevenly, reads below 100 %
    (and KB111 names the gain). Each PE's own bound and efficiency stay as they are.

    ``stack_ends``: where PEs share HBM stacks, the end cycle below which each stack's
    slots rule out the launch's end (:func:`kbdebug.analysis.hbm_share.stack_bounds`):
    the bound is never earlier than the latest, nor, with the work split evenly (which
    may move bytes between stacks), than the earliest.
    """
    if not bounds:
        return 0, None
    start = min(b.start for b in bounds)
    end = max(b.start + b.bound for b in bounds)
    if balanced_end is not None and balanced_end < end:
        end = max(start, balanced_end, min(stack_ends, default=start))
    else:
        end = max(end, max(stack_ends, default=end))
    bound = end - start
    achieved = max(b.end for b in bounds) - start
    if any(b.efficiency is None for b in bounds):
        return bound, None
    return bound, bound / achieved if achieved > 0 else 1.0


def pe_bounds(replay: Replay) -> list[PEBound]:
    """The critical-path bound of every PE that ran a kernel (a model built for the call:
    :class:`~kbdebug.analysis.results.Analysis` keeps one per trace)."""
    return build_model(replay.index).bounds()


__all__ = [
    "NEVER",
    "NONE",
    "PEBound",
    "Program",
    "build_model",
    "launch_efficiency",
    "pe_bounds",
]
