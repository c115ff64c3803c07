"""The numbers of a run: channel busy shares, per-PE overlap efficiency, stalls, the futures table.

Pure functions of an opened :class:`~kbdebug.replay.replay.Replay`, computed
from the index columns; nothing here prints, so ``kbdebug report``, the
terminal app and ``kbdebug diff`` share them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from emulator.trace.schema import Kind, SourceLoc
from kbdebug.replay.index import NONE, TraceIndex

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay

#: Channel kinds whose busy time counts as compute in the overlap bound.
COMPUTE_KINDS = ("gemm", "math")
#: OP_LOG (category, op) pairs counted in ``Summary.counts``, by the RunResult metric name.
COUNTED_OPS = {
    "dma_read_count": ("memory", "dma_read"),
    "dma_write_count": ("memory", "dma_write"),
    "gemm_count": ("compute", "gemm"),
    "math_count": ("compute", "math"),
    "ipcq_send_count": ("comm", "ipcq_send"),
    "ipcq_recv_count": ("comm", "ipcq_recv"),
}


@dataclass(frozen=True)
class ChannelBusy:
    """How long one channel or engine was held: the sum of its grant-to-release cycles."""

    channel: int
    name: str
    kind: str
    pe: int
    busy_cycles: int
    #: busy_cycles / the run's end cycle (0 when the run has no length).
    share: float


@dataclass(frozen=True)
class PEEfficiency:
    """One PE's achieved time against the max(DMA read, compute) bound."""

    pe: int
    #: Cycles of the kernel's start and end on this PE (end of trace if it never ended).
    start: int
    end: int
    #: end - start.
    achieved: int
    #: Read-channel busy cycles divided by the PE's number of read channels.
    dma_read_cycles: int
    #: GEMM plus MATH busy cycles (the kernel blocks on each, so they add up).
    compute_cycles: int
    #: max(dma_read_cycles, compute_cycles).
    bound: int
    #: bound / achieved, 1.0 for a kernel that took no time.
    efficiency: float


@dataclass(frozen=True)
class LineStall:
    """The waits made at one source line and the cycles they stalled."""

    loc: SourceLoc | None
    waits: int
    stall_cycles: int


@dataclass(frozen=True)
class Summary:
    """The headline numbers of a trace."""

    kernel: str
    grid: tuple[int, ...]
    n_pes: int
    #: ok, error, deadlock or truncated.
    status: str
    #: The footer's error message (error and deadlock runs), else None.
    error: str | None
    error_loc: SourceLoc | None
    n_events: int
    end_time: int
    channels: list[ChannelBusy]
    pes: list[PEEfficiency]
    #: Sum of every wait's stalled cycles (the emulator's ``stall_cycles`` metric).
    stall_cycles: int
    #: Stall per wait source line, largest first.
    stall_by_line: list[LineStall]
    #: OP_LOG counts under the RunResult metric names (dma_read_count, ...).
    counts: dict[str, int]


@dataclass(frozen=True)
class FutureRow:
    """One future's life: every cycle is None when that step is not in the trace."""

    id: int
    op: str
    pe: int
    #: HBM address, None for commands without one (receives, sends).
    addr: int | None
    nbytes: int
    #: Name of the channel the command went through, None if it never requested one.
    channel: str | None
    issued: int | None
    granted: int | None
    #: Data landed (the COMPLETE event).
    done: int | None
    #: The kernel began waiting on it.
    waited: int | None
    #: The wait returned.
    resolved: int | None
    #: Cycles the wait stalled (0 if never waited).
    stall: int
    loc: SourceLoc | None
    wait_loc: SourceLoc | None


def event_times(index: TraceIndex, events: np.ndarray) -> np.ndarray:
    """The cycle of each event index, -1 where the index is -1."""
    events = np.asarray(events, dtype=np.int64)
    out = np.full(len(events), NONE, dtype=np.int64)
    has = events >= 0
    out[has] = index.columns.time[events[has]]
    return out


