"""Synthetic recorder runs for the trace tests and benchmarks: plausible headers and events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack

from emulator.recorder import Recorder
from emulator.trace.schema import Kind, SourceLoc

KERNEL_FILE = "emulator/kernels/decode_attention.py"
KERNEL_SOURCE = '''"""Decode attention with a depth-2 K/V prefetch."""


def decode_attention(tl, q_ptr, k_ptr, v_ptr, n_tiles):
    q = tl.load(q_ptr, (1, 128))
    f_k = tl.load_async(k_ptr, (64, 128))
    f_v = tl.load_async(v_ptr, (64, 128))
    for j in range(n_tiles):
        k = tl.wait(f_k)
        s = tl.dot(q, tl.trans(k))
        p = tl.exp(s - tl.max(s))
        v = tl.wait(f_v)
        acc = tl.dot(p, v)
    return acc
'''
CHANNEL_NAMES = (("dma_read", 0), ("dma_read", 1), ("dma_write", 0), ("gemm", 0), ("math", 0))


def loc(line: int) -> SourceLoc:
    return SourceLoc(KERNEL_FILE, line, "decode_attention")


def make_header(rows: int = 2, cols: int = 2) -> dict[str, Any]:
    """A launch header shaped like the emulator's, for a ``rows`` x ``cols`` mesh."""
    channels = []
    for pe in range(rows * cols):
        for kind, index in CHANNEL_NAMES:
            channels.append(
                {
                    "id": len(channels),
                    "pe": pe,
                    "kind": kind,
                    "index": index,
                    "name": f"pe{pe}.{kind}{index}",
                }
            )
    return {
        "config": {
            "clock_ghz": 1.0,
            "dma_read_channels": 2,
            "dma_read_bandwidth": 64,
            "dma_read_latency": 500,
            "gemm_macs_per_cycle": 4096,
            "math_elems_per_cycle": 256,
            "scratch_bytes": 1 << 20,
            "strict_scope": True,
            "hbm_shape": [1 << 30],
        },
        "mesh": [rows, cols],
        "channels": channels,
        "launch": {
            "kernel": "decode_attention",
            "grid": [rows * cols],
            "args": ["4096", "8192", "12288", "16"],
        },
    }


def every_kind_events() -> list[tuple[Any, ...]]:
    """A short run on two PEs with at least one event of every kind, in time order
    (and one tl call inside a helper, whose loc has a caller)."""
    a, b = loc(5), loc(9)
    helper = SourceLoc(KERNEL_FILE, 30, "receive_tile", loc(12))
    return [
        (Kind.KERNEL_START, 0, 0, "decode_attention", loc(4)),
        (Kind.KERNEL_START, 0, 1, "decode_attention", loc(4)),
        (Kind.ISSUE, 3, 0, 0, "load_async", 0, 4096, 16384, (64, 128), "bf16", False, a),
        (Kind.SCRATCH_ALLOC, 3, 0, 0, 16384, 16384),
        (Kind.CHAN_REQUEST, 3, 0, 0, 0),
        (Kind.CHAN_GRANT, 3, 0, 0, 0),
        (Kind.HBM_SHARE, 3, 0, 0, 0, 0, 342),
        (Kind.OP_LOG, 3, 0, "memory", "dma_read"),
        (Kind.ISSUE, 4, 1, 1, "send", -1, -1, 256, (), "f32", False, None),
        (Kind.PROVENANCE, 4, 1, 1, -1),
        (Kind.IPCQ_SEND, 4, 1, 1, 0, 256),
        (Kind.WAIT_BEGIN, 5, 0, 0, b),
        (Kind.CHAN_RELEASE, 259, 0, 0, 0),
        (Kind.COMPLETE, 759, 0, 0, 0),
        (Kind.WAIT_END, 759, 0, 0, 754),
        (Kind.HOST_READ, 759, 0, 0),
        (Kind.ISSUE, 760, 0, 3, "exp", -1, -1, 65536, (64, 128), "f32", True, a),
        (Kind.READS, 760, 0, 3, 0),
        (Kind.IPCQ_RECV, 800, 0, 1, 1, 1),
        (Kind.SCRATCH_FREE, 900, 0, 0, 16384, 0),
        (Kind.ISSUE, 900, 1, 2, "recv_async", 2, -1, 256, (64,), "f32", False, helper),
        (Kind.WAIT_BEGIN, 901, 1, 2, b),
        (Kind.KERNEL_END, 950, 0),
        (Kind.KERNEL_ERROR, 960, 1, "ValueError: shape (64,) does not match (128,)", b),
        (Kind.DEADLOCK, 960, 1, 2, b),
    ]


def record_run(
    recorder: Recorder,
    events: list[tuple[Any, ...]],
    *,
    status: str = "ok",
    error: str | None = None,
    error_loc: SourceLoc | None = None,
) -> None:
    """Drive ``recorder`` through a whole run: header, source, ``events``, footer.

    With HBM_SHARE events, the header names the HBM stacks they share (PEs 0-1 and 2-3 of
    the 2x2 mesh), as the emulator's does; the writer then labels the trace 1.4. With
    PROVENANCE events the header says so, and the trace is 1.6."""
    header = make_header()
    if any(event[0] == Kind.HBM_SHARE for event in events):
        header["hbm_stacks"] = [[0, 1], [2, 3]]
    if any(event[0] == Kind.PROVENANCE for event in events):
        header["provenance"] = True
    recorder.begin(header)
    recorder.add_source(KERNEL_FILE, KERNEL_SOURCE)
    for event in events:
        recorder.emit(*event)
    end_time = events[-1][1] if events else 0
    recorder.end({"status": status, "end_time": end_time, "error": error, "error_loc": error_loc})


