"""The replay tests' reference and traces: a naive replay, and small traces of every kind of run.

``naive_states`` shares nothing with ``kbdebug.replay`` but the State
dataclasses it fills in: it walks ``Trace.events`` once, keeping dictionaries,
so the index, the checkpoints and ``state_at`` can be checked against it
position by position. ``write_trace`` records the small runs the tests replay:
built-in scenarios, a deadlock, a kernel error, a synthetic run and a trace cut
short.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trace_synth import decode_like_events, record_run

from emulator import DeadlockError, HardwareConfig, KernelError
from emulator.kernel.runner import run_kernel
from emulator.scenarios import SCENARIOS
from emulator.trace.reader import Trace
from emulator.trace.schema import FIELDS, Kind
from emulator.trace.writer import TraceWriter
from kbdebug.replay.state import ChannelState, PEState, State

PAIR = HardwareConfig().replace(mesh_rows=1, mesh_cols=2)


def deadlocking_kernel(tl):
    """Each PE of a pair loads a tile, then waits for a message nobody sends."""
    tile = tl.load_async(0, (64,), "f16")
    message = tl.recv_async("right", (4,), "f16")
    tl.wait(tile)
    tl.wait(message)


def failing_kernel(tl):
    """PE 1 raises while PE 0 waits for a message from it."""
    tl.load_async(0, (64,), "f16")
    if tl.program_id(0) == 1:
        raise ValueError("bad tile")
    tl.wait(tl.recv_async("left", (4,), "f16"))


def synthetic_run(path: str) -> None:
    """A made-up decode run on four PEs whose command and future ids interleave across PEs,
    so futures are not issued in id order (the emulator's always are)."""
    with TraceWriter(path) as writer:
        record_run(writer, decode_like_events(1200, n_pes=4))


#: Trace name -> how to record it into a path.
RUNS = {
    "decode_prefetch": lambda path: SCENARIOS["decode_prefetch"](n_tiles=4).run(trace=path),
    "flawed_prefetch": lambda path: SCENARIOS["flawed_prefetch"](n_tiles=3).run(trace=path),
    "prefill": lambda path: SCENARIOS["prefill"](n_tiles=2, pes=4).run(trace=path),
    "ring_attention": lambda path: SCENARIOS["ring_attention"](kv_rows=64).run(trace=path),
    "tiled_gemm": lambda path: SCENARIOS["tiled_gemm"](k=256).run(trace=path),
    "deadlock": lambda path: run_kernel(deadlocking_kernel, grid=(2,), config=PAIR, trace=path),
    "error": lambda path: run_kernel(failing_kernel, grid=(2,), config=PAIR, trace=path),
    "synthetic": synthetic_run,
}


def write_trace(name: str, directory: Path) -> Path:
    """Record run ``name`` (a key of RUNS, or "truncated": decode_prefetch's trace with
    its last 1001 bytes cut off, mid-record) into ``directory`` and return the path."""
    path = directory / f"{name}.kbt"
    if name == "truncated":
        whole = write_trace("decode_prefetch", directory).read_bytes()
        path.write_bytes(whole[:-1001])
        return path
    try:
        RUNS[name](str(path))
    except (DeadlockError, KernelError):
        pass  # the trace is complete, footer and all
    return path


ISSUED, QUEUED, TRANSFERRING, READY, WAITED, RESOLVED = range(6)


def fields(record: list[Any]) -> dict[str, Any]:
    """An event record's fields by name, plus kind, time and pe."""
    kind = Kind(record[0])
    named = {name: value for (name, _), value in zip(FIELDS[kind], record[3:], strict=True)}
    return {"kind": kind, "time": record[1], "pe": record[2], **named}


def blocking_waits(trace: Trace) -> set[int]:
    """Futures whose wait blocked its PE: it stalled, or it never ended and the data had
    not arrived when it began."""
    stalled: dict[int, int] = {}
    began: dict[int, int] = {}
    completed_at: dict[int, int] = {}
    for i, record in enumerate(trace.events):
        e = fields(record)
        if e["kind"] == Kind.WAIT_END:
            stalled[e["future"]] = e["stalled"]
        elif e["kind"] == Kind.WAIT_BEGIN:
            began[e["future"]] = i
        elif e["kind"] == Kind.COMPLETE and e["future"] >= 0:
            completed_at.setdefault(e["future"], i)
    out = set()
    for future, begin in began.items():
        if future in stalled:
            if stalled[future] > 0:
                out.add(future)
        elif completed_at.get(future, len(trace.events)) > begin:
            out.add(future)
    return out


def naive_states(trace: Trace) -> list[State]:
    """The state at every position 0..len(trace.events), each a separate object."""
    # A file cut inside its header has no mesh: replay shows one idle PE.
    rows, cols = trace.header.get("mesh", (1, 1))
    pes = [PEState() for _ in range(rows * cols)]
    channels = [ChannelState() for _ in trace.header.get("channels", ())]
    live: dict[int, int] = {}
    future_of_cmd: dict[int, int] = {}
    op_counts: dict[tuple[int, int], int] = {}
    blocking = blocking_waits(trace)
    time = 0

    def snapshot(position: int) -> State:
        return State(
            position=position,
            time=time,
            pes=[PEState(p.status, p.future, p.loc, p.scratch) for p in pes],
            channels=[ChannelState(c.occupant, list(c.queue)) for c in channels],
            live=dict(live),
            op_counts=dict(op_counts),
        )

    def advance(future: int | None, phase: int) -> None:
        if future is not None and future in live:
            live[future] = max(live[future], phase)

    states = [snapshot(0)]
    for position, record in enumerate(trace.events, start=1):
        e = fields(record)
        kind, pe = e["kind"], pes[e["pe"]]
        time = e["time"]
        if e.get("loc", -1) >= 0:
            pe.loc = e["loc"]
        if kind == Kind.KERNEL_START:
            pe.status = "running"
        elif kind == Kind.KERNEL_END:
            pe.status, pe.future = "done", -1
        elif kind == Kind.KERNEL_ERROR:
            pe.status, pe.future = "error", -1
        elif kind == Kind.DEADLOCK:
            pe.status, pe.future = "deadlocked", e["future"]
        elif kind == Kind.ISSUE:
            if e["future"] >= 0:
                future_of_cmd[e["cmd"]] = e["future"]
                live[e["future"]] = ISSUED
        elif kind == Kind.CHAN_REQUEST:
            channels[e["channel"]].queue.append(e["cmd"])
            advance(future_of_cmd.get(e["cmd"]), QUEUED)
        elif kind == Kind.CHAN_GRANT:
            channel = channels[e["channel"]]
            channel.queue.remove(e["cmd"])
            channel.occupant = e["cmd"]
            advance(future_of_cmd.get(e["cmd"]), TRANSFERRING)
        elif kind == Kind.CHAN_RELEASE:
            channels[e["channel"]].occupant = -1
        elif kind == Kind.COMPLETE:
            advance(future_of_cmd.get(e["cmd"]), READY)
        elif kind == Kind.WAIT_BEGIN:
            advance(e["future"], WAITED)
            pe.status = "stalled" if e["future"] in blocking else "running"
            pe.future = e["future"]
        elif kind == Kind.WAIT_END:
            live.pop(e["future"], None)
            pe.status, pe.future = "running", -1
        elif kind == Kind.OP_LOG:
            key = (e["category"], e["op"])
            op_counts[key] = op_counts.get(key, 0) + 1
        elif kind in (Kind.SCRATCH_ALLOC, Kind.SCRATCH_FREE):
            pe.scratch = e["in_use"]
        states.append(snapshot(position))
    return states