def end_time(index: TraceIndex) -> int:
    """The run's end cycle: the footer's, else the last event's."""
    footer = index.footer
    if footer and footer.get("end_time") is not None:
        return int(footer["end_time"])
    return int(index.columns.time[-1]) if index.n_events else 0


def hold_cycles(index: TraceIndex) -> np.ndarray:
    """Per command id: cycles it held its channel (to the end of the run if never released)."""
    cmds = index.commands
    granted = event_times(index, cmds.grant)
    released = event_times(index, cmds.release)
    released = np.where((granted >= 0) & (released < 0), end_time(index), released)
    return np.where(granted >= 0, released - granted, 0)


def channel_busy_cycles(index: TraceIndex) -> list[int]:
    """Per channel id: the sum of its commands' grant-to-release cycles (exact ints)."""
    cmds = index.commands
    held = cmds.channel >= 0
    return exact_sums(cmds.channel[held], hold_cycles(index)[held], len(index.channels))


def kernel_spans(index: TraceIndex) -> tuple[np.ndarray, np.ndarray]:
    """Per PE: the cycle its kernel started and ended (-1 if it never started).

    A kernel that errors or deadlocks ends at that event; one the trace cuts off
    ends at the run's end.
    """
    c = index.columns
    n = index.n_pes
    start = np.full(n, NONE, dtype=np.int64)
    end = np.full(n, NONE, dtype=np.int64)
    starts = np.flatnonzero(c.kind == Kind.KERNEL_START)
    start[c.pe[starts]] = c.time[starts]
    ends = np.flatnonzero(np.isin(c.kind, [Kind.KERNEL_END, Kind.KERNEL_ERROR, Kind.DEADLOCK]))
    # The first end event of a PE wins (reversed assignment keeps the first).
    end[c.pe[ends][::-1]] = c.time[ends][::-1]
    end = np.where((start >= 0) & (end < 0), end_time(index), end)
    return start, end


def pe_efficiency(index: TraceIndex) -> list[PEEfficiency]:
    """Overlap efficiency of every PE that ran a kernel."""
    busy = channel_busy_cycles(index)
    channels = index.channels
    start, end = kernel_spans(index)
    out = []
    for pe in range(index.n_pes):
        if start[pe] < 0:
            continue
        reads = [ch["id"] for ch in channels if ch["pe"] == pe and ch["kind"] == "dma_read"]
        compute = [ch["id"] for ch in channels if ch["pe"] == pe and ch["kind"] in COMPUTE_KINDS]
        dma = sum(busy[ch] for ch in reads) // max(len(reads), 1)
        comp = sum(busy[ch] for ch in compute)
        achieved = int(end[pe] - start[pe])
        bound = max(dma, comp)
        out.append(
            PEEfficiency(
                pe=pe,
                start=int(start[pe]),
                end=int(end[pe]),
                achieved=achieved,
                dma_read_cycles=dma,
                compute_cycles=comp,
                bound=bound,
                efficiency=bound / achieved if achieved > 0 else 1.0,
            )
        )
    return out


def exact_sums(keys: np.ndarray, values: np.ndarray, n: int) -> list[int]:
    """Per key 0..n-1, the sum of its ``values`` as a Python int, exact whatever the sum.

    The reader refuses cycle values past 2**53 (wire.MAX_CYCLES), but a sum of many can
    pass 2**63 and wrap an int64, or 2**53 and lose digits as a float64 (bincount's
    weights). Each value (0..2**54) is split into 27-bit halves summed apart, each
    sum exact in a float64 for up to 2**26 values.
    """
    values = np.asarray(values, dtype=np.int64)
    low = np.bincount(keys, weights=values & ((1 << 27) - 1), minlength=n)
    high = np.bincount(keys, weights=values >> 27, minlength=n)
    return [(int(h) << 27) + int(lo) for h, lo in zip(high.tolist(), low.tolist(), strict=True)]


