"""Parquet tables of a trace for SQL and dataframes: events, futures, findings, per-PE
figures and source locations, one file each, written row group by row group.

Absent values (a future never waited, an event with no channel) are nulls, not -1.
Cycles are the trace's own integer cycles. ``loc`` joins ``locations.parquet``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.analysis import Analysis
from kbdebug.replay.values import Values

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay

#: Rows per row group: bounds the export's memory whatever the trace's size.
CHUNK = 1 << 18
#: What pip installs to make this export available.
INSTALL_HINT = "pip install 'kbdebug[parquet]'"
#: The files an export writes into its directory, in the order it writes them.
TABLES = ("events", "futures", "findings", "pes", "locations")


class ParquetMissing(ImportError):
    """pyarrow is not installed."""


class ParquetExists(FileExistsError):
    """A table file the export would write is already there (and replacing was not asked)."""


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ParquetMissing(f"the Parquet export needs pyarrow: {INSTALL_HINT}") from None
    return pa, pq


@dataclass
class ParquetStats:
    """What a Parquet export wrote: rows per table and the files."""

    rows: dict[str, int] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)


def export_parquet(
    replay: Replay, directory: str | os.PathLike[str], *, force: bool = False
) -> ParquetStats:
    """Write ``replay``'s tables into ``directory`` (created if missing).

    Each table goes to a temporary file renamed into place once whole. Raises
    ParquetMissing without pyarrow, ParquetExists when a table file is there and not
    ``force`` (before anything is written), NotADirectoryError, OSError.
    """
    pa, pq = _pyarrow()
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{directory}: exists and is not a directory")
    targets = [directory / f"{name}.parquet" for name in TABLES]
    if not force:
        there = [t for t in targets if os.path.lexists(t)]
        if there:
            raise ParquetExists(f"{there[0]} exists: --force replaces the tables in {directory}")
    directory.mkdir(parents=True, exist_ok=True)
    tables = _Tables(replay, pa)
    stats = ParquetStats()
    for name, target in zip(TABLES, targets, strict=True):
        partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
        rows = 0
        try:
            writer = None
            for batch in getattr(tables, name)():
                if writer is None:
                    writer = pq.ParquetWriter(partial, batch.schema)
                writer.write_table(batch, row_group_size=CHUNK)
                rows += batch.num_rows
            writer.close()
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        stats.rows[name] = rows
        stats.files.append(target)
    return stats


def _nullable(pa, values: np.ndarray, absent: np.ndarray | None = None):
    """``values`` as an Arrow array, null where ``absent`` (default: where negative)."""
    mask = values < 0 if absent is None else absent
    return pa.array(values, mask=mask if mask.any() else None)


class _Tables:
    """Each table as a sequence of Arrow tables of at most CHUNK rows."""

    def __init__(self, replay: Replay, pa):
        self.replay = replay
        self.index = replay.index
        self.pa = pa
        self.analysis = Analysis(replay)
        index = self.index
        self.strings = pa.array([s for s in index.strings], type=pa.string())
        locs = index.locs
        self.loc_file = pa.array([loc.file for loc in locs], type=pa.string())
        self.loc_line = np.array([loc.line for loc in locs] or [0], dtype=np.int64)
        self.channel_names = pa.array(
            [self.replay.channel_name(ch) for ch in range(len(index.channels))], type=pa.string()
        )
        self.kind_names = pa.array([k.name for k in Kind], type=pa.string())
        self.kind_code = {int(k): i for i, k in enumerate(Kind)}

    def dictionary(self, ids: np.ndarray, values):
        """Strings by id (``values[id]``), null where the id is negative."""
        ids = np.asarray(ids, dtype=np.int32)
        return self.pa.DictionaryArray.from_arrays(_nullable(self.pa, ids), values)

    def line(self, loc: np.ndarray):
        loc = np.asarray(loc, dtype=np.int64)
        return _nullable(self.pa, self.loc_line[np.maximum(loc, 0)], loc < 0)

    def time(self, events: np.ndarray):
        """The cycle of each event index, null where the index is -1."""
        events = np.asarray(events, dtype=np.int64)
        t = self.index.columns.time
        return _nullable(self.pa, t[np.maximum(events, 0)], events < 0)

    def events(self) -> Iterator:
        c, pa = self.index.columns, self.pa
        codes = np.zeros(max(self.kind_code) + 1, dtype=np.int32)
        for kind, code in self.kind_code.items():
            codes[kind] = code
        for lo in range(0, max(len(c.kind), 1), CHUNK):
            part = slice(lo, lo + CHUNK)
            n = len(c.kind[part])
            yield pa.table(
                {
                    "event": pa.array(np.arange(lo, lo + n, dtype=np.int64)),
                    "kind": pa.DictionaryArray.from_arrays(
                        pa.array(codes[c.kind[part].astype(np.int64)]), self.kind_names
                    ),
                    "time": pa.array(c.time[part]),
                    "pe": pa.array(c.pe[part]),
                    "cmd": _nullable(pa, c.cmd[part]),
                    "future": _nullable(pa, c.fut[part]),
                    "channel": _nullable(pa, c.chan[part]),
                    "loc": _nullable(pa, c.loc[part]),
                    # op, name and message are string ids; for OP_LOG, aux is one too.
                    "op": self.dictionary(c.op[part], self.strings),
                    "aux": _nullable(pa, c.aux[part]),
                    "val": _nullable(pa, c.val[part]),
                    "nbytes": _nullable(pa, c.nbytes[part]),
                }
            )

    def futures(self) -> Iterator:
        f, k, pa = self.index.futures, self.index.commands, self.pa
        ids = np.flatnonzero(f.cmd >= 0)
        tensors = Values.of(self.replay).tensors
        for lo in range(0, max(len(ids), 1), CHUNK):
            fid = ids[lo : lo + CHUNK]
            cmd = f.cmd[fid]
            addr = k.addr[cmd].astype(np.int64)
            nbytes = k.nbytes[cmd].astype(np.int64)
            if len(tensors):
                slices = [
                    None if (s := tensors.slice_of(a, b)) is None else str(s)
                    for a, b in zip(addr.tolist(), nbytes.tolist(), strict=True)
                ]
            else:
                slices = [None] * len(fid)
            loc, wait_loc = k.loc[cmd].astype(np.int32), f.wait_loc[fid].astype(np.int32)
            yield pa.table(
                {
                    "future": pa.array(fid.astype(np.int64)),
                    "pe": pa.array(k.pe[cmd]),
                    "op": self.dictionary(k.op[cmd], self.strings),
                    "cmd": pa.array(cmd.astype(np.int64)),
                    "channel": self.dictionary(k.channel[cmd], self.channel_names),
                    "addr": _nullable(pa, addr),
                    "nbytes": pa.array(nbytes),
                    "issue": self.time(k.issue[cmd]),
                    "grant": self.time(k.grant[cmd]),
                    "complete": self.time(k.complete[cmd]),
                    "wait": self.time(f.wait_begin[fid]),
                    "resolved": self.time(f.wait_end[fid]),
                    "stall": pa.array(f.stall[fid].astype(np.int64)),
                    "loc": _nullable(pa, loc),
                    "file": self.dictionary(loc, self.loc_file),
                    "line": self.line(loc),
                    "wait_loc": _nullable(pa, wait_loc),
                    "wait_file": self.dictionary(wait_loc, self.loc_file),
                    "wait_line": self.line(wait_loc),
                    "tensor_slice": pa.array(slices, type=pa.string()),
                }
            )

    def findings(self) -> Iterator:
        pa = self.pa
        rows = self.analysis.findings
        yield pa.table(
            {
                "id": pa.array([f.id for f in rows], type=pa.string()),
                "rule": pa.array([f.rule for f in rows], type=pa.string()),
                "title": pa.array([f.title for f in rows], type=pa.string()),
                "pe": pa.array([f.pe for f in rows], type=pa.int32()),
                "pes": pa.array([list(f.pes) or [f.pe] for f in rows], type=pa.list_(pa.int32())),
                "start": pa.array([f.start for f in rows], type=pa.int64()),
                "end": pa.array([f.end for f in rows], type=pa.int64()),
                "file": pa.array([f.loc.file if f.loc else None for f in rows], type=pa.string()),
                "line": pa.array([f.loc.line if f.loc else None for f in rows], type=pa.int64()),
                "saving": pa.array([f.saving for f in rows], type=pa.int64()),
                "share": pa.array([f.share for f in rows], type=pa.float64()),
                "pe_saving": pa.array([f.pe_saving for f in rows], type=pa.int64()),
                "stall": pa.array([f.stall for f in rows], type=pa.int64()),
                "count": pa.array([f.count for f in rows], type=pa.int64()),
                "message": pa.array([f.message for f in rows], type=pa.string()),
                "suggestion": pa.array([f.suggestion for f in rows], type=pa.string()),
            }
        )

    def pes(self) -> Iterator:
        pa, f = self.pa, self.index.futures
        bounds = self.analysis.bounds
        n = self.index.n_pes
        known = (f.cmd >= 0) & (f.pe >= 0)
        waited = known & (f.wait_end >= 0)
        stall = np.bincount(f.pe[waited], weights=f.stall[waited], minlength=n).astype(np.int64)
        waits = np.bincount(f.pe[waited], minlength=n)
        futures = np.bincount(f.pe[known], minlength=n)
        yield pa.table(
            {
                "pe": pa.array([b.pe for b in bounds], type=pa.int32()),
                "start": pa.array([b.start for b in bounds], type=pa.int64()),
                "end": pa.array([b.end for b in bounds], type=pa.int64()),
                "achieved": pa.array([b.achieved for b in bounds], type=pa.int64()),
                "bound": pa.array([b.bound for b in bounds], type=pa.int64()),
                "efficiency": pa.array([b.efficiency for b in bounds], type=pa.float64()),
                "complete": pa.array([b.complete for b in bounds], type=pa.bool_()),
                "futures": pa.array([int(futures[b.pe]) for b in bounds], type=pa.int64()),
                "waits": pa.array([int(waits[b.pe]) for b in bounds], type=pa.int64()),
                "stall": pa.array([int(stall[b.pe]) for b in bounds], type=pa.int64()),
            }
        )

    def locations(self) -> Iterator:
        pa, locs = self.pa, self.index.locs
        yield pa.table(
            {
                "loc": pa.array(range(len(locs)), type=pa.int32()),
                "file": self.loc_file,
                "line": pa.array([loc.line for loc in locs], type=pa.int64()),
                "function": pa.array([loc.function for loc in locs], type=pa.string()),
            }
        )
