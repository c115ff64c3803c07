"""The report as a JSON document (``kbdebug report --json``), schema ``kbdebug.report/4``.

JSON schema ``kbdebug.report/4`` (``--json``); cycles are integers, a cycle is
null when the event is not in the trace, a location is null or
``{"file", "line", "function"}``; strings from the trace are as recorded (JSON
escapes them)::

    {
      "schema": "kbdebug.report/4",
      "trace": str,                     # the path given
      "status": "ok" | "error" | "deadlock" | "interrupted" | "truncated",
      "complete": bool,                 # status ok and at least one event
      "incomplete": str | null,         # why not: "deadlock on PE 1: ..."
      "error": str | null,              # the footer's error message
      "error_loc": loc | null,
      "check": null | {"ok": bool,      # the output check the trace records (kbdebug
                       "message": str | null,  # run): what failed, one line;
                       "block": str | null},   # the first wrong block, "O[16:32, :]"
      "kernel": str, "grid": [int], "pes": int,
      "events": int,                    # event records in the trace
      "end_time": int,                  # the run's end cycle
      "perturbation": null | {"perturb_seed": int, "perturb_latency", "perturb_grant_delay":
                      float | null, "perturb_grant_window": int | null,  # a run recorded
                      "note": str},     # with --perturb: its header's fields (null: not a
                                        # number of its range); note: what the bound and
                                        # savings of such a run count as lost time
      "stall_cycles": int,              # sum of every wait's stalled cycles
      "dma_read_count": int,            # OP_LOG memory/dma_read count
      "counts": {"dma_read_count", "dma_write_count", "gemm_count", "math_count",
                 "ipcq_send_count", "ipcq_recv_count": int},
      "channels": [{"id", "name", "kind", "pe", "busy_cycles": int,
                    "share": float}],    # busy_cycles / end_time
      "launch": null | {"bound": int,   # the least the launch could take (cycles from its
                                        # start), its work spread evenly when a few PEs
                                        # do more of it (KB111)
                 "efficiency": float | None,  # bound / the launch's time; null (and
                                        # "efficiency" []) when the run did not complete:
                                        # no bound is claimed (compare and sweep show these)
                 "saving": int},        # what KB111 (work moved between PEs) saves of
                                        # the launch's end; 0 without it
      "contention": [{"stack", "pes": [int],  # KB113, each shared HBM stack its PEs
                      "slots",          # queued on: its slots end to end (cycles),
                      "bound_end",      # the cycle its last PE cannot end before,
                      "queued",         # cycles its transfers waited for it (summed),
                      "cost",           # what sharing it cost the launch (re-timed),
                      "limits": bool,   # its bound is the launch's
                      "message", "suggestion"}],  # information, never a finding
      "efficiency": [{"pe", "start", "end", "achieved",
                      "bound": int,      # critical-path lower bound of the kernel time
                      "efficiency": float | None,   # bound / achieved; None: did not complete
                      "savings": int}],  # what the PE's findings save on it together
                                         # (pe_saving summed, they may overlap), at most
                                         # its gap (achieved - bound); KB111's, the
                                         # launch's, is launch.saving, never a PE's
      "stall_by_line": [{"loc": loc, "waits": int, "stall_cycles": int}],
      "futures": [{"id", "op", "pe", "addr" (int | null), "nbytes",
                   "channel" (str | null), "issued", "granted", "done",
                   "waited", "resolved" (int | null), "stall": int,
                   "loc": loc, "wait_loc": loc,
                   "where": str}],   # every future, by id; where: the slice of a
                                     # named tensor it moved ("K[128:192, :]"),
                                     # "" if none (or the trace is before 1.5)
      "hazards": [{"id",                # KB201-KB203: two accesses to overlapping bytes,
                                        # at least one a store, no wait or message orders
                                        # (RULE:SECOND&FIRST identities, :peN on one PE N);
                                        # KB204: one access outside its tensor (KB204:IDENTITY,
                                        # "first" and "second" both that access)
                   "line_id",           # RULE:FILE:LINE of the second access
                   "rule", "title",     # "read-after-write", "write-after-read", ...
                   "across_pes": bool,
                   "pes": [int],        # every PE either side of an occurrence
                   "pe_pairs": [[int, int]],  # each (first's PE, second's PE) it holds on
                   "first", "second": {"pe", "op", "loc": loc,
                                       "issue_event": int,
                                       "event": int | null,  # when it touched HBM (a
                                       "cycle": int | null,  # load's grant, a store's
                                                             # landing); null: never
                                       "wait_loc": loc},     # where it was waited
                   "bytes": {"lo", "hi": int,  # the overlapping bytes [lo, hi)
                             "where": str},    # a tensor slice or the address range
                   "outcome": str,      # what this run read, or which store landed last
                   "count": int,        # unordered pairs of these two lines
                   "message", "suggestion",
                   "fix": {"pe": int, "loc": loc},  # the wait goes just above loc
                   "events": [int]}],   # each occurrence's second access, sorted
                                        # (listed before the findings; any fails the
                                        # gate of --fail-on any or hazard)
      "findings": [{"id",               # edit-proof: RULE:FILE::FUNCTION::TEXT#N, one
                                        # per site over every PE (no :peN)
                    "line_id",          # RULE:FILE:LINE
                    "short_id",         # "KB107 pipeline.py:54 ← attention.py:113"
                    "rule", "title",
                    "pe",               # the first PE where it holds
                    "pes": [int],       # every PE where it holds
                    "loc",
                    "call_loc": loc,    # the kernel line that called the helper, or null
                    "start", "end", "count",
                    "saving": int,      # cycles the launch's end moves earlier when it is
                                        # fixed (on every PE that has it), re-timed
                    "pe_saving": int,   # the median of pe_savings
                    "pe_savings": [int],  # each PE's own gain, in pes order
                    "also": [loc],      # other lines the same fix changes
                    "share": float,     # saving / the PE's kernel time
                    "stall", "message", "suggestion", "events": [int]}],
                                        # largest saving first
      "wait_chains": [{"event": int,    # the longest stalled receive waits (a few, one
                                        # per wait line), each followed across PEs
                       "stall": int,
                       "links": [{"pe", "wait_event", "wait_loc": loc, "waited_at",
                                  "stall",      # the receive's wait and its stall
                                  "sender", "send_event", "send_loc": loc,
                                  "issued",     # the matching send and its cycle
                                  "delivered": int | null,
                                  "work": int}],  # sender's busy cycles since its last
                                                  # stall; links[i + 1] is why links[i]'s
                                                  # send was late
                       "root": {"kind": "work" | "transit" | "stall" | "unmatched"
                                        | "cycle" | "depth" | "not-stalled",
                                "pe", "event", "loc": loc, "cycles": int,
                                "op": str}}],   # why the last link's send was late
      "gate": {"selectors": [str], "min_saving": float,
               "failed": bool, "exit": int,
               "matched": [id],          # selected, saving at or above min_saving;
                                         # and every hazard selected
               "below_min_saving": [id]} # selected, but too small to count
    }
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, fields
from typing import IO, Any

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.across_pes import short_id
from kbdebug.analysis.contention import HbmContention
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.gate import MIN_SAVING, Gate
from kbdebug.analysis.hazards import Hazard
from kbdebug.analysis.model import PEBound
from kbdebug.analysis.perturbation import FIGURES_NOTE, Perturbation
from kbdebug.analysis.select import share_of
from kbdebug.analysis.summary import FutureRow, Summary
from kbdebug.analysis.wait_chain import WaitChain
from kbdebug.export.pe_savings import launch_saving, pe_savings_within_gap
from kbdebug.export.report_hazards import hazard_json

SCHEMA = "kbdebug.report/4"

#: FutureRow's fields in declaration order: the key order ``asdict`` gives.
_FUTURE_FIELDS = tuple(f.name for f in fields(FutureRow))


def loc_json(loc: SourceLoc | None) -> dict[str, Any] | None:
    """A source location as ``{"file", "line", "function"}``, None as null."""
    return None if loc is None else {"file": loc.file, "line": loc.line, "function": loc.function}


def future_json(row: FutureRow) -> dict[str, Any]:
    """One future as the ``futures`` array holds it (keys in FutureRow's order)."""
    doc = {name: getattr(row, name) for name in _FUTURE_FIELDS}
    doc["loc"] = loc_json(row.loc)
    doc["wait_loc"] = loc_json(row.wait_loc)
    return doc


class _Streamed(list):
    """A list that the pure-Python JSON encoder walks one converted item at a time.

    Only for :func:`write_json`'s own encoder: C's encoder reads a list's storage (empty
    here), not ``__iter__``.
    """

    def __init__(self, items: Sequence[Any], convert) -> None:
        super().__init__()
        self._items, self._convert = items, convert

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Any]:
        return (self._convert(item) for item in self._items)