def stall_by_line(index: TraceIndex) -> list[LineStall]:
    """Stalled cycles of the waits grouped by the wait's source line, largest first."""
    c = index.columns
    ends = np.flatnonzero(c.kind == Kind.WAIT_END)
    if not len(ends):
        return []
    loc = index.futures.wait_loc[c.fut[ends]]
    keys = np.where(loc >= 0, loc, len(index.locs))
    stall = exact_sums(keys, c.val[ends], len(index.locs) + 1)
    waits = np.bincount(keys, minlength=len(index.locs) + 1)
    rows = [
        LineStall(index.loc(int(k)) if k < len(index.locs) else None, int(waits[k]), stall[k])
        for k in np.flatnonzero(waits)
    ]
    rows.sort(key=lambda r: (-r.stall_cycles, -r.waits, str(r.loc)))
    return rows


def op_counts(index: TraceIndex) -> dict[str, int]:
    """OP_LOG counts under the emulator's RunResult metric names.

    Strings are compared by text, not id: two string ids may hold one text (the writer
    interns each text once, but a trace need not come from it), and both count.
    """
    by_text: dict[tuple[str, str], int] = {}
    for (category, op), events in index.op_log_events.items():
        key = (index.string(category), index.string(op))
        by_text[key] = by_text.get(key, 0) + len(events)
    return {name: by_text.get(pair, 0) for name, pair in COUNTED_OPS.items()}


def summarize(replay: Replay) -> Summary:
    """The headline numbers of ``replay``'s trace."""
    index = replay.index
    c = index.columns
    end = end_time(index)
    busy = channel_busy_cycles(index)
    channels = [
        ChannelBusy(
            channel=i,
            name=str(ch.get("name", f"ch{i}")),
            kind=str(ch.get("kind", "")),
            pe=int(ch.get("pe", 0)),
            busy_cycles=busy[i],
            share=busy[i] / end if end > 0 else 0.0,
        )
        for i, ch in enumerate(index.channels)
    ]
    launch: dict[str, Any] = index.header.get("launch", {})
    footer = index.footer or {}
    waits = c.kind == Kind.WAIT_END
    return Summary(
        kernel=str(launch.get("kernel", "")),
        grid=tuple(int(g) for g in launch.get("grid", ())),
        n_pes=index.n_pes,
        status=replay.status,
        error=footer.get("error"),
        error_loc=footer.get("error_loc"),
        n_events=index.n_events,
        end_time=end,
        channels=channels,
        pes=pe_efficiency(index),
        stall_cycles=sum(c.val[waits].tolist()),
        stall_by_line=stall_by_line(index),
        counts=op_counts(index),
    )


def futures_table(replay: Replay) -> list[FutureRow]:
    """Every future in id (issue) order with the cycles of its lifecycle."""
    index = replay.index
    f, k = index.futures, index.commands
    ids = np.flatnonzero(f.cmd >= 0)
    cmd = f.cmd[ids]

    def times(events: np.ndarray) -> list[int | None]:
        return [None if t < 0 else int(t) for t in event_times(index, events)]

    issued = times(k.issue[cmd])
    granted = times(k.grant[cmd])
    done = times(k.complete[cmd])
    waited = times(f.wait_begin[ids])
    resolved = times(f.wait_end[ids])
    rows = []
    for j, fid in enumerate(ids.tolist()):
        c = int(cmd[j])
        channel = int(k.channel[c])
        addr = int(k.addr[c])
        rows.append(
            FutureRow(
                id=fid,
                op=index.string(int(k.op[c])),
                pe=int(k.pe[c]),
                addr=addr if addr >= 0 else None,
                nbytes=int(k.nbytes[c]),
                channel=replay.channel_name(channel) if channel >= 0 else None,
                issued=issued[j],
                granted=granted[j],
                done=done[j],
                waited=waited[j],
                resolved=resolved[j],
                stall=int(f.stall[fid]),
                loc=index.loc(int(k.loc[c])),
                wait_loc=index.loc(int(f.wait_loc[fid])),
            )
        )
    return rows
