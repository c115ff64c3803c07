"""Timeline lanes as sorted interval arrays, and what each screen column of a lane shows.

Built once per trace from the public index; drawing a lane at any zoom is then a
handful of ``searchsorted`` calls over the column edges, so the cost of a frame
grows with the screen width, not with the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.replay import Replay
from kbdebug.ui.panes.cycles import count, cycle_dtype, gather, narrow

#: Cell codes a lane can show in a column (FULL: the selected future's transfer).
IDLE, LIGHT, MEDIUM, HEAVY, FULL = range(5)
#: Kernel lane cell codes.
NOT_STARTED, RUNNING, STALLING, STALLED, ENDED, FAILED = range(10, 16)
#: Channel and scratch lane cell codes: LEVEL + eighths (0..8) of busy share or capacity.
LEVEL = 20

_CHANNEL_ORDER = {"dma_read": 0, "dma_write": 1, "gemm": 2, "math": 3, "ipcq": 4}
_SHORT = {"dma_read": "rd", "dma_write": "wr", "gemm": "gemm", "math": "math", "ipcq": "ipcq"}


@dataclass
class Intervals:
    """Non-overlapping ``[start, end)`` cycle intervals sorted by start, with a running total."""

    starts: np.ndarray
    ends: np.ndarray
    #: Command (or future) id of each interval.
    ids: np.ndarray
    #: Cycles covered by the intervals before each one.
    before: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        starts, ends, ids = np.asarray(self.starts), np.asarray(self.ends), np.asarray(self.ids)
        if len(starts) > 1 and not (starts[1:] >= starts[:-1]).all():
            order = np.argsort(starts, kind="stable")
            starts, ends, ids = starts[order], ends[order], ids[order]
        # Cycles as narrow integers (see kbdebug.ui.panes.cycles): half of float64 at 10M events.
        self.starts, self.ends = narrow(starts, np.maximum(ends, starts))
        self.ids = ids
        lengths = self.ends - self.starts
        self.before = np.zeros(len(lengths), _total_dtype(lengths))
        if len(lengths) > 1:
            np.cumsum(lengths[:-1], dtype=self.before.dtype, out=self.before[1:])
        #: The zero-length intervals' starts, which ``touching`` also shows.
        self.points = self.starts[lengths == 0]

    def __len__(self) -> int:
        return len(self.starts)

    def covered_until(self, t: np.ndarray) -> np.ndarray:
        """Cycles covered by the intervals before each time in ``t``."""
        if not len(self.starts):
            return np.zeros(len(t))
        k = count(self.starts, t, "right") - 1
        kc = np.maximum(k, 0)
        start = self.starts[kc].astype(np.float64)
        partial = np.clip(t - start, 0.0, self.ends[kc] - start)
        return np.where(k >= 0, self.before[kc] + partial, 0.0)

    def fraction(self, edges: np.ndarray) -> np.ndarray:
        """Covered fraction of each column between consecutive ``edges``."""
        covered = self.covered_until(edges)
        return np.diff(covered) / np.maximum(np.diff(edges), 1e-9)

    def touching(self, edges: np.ndarray) -> np.ndarray:
        """Whether any interval (even a zero-length one) falls in each column."""
        if not len(self.starts):
            return np.zeros(len(edges) - 1, dtype=bool)
        lo, hi = edges[:-1], edges[1:]
        # A [start, end) interval is in [lo, hi) when start < hi and end > lo; ``ends`` is
        # sorted too because the intervals do not overlap.
        started = count(self.starts, hi, "left")
        ended = count(self.ends, lo, "right")
        touching = started > ended
        points = self.points
        if len(points):
            touching |= count(points, hi, "left") > count(points, lo, "left")
        return touching


def _total_dtype(lengths: np.ndarray) -> np.dtype:
    """A dtype that holds the running total of ``lengths`` exactly."""
    if lengths.dtype.kind == "f":
        return np.dtype(np.float64)
    return cycle_dtype(0, int(lengths.sum(dtype=np.int64)) if len(lengths) else 0)


def _eighths(fraction: np.ndarray, touching: np.ndarray) -> np.ndarray:
    """A bar height per column: LEVEL + the busy share in eighths, rounded, at least one
    eighth where anything ran (a 1-cycle transfer in a 1,000-cycle column still shows)."""
    eighths = np.rint(8 * np.clip(fraction, 0.0, 1.0)).astype(np.int8)
    eighths[(touching | (fraction > 0)) & (eighths == 0)] = 1
    return LEVEL + eighths


def size_text(n: int) -> str:
    """Bytes in at most four characters where it can: 512, 32K, 1.5M, 1M."""
    n = int(n)
    for scale, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if n >= scale:
            value = n / scale
            text = f"{value:.1f}" if value < 9.95 else f"{value:.0f}"
            return text.removesuffix(".0") + suffix
    return str(n)


def _share_text(share: float | None) -> str:
    """A busy share as a label shows it: 62%, <1%, or nothing when there is no window."""
    if share is None:
        return ""
    if 0 < share < 0.005:
        return "<1%"
    return f"{share:.0%}"


@dataclass
class Lane:
    """One row of the timeline: what it is about and how to draw a range of cycles."""

    pe: int
    label: str
    #: "kernel", a channel kind (dma_read, dma_write, gemm, math, ipcq) or "scratch".
    kind: str
    channel: int = -1

    def cells(self, edges: np.ndarray) -> np.ndarray:
        """A cell code per column between consecutive ``edges`` (cycles)."""
        raise NotImplementedError

    def level(self, start: float, end: float) -> str:
        """What the label says of cycles ``start`` .. ``end``: a busy share, a level."""
        return ""


@dataclass
class ChannelLane(Lane):
    """A channel held by one command at a time: grant to release."""

    busy: Intervals | None = None

    def cells(self, edges: np.ndarray) -> np.ndarray:
        return _eighths(self.busy.fraction(edges), self.busy.touching(edges))

    def share(self, start: float, end: float) -> float | None:
        """The share of cycles ``start`` .. ``end`` the channel was held."""
        if end <= start:
            return None
        return float(self.busy.fraction(np.array([start, end], dtype=np.float64))[0])

    def level(self, start: float, end: float) -> str:
        return _share_text(self.share(start, end))


@dataclass
class KernelLane(Lane):
    """The kernel on a PE: not started, running, stalled in a tl.wait, ended."""

    start: float = 0.0
    end: float = 0.0
    #: How the kernel ended: done, error, deadlocked or unknown (trace cut short).
    outcome: str = "done"
    stalls: Intervals | None = None

    def cells(self, edges: np.ndarray) -> np.ndarray:
        lo, hi = edges[:-1], edges[1:]
        codes = np.full(len(lo), RUNNING, dtype=np.int8)
        stalled = self.stalls.fraction(edges)
        codes[self.stalls.touching(edges) | (stalled > 0)] = STALLING
        codes[stalled >= 0.5] = STALLED
        codes[hi <= self.start] = NOT_STARTED
        after = lo >= self.end
        codes[after] = FAILED if self.outcome in ("error", "deadlocked") else ENDED
        return codes

    def share(self, start: float, end: float) -> float | None:
        """The share of the kernel's time within ``start`` .. ``end`` it ran, not stalled
        in a tl.wait; None when the kernel did not run then."""
        lo, hi = max(start, self.start), min(end, self.end)
        if hi <= lo:
            return None
        stalled = float(self.stalls.fraction(np.array([lo, hi], dtype=np.float64))[0])
        return 1.0 - stalled

    def level(self, start: float, end: float) -> str:
        return _share_text(self.share(start, end))


@dataclass
class ScratchLane(Lane):
    """Scratch bytes in use on a PE: the highest level in each column."""

    times: np.ndarray | None = None
    levels: np.ndarray | None = None
    capacity: int = 1

    def cells(self, edges: np.ndarray) -> np.ndarray:
        n = len(edges) - 1
        times, levels = self.times, self.levels
        if not len(times):
            return np.full(n, LEVEL, dtype=np.int8)
        lo = count(times, edges[:-1], "left")
        hi = count(times, edges[1:], "left")
        entering = np.where(lo > 0, levels[np.maximum(lo - 1, 0)], 0)
        peak = entering.copy()
        inside = hi > lo
        if inside.any():
            # Columns are contiguous, so each non-empty column's events run up to the next
            # non-empty column's first event.
            peak[inside] = np.maximum(
                entering[inside], np.maximum.reduceat(levels[: hi[-1]], lo[inside])
            )
        eighths = np.ceil(8 * peak / max(self.capacity, 1)).clip(0, 8).astype(np.int8)
        return LEVEL + eighths

    def peak(self, start: float, end: float) -> int:
        """The most bytes in use at any moment of cycles ``start`` .. ``end``."""
        times, levels = self.times, self.levels
        if not len(times):
            return 0
        lo = int(count(times, start, "left"))
        hi = int(count(times, end, "left"))
        entering = int(levels[lo - 1]) if lo > 0 else 0
        return max(entering, int(levels[lo:hi].max(initial=0)))

    def level(self, start: float, end: float) -> str:
        """``32K/1M``: the peak in the window against the capacity."""
        return f"{size_text(self.peak(start, end))}/{size_text(self.capacity)}"


@dataclass
class TimelineData:
    """Every lane of a trace, and each future's span, ready for drawing."""

    lanes: list[Lane]
    end_time: int

    def lanes_of(self, pe: int) -> list[int]:
        """Row numbers of the lanes of ``pe``."""
        return [i for i, lane in enumerate(self.lanes) if lane.pe == pe]


