"""Perfetto's own format: a trace as protobuf TrackEvent packets, streamed to disk in batches.

The mapping (one packet sequence, interned names and source locations):

- A process track per PE (``PE n``, pid = PE + 1) holding, in this order, a track
  for its kernel, one per channel it owns (DMA read channels, DMA write, GEMM,
  MATH, IPCQ links), a ``scratch`` counter track (bytes in use) and ``futures``
  tracks: each future is a slice from issue to resolution on the first of its
  PE's future tracks that is free then (as many tracks as futures in flight).
- Kernel track: a slice per kernel run and, nested in it, a ``stall FILE:LINE``
  slice per wait that stalled or never returned; a wait that did not stall is an
  instant ``wait FILE:LINE``.
- Channel tracks: a slice per command from grant to release (or the end of the
  trace), named by its op.
- Flows, by id (future id + 1): from the future's slice through its own
  transfer's slice to the wait that consumed it (the wait of ``Futures.wait_begin``).
- Every slice carries its source location (``source_location_iid``) and
  ``source = FILE:LINE`` in its debug annotations, with its figures (future,
  cmd, bytes, stalled_cycles, ...); a future's slice names the tensor slice it
  moves (``tensor = K[128:192, :]``) when the trace names its tensors.

Timestamps are the Chrome export's integer nanoseconds (cycle * 1000 / clock_mhz).
Within each track, packets are written in time order, an enclosing slice's begin
before and its end after what it holds; the file is a ``Trace`` message written
packet by packet (each ``packet`` field is a tag and a length, then the packet).
"""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from emulator.trace.schema import Kind
from kbdebug import __version__
from kbdebug.export.chrome_layout import (
    DEFAULT_CLOCK_MHZ,
    clock_mhz,
    cycles_to_ns,
    kernel_names,
    plan_lanes,
)
from kbdebug.replay.index import NONE
from kbdebug.replay.values import Values

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay

#: Packets serialised per write: bounds the export's memory whatever the trace's size.
BATCH = 8192
#: What pip installs to make this export available.
INSTALL_HINT = "pip install 'kbdebug[perfetto]'"
#: Name of the (empty) first track: how ``is_perfetto_export`` knows a file we wrote.
MARKER = "kbdebug export"
#: Longest string taken from the trace into a name (a trace is untrusted).
MAX_NAME = 200
#: Debug annotation names, interned as iid = position + 1.
ANNOTATIONS = (
    "future", "cmd", "bytes", "source", "stalled_cycles", "queued_cycles", "cycles",
    "waited_at", "resolved_by", "unfinished", "pe", "status", "tensor",
)  # fmt: skip
_ANNOTATION = {name: i + 1 for i, name in enumerate(ANNOTATIONS)}
_RESOLVED_BY = ("wait", "complete", "never")
_END_KINDS = (Kind.KERNEL_END, Kind.KERNEL_ERROR, Kind.DEADLOCK)
_STATUS_OF_END = {Kind.KERNEL_END: "ended", Kind.KERNEL_ERROR: "error", Kind.DEADLOCK: "deadlock"}


class PerfettoMissing(ImportError):
    """The ``perfetto`` package (the protobuf classes) is not installed."""


def protos():
    """The ``perfetto_trace_pb2`` module; raises PerfettoMissing saying what to install."""
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError:
        raise PerfettoMissing(
            f"the Perfetto export needs the perfetto package: {INSTALL_HINT}"
        ) from None
    return perfetto_trace_pb2


@dataclass
class PerfettoStats:
    """What a Perfetto export wrote."""

    packets: int = 0
    futures: int = 0
    flows: int = 0
    clock_mhz: float = DEFAULT_CLOCK_MHZ
    #: True when the trace's header named no clock and DEFAULT_CLOCK_MHZ was used.
    clock_assumed: bool = False


def export_perfetto(replay: Replay, out: BinaryIO) -> PerfettoStats:
    """Write ``replay``'s trace to ``out`` as a Perfetto protobuf trace, BATCH packets at a time.

    Raises PerfettoMissing without the perfetto package, OSError when ``out`` fails.
    """
    return _PerfettoExporter(replay, protos()).write(out)