def write_json(out: IO[str], *args: Any, **kwargs: Any) -> None:
    """Write :func:`to_json`'s document to ``out`` (indent 2, then a newline) as it is
    encoded, each future made a dict only as it is written: on a 256-PE ring of 262,144
    futures the dicts at once are some 130 MB. Byte-identical to ``json.dump`` of it."""
    doc = _document(*args, stream=True, **kwargs)
    # iterencode without _one_shot is the pure-Python encoder, which honours __iter__.
    for chunk in json.JSONEncoder(indent=2).iterencode(doc):
        out.write(chunk)
    out.write("\n")


def to_json(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The report as a ``kbdebug.report/4`` document; arguments as :func:`_document`."""
    return _document(*args, stream=False, **kwargs)


def _document(
    path: str,
    summary: Summary,
    futures: list[FutureRow],
    findings: list[Finding],
    bounds: list[PEBound] | None = None,
    reason: str | None = None,
    gate: Gate | None = None,
    chains: list[WaitChain] | None = None,
    launch: tuple[int, float | None] | None = None,
    contention: list[HbmContention] | None = None,
    hazards: list[Hazard] | None = None,
    perturbation: Perturbation | None = None,
    *,
    stream: bool = False,
) -> dict[str, Any]:
    """The report as a ``kbdebug.report/4`` document, its futures a :class:`_Streamed`
    list when ``stream`` (``chains``: the longest receive
    waits followed across PEs, ``Analysis.worst_wait_chains``; ``hazards``:
    ``Analysis.hazards``)."""
    bounds = bounds or []
    gate = gate or Gate([], MIN_SAVING, [], [], reason)
    savings = pe_savings_within_gap(findings, bounds)
    complete_bounds = bounds if reason is None else []
    return {
        "schema": SCHEMA,
        "trace": str(path),
        "status": summary.status,
        "complete": reason is None,
        "incomplete": reason,
        "error": summary.error,
        "error_loc": loc_json(summary.error_loc),
        "check": None if summary.check is None else summary.check.json(),
        "kernel": summary.kernel,
        "grid": list(summary.grid),
        "pes": summary.n_pes,
        "events": summary.n_events,
        "end_time": summary.end_time,
        "perturbation": None
        if perturbation is None
        else {**perturbation.to_json(), "note": FIGURES_NOTE},
        "stall_cycles": summary.stall_cycles,
        "dma_read_count": summary.counts["dma_read_count"],
        "counts": dict(summary.counts),
        "channels": [
            {
                "id": ch.channel,
                "name": ch.name,
                "kind": ch.kind,
                "pe": ch.pe,
                "busy_cycles": ch.busy_cycles,
                "share": ch.share,
            }
            for ch in summary.channels
        ],
        # A run that did not complete claims no bound (its end is where it stopped).
        "efficiency": [{**asdict(b), "savings": savings.get(b.pe, 0)} for b in complete_bounds],
        "launch": None
        if launch is None or reason is not None
        else {"bound": launch[0], "efficiency": launch[1], "saving": launch_saving(findings)},
        "contention": [
            {
                "stack": c.stack,
                "pes": list(c.pes),
                "slots": c.slots,
                "bound_end": c.bound_end,
                "queued": c.queued,
                "cost": c.cost,
                "limits": c.limits,
                "message": c.message,
                "suggestion": c.suggestion,
            }
            for c in contention or ()
        ],
        "stall_by_line": [
            {"loc": loc_json(s.loc), "waits": s.waits, "stall_cycles": s.stall_cycles}
            for s in summary.stall_by_line
        ],
        "futures": _Streamed(futures, future_json)
        if stream
        else [future_json(row) for row in futures],
        "hazards": [hazard_json(h) for h in hazards or ()],
        "findings": [
            {
                "id": f.id,
                "line_id": f.line_id,
                "short_id": short_id(f),
                "rule": f.rule,
                "title": f.title,
                "pe": f.pe,
                "pes": list(f.pes or (f.pe,)),
                "loc": loc_json(f.loc),
                "call_loc": loc_json(f.call_loc or getattr(f.loc, "caller", None)),
                "start": f.start,
                "end": f.end,
                "count": f.count,
                "saving": f.saving,
                "pe_saving": f.pe_saving,
                "pe_savings": list(f.pe_savings or (f.pe_saving,)),
                "also": [loc_json(x) for x in f.also],
                "share": share_of(f, bounds),
                "stall": f.stall,
                "message": f.message,
                "suggestion": f.suggestion,
                "events": list(f.events),
            }
            for f in findings
        ],
        "wait_chains": [chain_json(chain) for chain in chains or []],
        "gate": gate.to_json(),
    }


def chain_json(chain: WaitChain) -> dict[str, Any]:
    """One wait chain: its links (each receive and its send) and its root."""
    return {
        "event": chain.event,
        "stall": chain.stall,
        "links": [
            {
                **asdict(link),
                "wait_loc": loc_json(link.wait_loc),
                "send_loc": loc_json(link.send_loc),
            }
            for link in chain.links
        ],
        "root": {**asdict(chain.root), "loc": loc_json(chain.root.loc)},
    }