def channel_label(channel: dict) -> str:
    """A short lane name for a channel table entry: rd0, wr0, gemm, math, ipcq.left."""
    kind, name = str(channel["kind"]), str(channel["name"])
    if kind == "ipcq":
        return "ipcq" + name[name.rfind(".") :] if "." in name else "ipcq"
    if kind in ("gemm", "math") and int(channel["index"]) == 0:
        return _SHORT[kind]
    return f"{_SHORT.get(kind, kind)}{channel['index']}"


class _OnFirstUse:
    """A lane's arrays, made when first read: a non-data descriptor, so once made they are
    the lane's own attributes and this is not consulted again."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, lane: Lane | None, owner: type | None = None):
        if lane is None:
            return self
        lane.__dict__.update(lane.make())
        return lane.__dict__[self.name]


class _LazyKernelLane(KernelLane):
    """A kernel lane whose stalls are gathered when first drawn."""

    stalls = _OnFirstUse()


class _LazyChannelLane(ChannelLane):
    """A channel lane whose busy intervals are gathered when first drawn."""

    busy = _OnFirstUse()


class _LazyScratchLane(ScratchLane):
    """A scratch lane whose event times are gathered when first drawn."""

    times = _OnFirstUse()


def _deferred(lane: Lane, make) -> Lane:
    """``lane`` with the attributes ``make()`` returns (a dict) left to its first use."""
    for name in ("stalls", "busy", "times"):
        lane.__dict__.pop(name, None)
    lane.make = make
    return lane


def build_timeline(replay: Replay) -> TimelineData:
    """The lanes of every PE: kernel, each used channel, scratch.

    Which lanes there are and their labels are known at once; the arrays a lane draws
    from are gathered when it is first drawn (or read), so opening a 256-PE trace costs
    the few PEs on screen, not all of them.
    """
    index = replay.index
    c, k, f = index.columns, index.commands, index.futures
    end_time = max(replay.end_time, int(c.time[-1]) if index.n_events else 0)
    time = c.time
    # One dtype for every cycle the lanes keep, from the column's range: gathers then
    # write it directly, with no full-length int64 or float64 copy on the way.
    cycles = cycle_dtype(int(time.min()), max(int(time.max()), end_time)) if len(time) else np.int32
    lanes: list[Lane] = []

    ends_by_pe = kernel_ends(replay)
    scratch_capacity = _scratch_capacity(replay)
    # Stalled waits, and waits that never ended (deadlock, trace cut short).
    stalled = np.flatnonzero((f.wait_begin >= 0) & ((f.stall > 0) | (f.wait_end < 0)))
    stalled_pe = c.pe[f.wait_begin[stalled]]
    by_pe: dict[int, list[dict]] = {}
    for ch in index.channels:
        by_pe.setdefault(int(ch["pe"]), []).append(ch)

    def stalls_of(pe: int) -> dict:
        mine = stalled[stalled_pe == pe]
        begin_t = time[f.wait_begin[mine]]
        end_ev = f.wait_end[mine]
        end_t = np.where(end_ev >= 0, time[np.maximum(end_ev, 0)], end_time)
        return {"stalls": Intervals(begin_t, end_t, mine)}

    def busy_of(granted: np.ndarray) -> dict:
        grant_t = gather(time, k.grant[granted], cycles)
        rel_t = gather(time, k.release[granted], cycles, missing=end_time)
        return {"busy": Intervals(grant_t, rel_t, granted)}

    for pe in range(index.n_pes):
        width = len(f"PE{pe}")
        start, end, outcome = ends_by_pe.get(pe, (float(end_time), float(end_time), "done"))
        kernel = _LazyKernelLane(
            pe, f"PE{pe} kernel", "kernel", start=start, end=end, outcome=outcome
        )
        lanes.append(_deferred(kernel, lambda pe=pe: stalls_of(pe)))
        channels = by_pe.get(pe, [])
        channels.sort(key=lambda ch: (_CHANNEL_ORDER.get(str(ch["kind"]), 9), int(ch["index"])))
        for ch in channels:
            cid = int(ch["id"])
            cmds = index.channel_cmds[cid] if cid < len(index.channel_cmds) else np.empty(0, int)
            granted = cmds[k.grant[cmds] >= 0]
            if not len(granted):
                continue
            label = f"{'':<{width}} {channel_label(ch)}"
            lane = _LazyChannelLane(pe, label, str(ch["kind"]), cid)
            lanes.append(_deferred(lane, lambda granted=granted: busy_of(granted)))
        events = index.pe_scratch_events[pe] if pe < len(index.pe_scratch_events) else []
        events = np.asarray(events, dtype=np.int64)
        levels = c.val[events]
        scratch = _LazyScratchLane(
            pe,
            f"{'':<{width}} scratch",
            "scratch",
            levels=levels,
            # Against the capacity, so 32K of 1M reads as nearly empty; a trace that
            # does not say its capacity (or overflowed it) is scaled to its peak.
            capacity=max(scratch_capacity, int(levels.max(initial=1))),
        )
        lanes.append(_deferred(scratch, lambda events=events: {"times": narrow(time[events])[0]}))
    return TimelineData(lanes, end_time)


def _scratch_capacity(replay: Replay) -> int:
    """The scratch bytes of a PE the trace's hardware config gives, else 0."""
    config = replay.index.header.get("config")
    value = config.get("scratch_bytes") if isinstance(config, dict) else None
    return value if isinstance(value, int) and value > 0 else 0