def _decode_pe(pe: int, n_events: int, first_cmd: int, stride: int) -> Iterator[tuple[Any, ...]]:
    """One PE's decode loop; command and future ids are ``first_cmd + k * stride``."""
    read_ch = [pe * len(CHANNEL_NAMES), pe * len(CHANNEL_NAMES) + 1]
    gemm_ch, math_ch = pe * len(CHANNEL_NAMES) + 3, pe * len(CHANNEL_NAMES) + 4
    tile_bytes, latency, bandwidth = 16384, 500, 64
    cmd = first_cmd - stride
    t = 0
    channel_free = {c: 0 for c in (*read_ch, gemm_ch, math_ch)}
    in_use = 0
    emitted = 0
    j = 0
    yield (Kind.KERNEL_START, 0, pe, "decode_attention", loc(4))
    while emitted < n_events:
        pending: list[tuple[int, int]] = []
        for which, line in ((0, 6), (1, 7)):
            cmd += stride
            addr = (pe << 28) + (1 << 20) + (2 * j + which) * tile_bytes
            yield (Kind.ISSUE, t, pe, cmd, "load_async", cmd, addr, tile_bytes, (64, 128),
                   "bf16", False, loc(line))  # fmt: skip
            in_use += tile_bytes
            yield (Kind.SCRATCH_ALLOC, t, pe, cmd, tile_bytes, in_use)
            ch = read_ch[which]
            yield (Kind.CHAN_REQUEST, t, pe, ch, cmd)
            grant = max(t, channel_free[ch])
            release = grant + tile_bytes // bandwidth
            channel_free[ch] = release
            yield (Kind.CHAN_GRANT, grant, pe, ch, cmd)
            yield (Kind.CHAN_RELEASE, release, pe, ch, cmd)
            yield (Kind.COMPLETE, release + latency, pe, cmd, cmd)
            yield (Kind.OP_LOG, t, pe, "memory", "dma_read")
            pending.append((cmd, release + latency))
            t += 2
            emitted += 7
        for (fut, ready), line in zip(pending, (9, 12), strict=True):
            yield (Kind.WAIT_BEGIN, t, pe, fut, loc(line))
            stalled = max(0, ready - t)
            t += stalled
            yield (Kind.WAIT_END, t, pe, fut, stalled)
            for op, ch, cycles in (
                ("dot", gemm_ch, 64),
                ("max", math_ch, 8),
                ("sub", math_ch, 8),
                ("exp", math_ch, 16),
            ):
                cmd += stride
                yield (Kind.ISSUE, t, pe, cmd, op, -1, -1, 256, (1, 64), "f32", True, loc(line + 1))
                yield (Kind.CHAN_REQUEST, t, pe, ch, cmd)
                yield (Kind.CHAN_GRANT, t, pe, ch, cmd)
                t += cycles
                yield (Kind.CHAN_RELEASE, t, pe, ch, cmd)
                yield (Kind.COMPLETE, t, pe, cmd, -1)
                yield (Kind.OP_LOG, t, pe, "compute", op)
                emitted += 6
            emitted += 2
        for fut, _ in pending:
            in_use -= tile_bytes
            yield (Kind.SCRATCH_FREE, t, pe, fut, tile_bytes, in_use)
            emitted += 1
        j += 1
    yield (Kind.KERNEL_END, t, pe)


def decode_like_events(n_events: int, n_pes: int = 4) -> list[tuple[Any, ...]]:
    """About ``n_events`` events of a decode-attention run on ``n_pes`` PEs, in time order.

    Each iteration prefetches a K and a V tile with ``load_async`` on two read
    channels, waits on each and runs four compute commands after each wait, so
    ISSUE, channel, COMPLETE, WAIT and OP_LOG events dominate as they do in a
    real decode kernel. Command ids interleave across PEs like a shared counter.
    """
    per_pe = max(1, n_events // n_pes)
    events = [e for pe in range(n_pes) for e in _decode_pe(pe, per_pe, pe, n_pes)]
    # A stable sort by time: within a PE, events at one time keep their causal order.
    events.sort(key=lambda event: event[1])
    return events


def header_record(**overrides: Any) -> dict[str, Any]:
    """The header map a 1.0 writer writes for ``make_header()``, with keys replaced."""
    record: dict[str, Any] = {"format": "kbt", "version": [1, 0], "producer": "kbdebug 0.1.0"}
    record.update(make_header())
    record.update(overrides)
    return record


def pack_objects(*objects: Any) -> bytes:
    """``objects`` packed back to back, as a trace (or a forged one) lays them out."""
    return b"".join(msgpack.packb(obj) for obj in objects)


def footer_record(events: int, end_time: int = 0, status: str = "ok") -> dict[str, Any]:
    return {"status": status, "events": events, "end_time": end_time, "error": None,
            "error_loc": None}  # fmt: skip
