"""How the Chrome export lays a trace out: the clock that turns cycles into timestamps, one
lane (pid, tid) per kernel and channel, and how strings and times are spelled in its JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from emulator.trace.schema import CHANNEL_KINDS, Kind
from kbdebug.replay.index import NONE, TraceIndex

#: Clock assumed for a trace whose header gives none (1 cycle = 1 ns).
DEFAULT_CLOCK_MHZ = 1000.0


@dataclass(frozen=True)
class Lane:
    """One timeline row: a thread of the PE's process."""

    pe: int
    pid: int
    tid: int
    name: str
    #: Position of the lane within its PE (``thread_sort_index``).
    sort_index: int
    #: Channel id of a channel lane, -1 for the kernel lane.
    channel: int = NONE


@dataclass
class LanePlan:
    """Every lane of the export and the lookups from PEs and channels to them."""

    lanes: list[Lane]
    #: Per PE: the tid of its kernel lane (0 for a PE with no lanes).
    kernel_tid: np.ndarray
    #: Per channel: the pid and tid of its lane.
    channel_pid: np.ndarray
    channel_tid: np.ndarray


def clock_mhz(header: dict[str, Any]) -> float | None:
    """The clock a trace's header configures, in MHz (None if it names none, or one
    outside CLOCK_RANGE_MHZ: a trace is untrusted, and 1e-300 MHz would put cycles
    past the int64 nanoseconds)."""
    config = header.get("config") or {}
    if not isinstance(config, dict):
        return None
    low, high = CLOCK_RANGE_MHZ
    for key, scale in (("clock_mhz", 1.0), ("clock_ghz", 1000.0)):
        value = config.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            mhz = float(value) * scale
            if math.isfinite(mhz) and low <= mhz <= high:
                return mhz
    return None


#: Clocks a header may name, in MHz: any cycle the reader accepts (<= 2**53) is then
#: at most 9.0e18 ns, inside the int64 range.
CLOCK_RANGE_MHZ = (1.0, 1e6)


def cycles_to_ns(cycles: np.ndarray, mhz: float) -> np.ndarray:
    """Integer nanoseconds of each cycle count at ``mhz`` (monotone: order is kept)."""
    cycles = np.asarray(cycles, dtype=np.int64)
    if mhz == 1000.0:
        return cycles.copy()
    return np.rint(cycles * 1000.0 / mhz).astype(np.int64)


def plan_lanes(index: TraceIndex, extra_pes: Iterable[int] = ()) -> LanePlan:
    """The lanes of every PE that has events, uses a channel, or is in ``extra_pes``."""
    c = index.columns
    channels = index.channels
    n_pes = index.n_pes
    active = {int(pe) for pe in np.unique(c.pe)}
    active |= {int(channels[ch].get("pe", 0)) for ch in np.unique(c.chan[c.chan >= 0])}
    active |= {int(pe) for pe in extra_pes}
    active = {pe for pe in active if 0 <= pe < n_pes}
    by_pe: dict[int, list[int]] = {}
    for ch, entry in enumerate(channels):
        by_pe.setdefault(int(entry.get("pe", 0)), []).append(ch)

    def order(ch: int) -> tuple[int, int, int]:
        kind = channels[ch].get("kind")
        rank = CHANNEL_KINDS.index(kind) if kind in CHANNEL_KINDS else len(CHANNEL_KINDS)
        return rank, int(channels[ch].get("index", 0)), ch

    kernel = kernel_names(index)
    lanes: list[Lane] = []
    kernel_tid = np.zeros(n_pes, dtype=np.int64)
    channel_pid = np.zeros(len(channels), dtype=np.int64)
    channel_tid = np.zeros(len(channels), dtype=np.int64)
    tid = 0
    for pe in sorted(active):
        tid += 1
        name = f"kernel {kernel[pe]}" if kernel.get(pe) else "kernel"
        lanes.append(Lane(pe, pe + 1, tid, name, 0))
        kernel_tid[pe] = tid
        for sort_index, ch in enumerate(sorted(by_pe.get(pe, []), key=order), start=1):
            tid += 1
            lanes.append(Lane(pe, pe + 1, tid, _lane_name(channels[ch], pe, ch), sort_index, ch))
            channel_pid[ch], channel_tid[ch] = pe + 1, tid
    return LanePlan(lanes, kernel_tid, channel_pid, channel_tid)


def kernel_names(index: TraceIndex) -> dict[int, str]:
    """Per PE: the name of the kernel it ran (from its KERNEL_START)."""
    c = index.columns
    starts = np.flatnonzero(c.kind == Kind.KERNEL_START)
    return {int(c.pe[i]): index.string(int(c.op[i])) for i in starts}


def _lane_name(entry: dict[str, Any], pe: int, ch: int) -> str:
    name = str(entry.get("name") or f"{entry.get('kind', 'channel')}{entry.get('index', ch)}")
    prefix = f"pe{pe}."
    return name[len(prefix) :] if name.startswith(prefix) else name


def json_string(text: str) -> str:
    """``text`` as a JSON string; control characters made spaces, the rest kept as UTF-8.

    Perfetto's JSON tokenizer rejects ``\\u`` escapes and control characters in
    the strings it reads itself (names, categories), hence ``ensure_ascii=False``.
    """
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else " " for ch in text)
    return json.dumps(text, ensure_ascii=False)


def microseconds(ns: int) -> str:
    """Integer nanoseconds as exact microseconds with three decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}"
