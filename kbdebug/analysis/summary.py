"""The numbers of a run: channel busy shares, stalls (per line, per PE), op counts, futures.

Pure functions of an opened :class:`~kbdebug.replay.replay.Replay`, computed from the
index columns with exact integer sums; nothing here prints. Efficiency is not here: it
is the dataflow model's (:mod:`kbdebug.analysis.model`), the only one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from emulator.trace.schema import Kind, SourceLoc
from kbdebug.analysis.check_verdict import CheckVerdict
from kbdebug.replay.index import TraceIndex
from kbdebug.replay.timing import channel_busy_cycles, end_time, event_times, exact_sums
from kbdebug.replay.values import Values

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay

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
class LineStall:
    """The waits made at one source line and the cycles they stalled (on one PE, or all)."""

    loc: SourceLoc | None
    waits: int
    stall_cycles: int
    #: The PE, None for the sum over every PE.
    pe: int | None = None


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
    #: Sum of every wait's stalled cycles (the emulator's ``stall_cycles`` metric).
    stall_cycles: int
    #: Stall per wait source line, largest first.
    stall_by_line: list[LineStall]
    #: OP_LOG counts under the RunResult metric names (dma_read_count, ...).
    counts: dict[str, int]
    #: The output check's verdict the trace records (None: it records none).
    check: CheckVerdict | None = None


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
    #: The slice of a named tensor it moved (``K[128:192, :]``, format 1.5), "" if none.
    where: str = ""


def line_stalls(index: TraceIndex) -> list[LineStall]:
    """Per PE and wait source line: the waits made there and the cycles they stalled.

    The one count of stall by line: ``report``, ``diff`` and the app's source pane all
    read it. Exact integer sums; rows in (PE, loc id) order.
    """
    c = index.columns
    ends = np.flatnonzero(c.kind == Kind.WAIT_END)
    if not len(ends):
        return []
    n_locs = len(index.locs) + 1  # the last: a wait without a loc
    loc = index.futures.wait_loc[c.fut[ends]]
    keys = c.pe[ends].astype(np.int64) * n_locs + np.where(loc >= 0, loc, n_locs - 1)
    uniq, inverse = np.unique(keys, return_inverse=True)
    stall = exact_sums(inverse, c.val[ends], len(uniq))
    waits = np.bincount(inverse, minlength=len(uniq))
    rows = []
    for j, key in enumerate(uniq.tolist()):
        pe, loc_id = divmod(key, n_locs)
        where = index.loc(loc_id) if loc_id < n_locs - 1 else None
        rows.append(LineStall(where, int(waits[j]), stall[j], pe))
    return rows


def stall_by_line(index: TraceIndex) -> list[LineStall]:
    """Stalled cycles of the waits by source line, summed over every PE, largest first."""
    total: dict[SourceLoc | None, list[int]] = {}
    for row in line_stalls(index):
        waits_stall = total.setdefault(row.loc, [0, 0])
        waits_stall[0] += row.waits
        waits_stall[1] += row.stall_cycles
    rows = [LineStall(loc, waits, stall) for loc, (waits, stall) in total.items()]
    rows.sort(key=lambda r: (-r.stall_cycles, -r.waits, str(r.loc)))
    return rows


def stall_by_pe_line(index: TraceIndex) -> dict[int, dict[tuple[str, int], int]]:
    """Per PE: the stalled cycles of the waits at each (file, line) (lines that stalled)."""
    out: dict[int, dict[tuple[str, int], int]] = {}
    for row in line_stalls(index):
        if row.loc is None or not row.stall_cycles:
            continue
        lines = out.setdefault(row.pe, {})
        key = (row.loc.file, row.loc.line)
        lines[key] = lines.get(key, 0) + row.stall_cycles
    return out


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
        stall_cycles=sum(c.val[waits].tolist()),
        stall_by_line=stall_by_line(index),
        counts=op_counts(index),
        check=CheckVerdict.of(footer),
    )


def futures_table(replay: Replay) -> list[FutureRow]:
    """Every future in id (issue) order with the cycles of its lifecycle."""
    return list(iter_futures(replay))


def iter_futures(replay: Replay) -> Iterator[FutureRow]:
    """:func:`futures_table`'s rows, each made as it is read (report --json writes each
    once: on a 256-PE ring, 262,144 rows at once are some 120 MB)."""
    index = replay.index
    f, k = index.futures, index.commands
    ids = np.flatnonzero(f.cmd >= 0)
    cmd = f.cmd[ids]

    def times(events: np.ndarray) -> np.ndarray:
        return event_times(index, events)

    def cycle(t: np.int64) -> int | None:
        return None if t < 0 else int(t)

    issued = times(k.issue[cmd])
    granted = times(k.grant[cmd])
    done = times(k.complete[cmd])
    waited = times(f.wait_begin[ids])
    resolved = times(f.wait_end[ids])
    tensors = Values.of(replay).tensors
    for j, fid in enumerate(ids.tolist()):
        c = int(cmd[j])
        channel = int(k.channel[c])
        addr = int(k.addr[c])
        found = tensors.slice_of(addr, int(k.nbytes[c])) if len(tensors) else None
        yield FutureRow(
            id=fid,
            op=index.string(int(k.op[c])),
            pe=int(k.pe[c]),
            addr=addr if addr >= 0 else None,
            nbytes=int(k.nbytes[c]),
            channel=replay.channel_name(channel) if channel >= 0 else None,
            issued=cycle(issued[j]),
            granted=cycle(granted[j]),
            done=cycle(done[j]),
            waited=cycle(waited[j]),
            resolved=cycle(resolved[j]),
            stall=int(f.stall[fid]),
            loc=index.loc(int(k.loc[c])),
            wait_loc=index.loc(int(f.wait_loc[fid])),
            where=str(found) if found is not None else "",
        )
