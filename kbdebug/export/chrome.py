"""Chrome Trace Event JSON: a trace as lanes Perfetto and chrome://tracing open, streamed to disk.

The mapping, one process per PE and one thread per lane:

- ``pid`` is the PE plus one (Perfetto gives pid 0 to the kernel's swapper and
  merges it away), named ``PE n`` by ``process_name`` and ordered by
  ``process_sort_index``. Every event names a ``tid`` of its PE's lanes, so no
  thread is ever created implicitly.
- Lanes, in this order within a PE (``thread_sort_index`` 0, 1, ...): the
  kernel, each DMA read channel, DMA write, GEMM, MATH, each IPCQ link. Thread
  ids are unique across the file.
- Kernel lane: an ``X`` slice per kernel run (start to end, error, deadlock or
  the end of the trace) and, nested in it, an ``X`` slice per wait that stalled
  (WAIT_BEGIN to WAIT_END, stalled > 0) or never returned (to the lane's end,
  ``unresolved``), named by the wait's source line.
- Channel lanes: an ``X`` slice per command from grant to release (or the end of
  the trace, ``unfinished``), named by its op, with args cmd, future, bytes,
  source, cycles and queued_cycles.
- Futures: an async ``b``/``e`` pair per future from issue to resolution
  (WAIT_END, else COMPLETE, else the end of the trace), id ``id2.local`` = the
  future id so that Perfetto keeps each PE's futures under that PE.
- Flows: ``s`` strictly inside the transfer's ``X`` slice (for a received
  future, the sender's link slice) to ``f`` (``bp: "e"``) strictly inside the
  stall slice of the wait that consumed it, id = the future id. A fast-path
  wait (stalled == 0) has no stall slice and gets no flow; nor does a transfer
  or stall too short (under 2 ns) to hold a timestamp strictly inside it.
- A ``C`` counter ``scratch`` (bytes in use) per PE; an ``i`` instant per
  finding (scope ``p``), per kernel error, deadlock and host read (scope ``t``,
  kernel lane), and one (scope ``g``) where a truncated trace stops.

Time: cycle ``c`` is ``round(c * 1000 / clock_mhz)`` integer nanoseconds, written
as microseconds with exactly three decimals. Every boundary is then the same
nanosecond to Perfetto (which keeps integer ns) whichever event it is read
from, so slices that touch in cycles touch, and never overlap, in the viewer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np

from emulator.trace.schema import Kind
from kbdebug import __version__
from kbdebug.analysis import Analysis
from kbdebug.export.chrome_instants import instants
from kbdebug.export.chrome_layout import (
    DEFAULT_CLOCK_MHZ,
    clock_mhz,
    cycles_to_ns,
    json_string,
    kernel_names,
    microseconds,
    plan_lanes,
)
from kbdebug.replay.index import NONE
from kbdebug.replay.values import Values

if TYPE_CHECKING:
    from kbdebug.analysis.findings import Finding
    from kbdebug.replay.replay import Replay

#: Rows formatted per write: bounds the memory of the export, whatever the trace's size.
BATCH = 32768

_END_KINDS = (Kind.KERNEL_END, Kind.KERNEL_ERROR, Kind.DEADLOCK)
_STATUS_OF_END = {Kind.KERNEL_END: "ended", Kind.KERNEL_ERROR: "error", Kind.DEADLOCK: "deadlock"}


@dataclass
class ExportStats:
    """What an export wrote."""

    path: str | None = None
    bytes: int = 0
    clock_mhz: float = DEFAULT_CLOCK_MHZ
    #: True when the trace's header named no clock and DEFAULT_CLOCK_MHZ was used.
    clock_assumed: bool = False
    #: Events written, by phase ("X", "b", "s", ...).
    phases: dict[str, int] = field(default_factory=dict)
    #: Stalled waits that got no flow because a slice was too short to hold its end.
    flows_too_short: int = 0

    @property
    def events(self) -> int:
        return sum(self.phases.values())


def write_chrome(
    replay: Replay,
    path: str | os.PathLike[str],
    *,
    findings: list[Finding] | None = None,
) -> ExportStats:
    """Export ``replay``'s trace to ``path``, replacing it only once the export is whole.

    ``findings`` defaults to the trace's (computed here). Raises OSError when ``path``
    cannot be written.
    """
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "w", encoding="utf-8", newline="\n") as out:
            stats = export_chrome(replay, out, findings=findings)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    stats.path = os.fspath(path)
    stats.bytes = path.stat().st_size
    return stats


def export_chrome(
    replay: Replay, out: TextIO, *, findings: list[Finding] | None = None
) -> ExportStats:
    """Write ``replay``'s trace to ``out`` as one Chrome Trace Event JSON object.

    Events are formatted and written ``BATCH`` at a time; the whole document is
    never held in memory.
    """
    if findings is None:
        findings = Analysis(replay).findings
    return _Exporter(replay, findings).write(out)


# --- the exporter ---------------------------------------------------------------------


class _Exporter:
    """Computes every event of the export as columns, then formats them batch by batch."""

    def __init__(self, replay: Replay, findings: list[Finding]):
        self.replay = replay
        self.index = index = replay.index
        self.findings = findings
        mhz = clock_mhz(index.header)
        self.stats = ExportStats(clock_mhz=mhz or DEFAULT_CLOCK_MHZ, clock_assumed=mhz is None)
        self.mhz = self.stats.clock_mhz
        self.end = int(replay.end_time)
        self.plan = plan_lanes(index, tuple(f.pe for f in findings))
        self.strings_js = [json_string(s) for s in index.strings]
        self.locs_js = [json_string(str(loc)) for loc in index.locs]
        self._kernel_spans()

    @cached_property
    def tensors_js(self) -> dict[int, str]:
        """Per command that moved a slice of a named tensor (format 1.5), the slice as a
        JSON string (``"K[128:192, :]"``): the transfer's and the future's "tensor" arg."""
        tensors = Values.of(self.replay).tensors
        if not len(tensors):
            return {}
        k = self.index.commands
        moved = np.flatnonzero((k.addr >= 0) & (k.issue >= 0))
        out = {}
        for cmd, addr, nbytes in zip(
            moved.tolist(), k.addr[moved].tolist(), k.nbytes[moved].tolist(), strict=True
        ):
            found = tensors.slice_of(addr, nbytes)
            if found is not None:
                out[cmd] = json_string(str(found))
        return out

    def ns(self, cycles: np.ndarray) -> np.ndarray:
        return cycles_to_ns(cycles, self.mhz)

    def time(self, events: np.ndarray, default: int | np.ndarray) -> np.ndarray:
        """Cycle of each event index, ``default`` where the index is -1."""
        events = np.asarray(events, dtype=np.int64)
        t = self.index.columns.time
        return np.where(events >= 0, t[np.maximum(events, 0)], default).astype(np.int64)

    def string_js(self, string_id: int) -> str:
        return self.strings_js[string_id] if string_id >= 0 else '""'

    # --- the document ---------------------------------------------------------------------

    def write(self, out: TextIO) -> ExportStats:
        other = {
            "clock_mhz": self.mhz,
            "clock_assumed": self.stats.clock_assumed,
            "time": "ts and dur in microseconds: cycle / clock_mhz",
            "source": self.replay.path,
            "kbdebug_version": __version__,
            "kernel": str(self.index.header.get("launch", {}).get("kernel", "")),
            "status": self.replay.status,
            "end_cycle": self.end,
            "trace_events": self.index.n_events,
            "pid": "PE + 1",
        }
        out.write('{"displayTimeUnit":"ns","otherData":')
        out.write(json.dumps(other, ensure_ascii=False))
        out.write(',"traceEvents":[')
        first = True
        for phase, rows in self._events():
            for lo in range(0, len(rows), BATCH):
                batch = rows[lo : lo + BATCH]
                out.write(("\n" if first else ",\n") + ",\n".join(batch))
                first = False
                self.stats.phases[phase] = self.stats.phases.get(phase, 0) + len(batch)
        out.write("\n]}\n")
        return self.stats

    def _events(self) -> Iterator[tuple[str, list[str]]]:
        yield "M", self._metadata()
        yield "X", self._kernel_slices()
        yield from self._stall_slices()
        yield from self._occupancy_slices()
        yield from self._futures()
        yield from self._flows()
        yield from self._scratch_counters()
        yield "i", instants(self.replay, self.plan, self.findings, self.mhz, self.locs_js)

    # --- lanes ------------------------------------------------------------------------------

    def _metadata(self) -> list[str]:
        rows = []
        for lane in self.plan.lanes:
            pid, tid = lane.pid, lane.tid
            if lane.channel == NONE:
                rows.append(
                    f'{{"ph":"M","pid":{pid},"tid":{tid},"name":"process_name",'
                    f'"args":{{"name":"PE {lane.pe}"}}}}'
                )
                rows.append(
                    f'{{"ph":"M","pid":{pid},"tid":{tid},"name":"process_sort_index",'
                    f'"args":{{"sort_index":{lane.pe}}}}}'
                )
            rows.append(
                f'{{"ph":"M","pid":{pid},"tid":{tid},"name":"thread_name",'
                f'"args":{{"name":{json_string(lane.name)}}}}}'
            )
            rows.append(
                f'{{"ph":"M","pid":{pid},"tid":{tid},"name":"thread_sort_index",'
                f'"args":{{"sort_index":{lane.sort_index}}}}}'
            )
        return rows

    def _kernel_spans(self) -> None:
        """Per PE: the kernel's start and end cycles and how it ended."""
        c = self.index.columns
        n = self.index.n_pes
        self.k_start = np.full(n, NONE, dtype=np.int64)
        self.k_end = np.full(n, NONE, dtype=np.int64)
        self.k_end_kind = np.full(n, NONE, dtype=np.int64)
        starts = np.flatnonzero(c.kind == Kind.KERNEL_START)
        self.k_start[c.pe[starts][::-1]] = c.time[starts][::-1]
        ends = np.flatnonzero(np.isin(c.kind, np.array(_END_KINDS, dtype=np.int8)))
        self.k_end[c.pe[ends][::-1]] = c.time[ends][::-1]
        self.k_end_kind[c.pe[ends][::-1]] = c.kind[ends][::-1]
        # A kernel the trace never saw end runs to the end of the run.
        self.lane_end = np.where(self.k_end >= 0, self.k_end, self.end)

    def _kernel_slices(self) -> list[str]:
        rows = []
        names = kernel_names(self.index)
        cut = "cut off" if self.replay.status == "truncated" else "stopped"
        for pe in np.flatnonzero(self.k_start >= 0).tolist():
            start, end = int(self.k_start[pe]), int(self.lane_end[pe])
            kind = int(self.k_end_kind[pe])
            status = _STATUS_OF_END[Kind(kind)] if kind >= 0 else cut
            t0, t1 = (int(v) for v in self.ns(np.array([start, end])))
            rows.append(
                f'{{"ph":"X","pid":{pe + 1},"tid":{self.plan.kernel_tid[pe]},'
                f'"ts":{microseconds(t0)},"dur":{microseconds(t1 - t0)},'
                f'"name":{json_string(names.get(pe, "kernel"))},'
                f'"cat":"kernel","args":{{"pe":{pe},"status":"{status}",'
                f'"start_cycle":{start},"end_cycle":{end}}}}}'
            )
        return rows

    # --- stalls -----------------------------------------------------------------------------

    def _waits(self) -> tuple[np.ndarray, np.ndarray]:
        """Every WAIT_BEGIN event index and its WAIT_END's (-1 if the trace has none).

        A PE waits on one thing at a time, so its n-th WAIT_END closes its n-th
        WAIT_BEGIN; pairing in that order also pairs a future waited twice.
        """
        c = self.index.columns
        begins = _by_pe(c, np.flatnonzero(c.kind == Kind.WAIT_BEGIN))
        ends = _by_pe(c, np.flatnonzero(c.kind == Kind.WAIT_END))
        end_of = np.full(len(begins[0]), NONE, dtype=np.int64)
        _, bi, ei = np.intersect1d(begins[1], ends[1], assume_unique=True, return_indices=True)
        same = c.fut[begins[0][bi]] == c.fut[ends[0][ei]]
        end_of[bi[same]] = ends[0][ei[same]]
        order = np.argsort(begins[0], kind="stable")
        return begins[0][order], end_of[order]

    @cached_property
    def stalls(self) -> dict[str, np.ndarray]:
        """The stall slices: waits that stalled, or never returned."""
        c = self.index.columns
        begin, end = self._waits()
        pe = c.pe[begin].astype(np.int64)
        t0 = c.time[begin]
        stalled = np.where(end >= 0, c.val[np.maximum(end, 0)], 0)
        t1 = np.where(end >= 0, c.time[np.maximum(end, 0)], np.maximum(self.lane_end[pe], t0))
        keep = np.where(end >= 0, stalled > 0, t1 > t0)
        return {
            "begin": begin[keep],
            "end": end[keep],
            "pe": pe[keep],
            "fut": c.fut[begin[keep]],
            "loc": c.loc[begin[keep]].astype(np.int64),
            "stalled": stalled[keep],
            "t0": t0[keep],
            "t1": t1[keep],
            "ns0": self.ns(t0[keep]),
            "ns1": self.ns(t1[keep]),
        }

    def _stall_slices(self) -> Iterator[tuple[str, list[str]]]:
        s = self.stalls
        names: dict[int, str] = {}
        for lo in range(0, len(s["begin"]), BATCH):
            rows = []
            cols = [s[k][lo : lo + BATCH].tolist() for k in
                    ("pe", "fut", "loc", "stalled", "t0", "t1", "ns0", "ns1", "end")]  # fmt: skip
            for pe, fut, loc, stalled, t0, t1, ns0, ns1, end in zip(*cols, strict=True):
                name = names.get(loc)
                if name is None:
                    where = self.index.loc(loc)
                    text = f"stall {Path(where.file).name}:{where.line}" if where else "stall"
                    name = names[loc] = json_string(text)
                source = f',"source":{self.locs_js[loc]}' if loc >= 0 else ""
                cycles = stalled if end >= 0 else t1 - t0
                unresolved = ',"unresolved":true' if end < 0 else ""
                rows.append(
                    f'{{"ph":"X","pid":{pe + 1},"tid":{self.plan.kernel_tid[pe]},'
                    f'"ts":{microseconds(ns0)},"dur":{microseconds(ns1 - ns0)},'
                    f'"name":{name},"cat":"stall",'
                    f'"args":{{"future":{fut},"stalled_cycles":{cycles}{source}{unresolved}}}}}'
                )
            yield "X", rows

    # --- channels and engines --------------------------------------------------------------

    @cached_property
    def transfers(self) -> dict[str, np.ndarray]:
        """Every command that was granted a channel: the hold from grant to release."""
        c, k = self.index.columns, self.index.commands
        cmd = np.flatnonzero(k.grant >= 0)
        grant, release, request = k.grant[cmd], k.release[cmd], k.request[cmd]
        t0 = c.time[grant]
        t1 = self.time(release, self.end)
        return {
            "cmd": cmd,
            "chan": c.chan[grant].astype(np.int64),
            "released": release >= 0,
            "queued": np.where(request >= 0, t0 - self.time(request, 0), 0),
            "t0": t0,
            "t1": t1,
            "ns0": self.ns(t0),
            "ns1": self.ns(t1),
        }

    def _occupancy_slices(self) -> Iterator[tuple[str, list[str]]]:
        k = self.index.commands
        t = self.transfers
        plan = self.plan
        channels = self.index.channels
        cats = [json_string(str(ch.get("kind", "channel"))) for ch in channels]
        for lo in range(0, len(t["cmd"]), BATCH):
            part = slice(lo, lo + BATCH)
            cmd = t["cmd"][part]
            cols = [
                cmd.tolist(),
                t["chan"][part].tolist(),
                t["ns0"][part].tolist(),
                t["ns1"][part].tolist(),
                (t["t1"][part] - t["t0"][part]).tolist(),
                t["queued"][part].tolist(),
                t["released"][part].tolist(),
                k.op[cmd].tolist(),
                k.future[cmd].tolist(),
                k.nbytes[cmd].tolist(),
                k.loc[cmd].tolist(),
            ]
            rows = []
            for cmd_id, ch, ns0, ns1, cycles, queued, released, op, fut, nbytes, loc in zip(
                *cols, strict=True
            ):
                args = f'"cmd":{cmd_id}'
                if fut >= 0:
                    args += f',"future":{fut}'
                args += f',"bytes":{nbytes}'
                tensor = self.tensors_js.get(cmd_id)
                if tensor is not None:
                    args += f',"tensor":{tensor}'
                if loc >= 0:
                    args += f',"source":{self.locs_js[loc]}'
                args += f',"cycles":{cycles},"queued_cycles":{queued}'
                if not released:
                    args += ',"unfinished":true'
                rows.append(
                    f'{{"ph":"X","pid":{plan.channel_pid[ch]},"tid":{plan.channel_tid[ch]},'
                    f'"ts":{microseconds(ns0)},"dur":{microseconds(ns1 - ns0)},'
                    f'"name":{self.string_js(op)},'
                    f'"cat":{cats[ch]},"args":{{{args}}}}}'
                )
            yield "X", rows

    # --- futures ----------------------------------------------------------------------------

    def _futures(self) -> Iterator[tuple[str, list[str]]]:
        f, k = self.index.futures, self.index.commands
        ids = np.flatnonzero(f.cmd >= 0)
        cmd = f.cmd[ids]
        issued = self.time(k.issue[cmd], 0)
        waited = f.wait_end[ids]
        complete = k.complete[cmd]
        resolved = self.time(waited, self.time(complete, self.end))
        how = np.where(waited >= 0, 0, np.where(complete >= 0, 1, 2))
        pe = k.pe[cmd]
        ns0, ns1 = self.ns(issued), self.ns(np.maximum(resolved, issued))
        names: dict[int, str] = {}
        resolutions = ('"wait"', '"complete"', '"never"')
        for lo in range(0, len(ids), BATCH):
            part = slice(lo, lo + BATCH)
            cols = [
                ids[part].tolist(),
                cmd[part].tolist(),
                pe[part].tolist(),
                ns0[part].tolist(),
                ns1[part].tolist(),
                how[part].tolist(),
                k.op[cmd[part]].tolist(),
                k.nbytes[cmd[part]].tolist(),
                k.loc[cmd[part]].tolist(),
                f.wait_loc[ids[part]].tolist(),
                f.stall[ids[part]].tolist(),
            ]
            rows = []
            for fid, cmd_id, p, t0, t1, h, op, nbytes, loc, wait_loc, stall in zip(
                *cols, strict=True
            ):
                name = names.get(op)
                if name is None:
                    name = names[op] = json_string(f"{self.index.string(op)} future")
                pid, tid = p + 1, self.plan.kernel_tid[p]
                args = f'"future":{fid},"cmd":{cmd_id},"bytes":{nbytes}'
                tensor = self.tensors_js.get(cmd_id)
                if tensor is not None:
                    args += f',"tensor":{tensor}'
                if loc >= 0:
                    args += f',"issued_at":{self.locs_js[loc]}'
                if wait_loc >= 0:
                    args += f',"waited_at":{self.locs_js[wait_loc]}'
                args += f',"stalled_cycles":{stall},"resolved_by":{resolutions[h]}'
                head = f'"pid":{pid},"tid":{tid},"cat":"future","name":{name}'
                ident = f'"id2":{{"local":{fid}}}'
                rows.append(
                    f'{{"ph":"b",{head},"ts":{microseconds(t0)},{ident},"args":{{{args}}}}}'
                )
                rows.append(f'{{"ph":"e",{head},"ts":{microseconds(t1)},{ident}}}')
            yield "b/e", rows

    # --- flows ------------------------------------------------------------------------------

    def _transfer_of_future(self) -> np.ndarray:
        """Per future id: the command whose channel hold carried its data (-1 if none).

        A received future's data crossed the sender's link (IPCQ_RECV names the
        send); any other future's data moved in its own command's hold.
        """
        c, f, k = self.index.columns, self.index.futures, self.index.commands
        out = np.where(f.cmd >= 0, f.cmd, NONE)
        recvs = np.flatnonzero(c.kind == Kind.IPCQ_RECV)
        fut = c.fut[recvs]
        ok = (fut >= 0) & (fut < len(out))
        out[fut[ok]] = c.cmd[recvs[ok]]
        held = (out >= 0) & (out < len(k.grant))
        out[held] = np.where(k.grant[out[held]] >= 0, out[held], NONE)
        out[~held] = NONE
        return out

    def _flows(self) -> Iterator[tuple[str, list[str]]]:
        s = self.stalls
        t = self.transfers
        plan = self.plan
        waited = s["end"] >= 0
        fut = s["fut"]
        transfer_cmd = self._transfer_of_future()
        has = waited & (fut >= 0) & (fut < len(transfer_cmd))
        if not has.any() or not len(t["cmd"]):
            return
        cmd = np.where(has, transfer_cmd[np.where(has, fut, 0)], NONE)
        # Row of each command in the transfer columns (they are in command order).
        row = np.minimum(np.searchsorted(t["cmd"], cmd), len(t["cmd"]) - 1)
        has &= (cmd >= 0) & (t["cmd"][row] == cmd)
        a0, a1 = t["ns0"][row], t["ns1"][row]
        b0, b1 = s["ns0"], s["ns1"]
        # The end just before the wait returns; the start mid-transfer, and before the end.
        f_ts = b1 - 1
        s_ts = np.minimum(a0 + (a1 - a0) // 2, f_ts - 1)
        inside = (a0 < s_ts) & (s_ts < a1) & (b0 < f_ts) & (f_ts < b1)
        self.stats.flows_too_short = int((has & ~inside).sum())
        ok = np.flatnonzero(has & inside)
        chan = t["chan"][row[ok]]
        cols = [
            fut[ok].tolist(),
            plan.channel_pid[chan].tolist(),
            plan.channel_tid[chan].tolist(),
            s_ts[ok].tolist(),
            (s["pe"][ok] + 1).tolist(),
            plan.kernel_tid[s["pe"][ok]].tolist(),
            f_ts[ok].tolist(),
        ]
        for lo in range(0, len(ok), BATCH):
            rows = []
            for fid, spid, stid, sts, fpid, ftid, fts in zip(
                *(col[lo : lo + BATCH] for col in cols), strict=True
            ):
                rows.append(
                    f'{{"ph":"s","pid":{spid},"tid":{stid},"ts":{microseconds(sts)},'
                    f'"cat":"flow","name":"data to wait","id":{fid}}}'
                )
                rows.append(
                    f'{{"ph":"f","bp":"e","pid":{fpid},"tid":{ftid},"ts":{microseconds(fts)},'
                    f'"cat":"flow","name":"data to wait","id":{fid}}}'
                )
            yield "s/f", rows

    # --- scratch ----------------------------------------------------------------------------

    def _scratch_counters(self) -> Iterator[tuple[str, list[str]]]:
        c = self.index.columns
        events = np.flatnonzero(np.isin(c.kind, [Kind.SCRATCH_ALLOC, Kind.SCRATCH_FREE]))
        pe = c.pe[events].astype(np.int64)
        ns = self.ns(c.time[events])
        cols = [pe.tolist(), self.plan.kernel_tid[pe].tolist(), ns.tolist(),
                c.val[events].tolist()]  # fmt: skip
        for lo in range(0, len(events), BATCH):
            yield (
                "C",
                [
                    f'{{"ph":"C","pid":{p + 1},"tid":{tid},"ts":{microseconds(t)},"name":"scratch",'
                    f'"args":{{"bytes":{v}}}}}'
                    for p, tid, t, v in zip(*(col[lo : lo + BATCH] for col in cols), strict=True)
                ],
            )


def _by_pe(c, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``events`` grouped by PE in order, and a key (pe, rank within the PE) for each."""
    pe = c.pe[events].astype(np.int64)
    order = np.lexsort((events, pe))
    events, pe = events[order], pe[order]
    first = np.searchsorted(pe, pe, side="left")
    rank = np.arange(len(events), dtype=np.int64) - first
    return events, (pe << 32) | rank