def kernel_ends(replay: Replay) -> dict[int, tuple[float, float, str]]:
    """Per PE: when its kernel started and ended, and how it ended."""
    index = replay.index
    c = index.columns
    outcome_of = {
        Kind.KERNEL_END: "done",
        Kind.KERNEL_ERROR: "error",
        Kind.DEADLOCK: "deadlocked",
    }
    out: dict[int, tuple[float, float, str]] = {}
    end_time = float(replay.end_time)
    for pe, events in enumerate(index.pe_status_events):
        if not len(events):
            continue
        kinds = c.kind[events]
        starts = events[kinds == Kind.KERNEL_START]
        start = float(c.time[starts[0]]) if len(starts) else 0.0
        end, outcome = end_time, "unknown"
        for kind, name in outcome_of.items():
            hits = events[kinds == kind]
            if len(hits):
                end, outcome = float(c.time[hits[0]]), name
                break
        out[pe] = (start, end, outcome)
    return out


def future_span(replay: Replay, future: int) -> tuple[int, int, int, int, int, int] | None:
    """``(pe, issue, resolve, grant, release, channel)`` of ``future``: cycles, -1 where absent."""
    index = replay.index
    f, k, time = index.futures, index.commands, index.columns.time
    if not 0 <= future < len(f.cmd) or f.cmd[future] < 0:
        return None
    cmd = int(f.cmd[future])

    def at(event: int) -> int:
        return int(time[event]) if event >= 0 else -1

    issue = at(int(k.issue[cmd]))
    resolve = max(at(int(f.wait_end[future])), at(int(k.complete[cmd])))
    if resolve < 0:
        resolve = replay.end_time
    return (
        int(k.pe[cmd]),
        issue,
        resolve,
        at(int(k.grant[cmd])),
        # A transfer granted but never released held its channel to the end.
        replay.end_time if k.grant[cmd] >= 0 and k.release[cmd] < 0 else at(int(k.release[cmd])),
        int(k.channel[cmd]),
    )