def is_perfetto_export(path: Path) -> bool:
    """Whether ``path`` starts with the marker track ``export_perfetto`` writes first."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 12)
        pb = protos()
    except (OSError, PerfettoMissing):
        return False
    if len(head) < 3 or head[0] != 0x0A:
        return False
    size, at = _varint(head, 1)
    if size is None or at + size > len(head):
        return False
    from google.protobuf.message import DecodeError  # protobuf comes with perfetto

    packet = pb.TracePacket()
    try:
        packet.ParseFromString(head[at : at + size])
    except DecodeError:
        return False
    return packet.track_descriptor.name == MARKER


def _varint(data: bytes, at: int) -> tuple[int | None, int]:
    value = shift = 0
    while at < len(data) and shift < 64:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
    return None, at


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_NAME else text[: MAX_NAME - 1] + "…"


class _PerfettoExporter:
    """Lays the trace out as tracks, then writes their packets track group by track group."""

    def __init__(self, replay: Replay, pb):
        self.replay = replay
        self.pb = pb
        self.index = index = replay.index
        mhz = clock_mhz(index.header)
        self.stats = PerfettoStats(clock_mhz=mhz or DEFAULT_CLOCK_MHZ, clock_assumed=mhz is None)
        self.end = int(replay.end_time)
        self.plan = plan_lanes(index)
        self._names: dict[str, int] = {}
        self._uuids = iter(range(2, 1 << 62))
        self._batch = pb.Trace()
        self._out: BinaryIO | None = None

    def ns(self, cycles) -> np.ndarray:
        return cycles_to_ns(cycles, self.stats.clock_mhz)

    def time(self, events: np.ndarray, default) -> np.ndarray:
        """Cycle of each event index, ``default`` where the index is -1."""
        events = np.asarray(events, dtype=np.int64)
        t = self.index.columns.time
        return np.where(events >= 0, t[np.maximum(events, 0)], default).astype(np.int64)

    def name_iid(self, name: str) -> int:
        """The interned id of an event name (every name is interned before the first event)."""
        return self._names[name]

    # --- output -----------------------------------------------------------------------------

    def packet(self):
        """A new packet of the batch, on our sequence; the batch is written when full."""
        if len(self._batch.packet) >= BATCH:
            self._flush()
        p = self._batch.packet.add()
        p.trusted_packet_sequence_id = 1
        return p

    def event(self, ts: int, track: int, kind: int, name_iid: int = 0):
        """A TrackEvent packet at ``ts`` ns on ``track``."""
        p = self.packet()
        p.timestamp = ts
        p.sequence_flags = self.pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        e = p.track_event
        e.type = kind
        e.track_uuid = track
        if name_iid:
            e.name_iid = name_iid
        return e

    def _flush(self) -> None:
        if self._batch.packet:
            self.stats.packets += len(self._batch.packet)
            self._out.write(self._batch.SerializeToString())
            # A fresh message: clearing one keeps its arena, which would grow with the trace.
            self._batch = self.pb.Trace()

    def write(self, out: BinaryIO) -> PerfettoStats:
        self._out = out
        self._layout()
        self._descriptors()
        self._interned()
        self._kernel_track()
        self._channel_tracks()
        self._future_tracks()
        self._scratch_counters()
        self._flush()
        return self.stats

    # --- tracks ------------------------------------------------------------------------------

    def _layout(self) -> None:
        """The uuid of every track: per PE its process, kernel and scratch; per channel one."""
        n_pes = self.index.n_pes
        self.pe_uuid = np.zeros(n_pes, dtype=np.int64)
        self.kernel_uuid = np.zeros(n_pes, dtype=np.int64)
        self.scratch_uuid = np.zeros(n_pes, dtype=np.int64)
        self.channel_uuid = np.zeros(len(self.index.channels), dtype=np.int64)
        for lane in self.plan.lanes:
            if lane.channel == NONE:
                self.pe_uuid[lane.pe] = next(self._uuids)
                self.kernel_uuid[lane.pe] = next(self._uuids)
                self.scratch_uuid[lane.pe] = next(self._uuids)
            else:
                self.channel_uuid[lane.channel] = next(self._uuids)
        self._futures_layout()

    def _futures_layout(self) -> None:
        """Each future's slice and the future track (slot) of its PE it goes on."""
        f, k = self.index.futures, self.index.commands
        ids = np.flatnonzero(f.cmd >= 0)
        cmd = f.cmd[ids]
        issued = self.time(k.issue[cmd], 0)
        waited, complete = f.wait_end[ids], k.complete[cmd]
        resolved = np.maximum(self.time(waited, self.time(complete, self.end)), issued)
        pe = k.pe[cmd].astype(np.int64)
        t0, t1 = self.ns(issued), self.ns(resolved)
        slot = np.zeros(len(ids), dtype=np.int64)
        slots_of_pe: dict[int, int] = {}
        order = np.lexsort((t0, pe))
        for p in np.unique(pe).tolist():
            free: list[tuple[int, int]] = []  # (ns its last future ends, slot)
            count = 0
            rows = order[np.searchsorted(pe[order], p) : np.searchsorted(pe[order], p, "right")]
            for row, start, stop in zip(
                rows.tolist(), t0[rows].tolist(), t1[rows].tolist(), strict=True
            ):
                if free and free[0][0] <= start:
                    _, s = heapq.heappop(free)
                else:
                    s, count = count, count + 1
                slot[row] = s
                heapq.heappush(free, (stop, s))
            slots_of_pe[p] = count
        self.futures = {
            "id": ids, "cmd": cmd, "pe": pe, "t0": t0, "t1": t1, "slot": slot,
            "how": np.where(waited >= 0, 0, np.where(complete >= 0, 1, 2)),
        }  # fmt: skip
        self.future_uuid = {
            (p, s): next(self._uuids) for p, n in slots_of_pe.items() for s in range(n)
        }

    def _descriptors(self) -> None:
        pb = self.pb
        marker = self.packet().track_descriptor
        marker.uuid = 1
        marker.name = MARKER
        marker.description = _bounded(f"kbdebug {__version__}, from {self.replay.path}")
        names = kernel_names(self.index)
        explicit = pb.TrackDescriptor.ChildTracksOrdering.EXPLICIT
        for lane in self.plan.lanes:
            if lane.channel != NONE:
                self._track(self.channel_uuid[lane.channel], lane.pe, lane.name, lane.sort_index)
                continue
            pe = lane.pe
            d = self.packet().track_descriptor
            d.uuid = int(self.pe_uuid[pe])
            d.process.pid = pe + 1
            d.process.process_name = f"PE {pe}"
            d.child_ordering = explicit
            kernel = _bounded(f"kernel {names[pe]}") if names.get(pe) else "kernel"
            self._track(self.kernel_uuid[pe], pe, kernel, 0)
            d = self._track(self.scratch_uuid[pe], pe, "scratch", 1000)
            d.counter.unit = pb.CounterDescriptor.Unit.UNIT_SIZE_BYTES
        for (pe, s), uuid in self.future_uuid.items():
            self._track(uuid, pe, "futures", 1001 + s)

    def _track(self, uuid, pe: int, name: str, rank: int):
        d = self.packet().track_descriptor
        d.uuid = int(uuid)
        d.parent_uuid = int(self.pe_uuid[pe])
        d.name = name
        d.sibling_order_rank = rank
        return d

    def _interned(self) -> None:
        """Every event name, annotation name, source location and source text, up front."""
        index, k = self.index, self.index.commands
        p = self.packet()
        p.sequence_flags = self.pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        data = p.interned_data
        names = {"kernel"} | {_bounded(f"kernel {n}") for n in kernel_names(index).values()}
        for op in np.unique(k.op[k.op >= 0]).tolist():
            op_name = _bounded(index.string(op))
            names |= {op_name, _bounded(f"{op_name} future")}
        self.waits = self._waits()
        for loc in np.unique(self.waits["loc"]).tolist():
            names |= {self._wait_name("stall", loc), self._wait_name("wait", loc)}
        for iid, name in enumerate(sorted(names), start=1):
            data.event_names.add(iid=iid, name=name)
            self._names[name] = iid
        self._wait_iids = {
            (what, loc): self._names[self._wait_name(what, loc)]
            for loc in np.unique(self.waits["loc"]).tolist()
            for what in ("stall", "wait")
        }
        for name, iid in _ANNOTATION.items():
            data.debug_annotation_names.add(iid=iid, name=name)
        for loc_id, loc in enumerate(index.locs):
            data.source_locations.add(
                iid=loc_id + 1,
                file_name=_bounded(loc.file),
                function_name=_bounded(loc.function),
                line_number=max(0, min(int(loc.line), 2**31 - 1)),
            )
            data.debug_annotation_string_values.add(
                iid=loc_id + 1, str=_bounded(str(loc)).encode("utf-8", "replace")
            )

    def _wait_name(self, what: str, loc: int) -> str:
        where = self.index.loc(loc) if loc >= 0 else None
        return _bounded(f"{what} {Path(where.file).name}:{where.line}" if where else what)

    # --- packets per track group ----------------------------------------------------------------

    def annotate(self, event, name: str, value: int) -> None:
        event.debug_annotations.add(name_iid=_ANNOTATION[name], int_value=value)

    def source(self, event, loc: int, name: str = "source") -> None:
        """The slice's location: interned, and as ``name = FILE:LINE`` for its args."""
        if loc >= 0:
            if name == "source":
                event.source_location_iid = loc + 1
            event.debug_annotations.add(name_iid=_ANNOTATION[name], string_value_iid=loc + 1)

    def _waits(self) -> dict[str, np.ndarray]:
        """Every wait, per PE in order: WAIT_BEGIN, its WAIT_END (-1 if none), loc, future.

        A PE waits on one thing at a time, so its n-th WAIT_END closes its n-th WAIT_BEGIN.
        """
        c = self.index.columns
        begin = np.flatnonzero(c.kind == Kind.WAIT_BEGIN)
        ends = np.flatnonzero(c.kind == Kind.WAIT_END)
        begin = begin[np.argsort(c.pe[begin], kind="stable")]
        ends = ends[np.argsort(c.pe[ends], kind="stable")]
        pe_b, pe_e = c.pe[begin].astype(np.int64), c.pe[ends].astype(np.int64)
        rank_b = np.arange(len(begin)) - np.searchsorted(pe_b, pe_b)
        first_e = np.searchsorted(pe_e, pe_b)
        count_e = np.searchsorted(pe_e, pe_b, "right") - first_e
        has = rank_b < count_e
        end = np.full(len(begin), NONE, dtype=np.int64)
        end[has] = ends[(first_e + rank_b)[has]]
        ok = end >= 0
        ok[ok] = c.fut[end[ok]] == c.fut[begin[ok]]
        end[~ok] = NONE
        return {"begin": begin, "end": end, "pe": pe_b, "loc": c.loc[begin].astype(np.int64),
                "fut": c.fut[begin].astype(np.int64)}  # fmt: skip

    def _kernel_track(self) -> None:
        """Each PE's kernel slice; in it, its stalls as slices and its other waits as instants."""
        c, pb = self.index.columns, self.pb.TrackEvent
        n = self.index.n_pes
        k_start = np.full(n, NONE, dtype=np.int64)
        k_end = np.full(n, NONE, dtype=np.int64)
        end_kind = np.full(n, NONE, dtype=np.int64)
        starts = np.flatnonzero(c.kind == Kind.KERNEL_START)
        k_start[c.pe[starts][::-1]] = c.time[starts][::-1]
        ends = np.flatnonzero(np.isin(c.kind, np.array(_END_KINDS, dtype=np.int8)))
        k_end[c.pe[ends][::-1]] = c.time[ends][::-1]
        end_kind[c.pe[ends][::-1]] = c.kind[ends][::-1]
        lane_end = np.where(k_end >= 0, k_end, self.end)
        names = kernel_names(self.index)
        cut = "cut off" if self.replay.status == "truncated" else "stopped"
        running = np.flatnonzero(k_start >= 0).tolist()
        for pe in running:
            name = _bounded(f"kernel {names[pe]}") if names.get(pe) else "kernel"
            e = self.event(int(self.ns(k_start[pe])), int(self.kernel_uuid[pe]),
                           pb.TYPE_SLICE_BEGIN, self.name_iid(name))  # fmt: skip
            self.annotate(e, "pe", pe)
        w = self.waits
        f = self.index.futures
        t0 = c.time[w["begin"]]
        t1 = np.where(w["end"] >= 0, c.time[np.maximum(w["end"], 0)],
                      np.maximum(lane_end[w["pe"]], t0))  # fmt: skip
        stalled = np.where(w["end"] >= 0, c.val[np.maximum(w["end"], 0)], t1 - t0)
        # The flow of a future ends at its wait (Futures.wait_begin); a second wait has none.
        fut = w["fut"]
        valid = (fut >= 0) & (fut < len(f.cmd))
        flow = valid & (f.wait_begin[np.where(valid, fut, 0)] == w["begin"])
        flow &= f.cmd[np.where(valid, fut, 0)] >= 0
        # Per future id: whether its flow ends at a wait (only those get flow ids at all).
        self.flows = np.zeros(len(f.cmd), dtype=bool)
        self.flows[fut[flow]] = True
        cols = (w["pe"], w["loc"], fut, t0, t1, self.ns(t0), self.ns(t1), stalled, w["end"], flow)
        for lo in range(0, len(w["begin"]), BATCH):
            rows = slice(lo, lo + BATCH)
            for pe, loc, fid, c0, c1, ns0, ns1, stall, end, has_flow in zip(
                *(col[rows].tolist() for col in cols), strict=True
            ):
                track = int(self.kernel_uuid[pe])
                slice_ = stall > 0 or (end < 0 and c1 > c0)
                what = "stall" if slice_ else "wait"
                kind = pb.TYPE_SLICE_BEGIN if slice_ else pb.TYPE_INSTANT
                e = self.event(ns0, track, kind, self._wait_iids[what, loc])
                self.source(e, loc)
                if fid >= 0:
                    self.annotate(e, "future", fid)
                self.annotate(e, "stalled_cycles", stall)
                if end < 0:
                    e.debug_annotations.add(name_iid=_ANNOTATION["unfinished"], bool_value=True)
                if has_flow:
                    e.terminating_flow_ids.append(fid + 1)
                    self.stats.flows += 1
                if slice_:
                    self.event(ns1, track, pb.TYPE_SLICE_END)
        for pe in running:
            kind = int(end_kind[pe])
            e = self.event(int(self.ns(lane_end[pe])), int(self.kernel_uuid[pe]),
                           pb.TYPE_SLICE_END)  # fmt: skip
            status = _STATUS_OF_END[Kind(kind)] if kind >= 0 else cut
            e.debug_annotations.add(name_iid=_ANNOTATION["status"], string_value=status)

    def _channel_tracks(self) -> None:
        """A slice per command from grant to release, per channel in time order."""
        c, k, pb = self.index.columns, self.index.commands, self.pb.TrackEvent
        cmd = np.flatnonzero(k.grant >= 0)
        grant, release, request = k.grant[cmd], k.release[cmd], k.request[cmd]
        chan = c.chan[grant].astype(np.int64)
        t0, t1 = c.time[grant], self.time(release, self.end)
        order = np.lexsort((cmd, t0, chan))
        queued = np.where(request >= 0, t0 - self.time(request, 0), 0)
        fut = k.future[cmd]
        flow = (fut >= 0) & self.flows[np.where(fut >= 0, fut, 0)]
        cols = (cmd, chan, self.ns(t0), self.ns(t1), t1 - t0, queued, release >= 0,
                k.op[cmd], fut, k.nbytes[cmd], k.loc[cmd], flow)  # fmt: skip
        for lo in range(0, len(order), BATCH):
            rows = order[lo : lo + BATCH]
            for cmd_id, ch, ns0, ns1, cycles, queue, released, op, fid, nbytes, loc, flow in zip(
                *(col[rows].tolist() for col in cols), strict=True
            ):
                track = int(self.channel_uuid[ch])
                name = _bounded(self.index.string(op)) if op >= 0 else "kernel"
                e = self.event(ns0, track, pb.TYPE_SLICE_BEGIN, self.name_iid(name))
                self.source(e, loc)
                self.annotate(e, "cmd", cmd_id)
                if fid >= 0:
                    self.annotate(e, "future", fid)
                    if flow:
                        e.flow_ids.append(fid + 1)
                self.annotate(e, "bytes", nbytes)
                self.annotate(e, "cycles", cycles)
                self.annotate(e, "queued_cycles", queue)
                if not released:
                    e.debug_annotations.add(name_iid=_ANNOTATION["unfinished"], bool_value=True)
                self.event(ns1, track, pb.TYPE_SLICE_END)

    def _future_tracks(self) -> None:
        """A slice per future from issue to resolution, on its PE's future tracks."""
        f, k, pb = self.index.futures, self.index.commands, self.pb.TrackEvent
        fu = self.futures
        order = np.lexsort((fu["t0"], fu["slot"], fu["pe"]))
        cmd = fu["cmd"]
        cols = (fu["id"], cmd, fu["pe"], fu["slot"], fu["t0"], fu["t1"], fu["how"], k.op[cmd],
                k.nbytes[cmd], k.loc[cmd], f.wait_loc[fu["id"]], f.stall[fu["id"]],
                self.flows[fu["id"]], k.addr[cmd])  # fmt: skip
        tensors = Values.of(self.replay).tensors
        for lo in range(0, len(order), BATCH):
            rows = order[lo : lo + BATCH]
            for (
                fid,
                cmd_id,
                pe,
                slot,
                ns0,
                ns1,
                how,
                op,
                nbytes,
                loc,
                wait_loc,
                stall,
                flow,
                addr,
            ) in zip(*(col[rows].tolist() for col in cols), strict=True):
                track = self.future_uuid[(pe, slot)]
                name = _bounded(f"{self.index.string(op)} future") if op >= 0 else "kernel"
                e = self.event(ns0, track, pb.TYPE_SLICE_BEGIN, self.name_iid(name))
                self.source(e, loc)
                self.source(e, wait_loc, "waited_at")
                self.annotate(e, "future", fid)
                self.annotate(e, "cmd", cmd_id)
                self.annotate(e, "bytes", nbytes)
                self.annotate(e, "stalled_cycles", stall)
                e.debug_annotations.add(
                    name_iid=_ANNOTATION["resolved_by"], string_value=_RESOLVED_BY[how]
                )
                # The tensor slice it moves (K[128:192, :]) when the trace names its tensors.
                named = tensors.slice_of(addr, nbytes) if len(tensors) else None
                if named is not None:
                    e.debug_annotations.add(
                        name_iid=_ANNOTATION["tensor"], string_value=_bounded(str(named))
                    )
                if flow:
                    e.flow_ids.append(fid + 1)
                self.event(ns1, track, pb.TYPE_SLICE_END)
                self.stats.futures += 1

    def _scratch_counters(self) -> None:
        """Scratch bytes in use per PE, at every allocation and free."""
        c, pb = self.index.columns, self.pb.TrackEvent
        events = np.flatnonzero(np.isin(c.kind, [Kind.SCRATCH_ALLOC, Kind.SCRATCH_FREE]))
        events = events[np.argsort(c.pe[events], kind="stable")]
        cols = (c.pe[events], self.ns(c.time[events]), c.val[events])
        for lo in range(0, len(events), BATCH):
            for pe, ns, value in zip(*(col[lo : lo + BATCH].tolist() for col in cols), strict=True):
                e = self.event(ns, int(self.scratch_uuid[pe]), pb.TYPE_COUNTER)
                e.counter_value = value


def write_perfetto(replay: Replay, path: str | os.PathLike[str]) -> PerfettoStats:
    """Export ``replay``'s trace to ``path``, replacing it only once the export is whole."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as out:
            stats = export_perfetto(replay, out)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return stats


__all__ = [
    "INSTALL_HINT",
    "PerfettoMissing",
    "PerfettoStats",
    "export_perfetto",
    "is_perfetto_export",
    "write_perfetto",
]
