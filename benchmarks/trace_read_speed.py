"""Trace speed: write and read a synthetic decode-attention trace, and the cost of tracing a run.

Goals: read_trace validates a 1,000,000-event trace well under 1 s; at most 16
bytes per event; the emulator with tracing on within 1.3x of tracing off.

With ``--file PATH`` (repeatable), the reader alone on a recorded trace: the bulk
read that Replay.open uses (read_trace_tables, tables dropped) and read_trace
(events as lists, dropped), each as a ratio to the raw msgpack decode of the same
file (a streamed Unpacker, objects dropped) in the same run, min and median over
``--repeat`` runs, in CPU time of this process (the machine may be shared).

    python benchmarks/trace_read_speed.py [--events 1000000] [--repeat 3] [--emulator-tiles 2048]
    python benchmarks/trace_read_speed.py --file benchmarks/_out/replay_decode_9500.kbt --repeat 5
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgpack

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from trace_synth import decode_like_events, record_run  # noqa: E402

from emulator.recorder import NullRecorder  # noqa: E402
from emulator.trace.reader import read_trace, read_trace_tables  # noqa: E402
from emulator.trace.writer import TraceWriter  # noqa: E402


def best_of(repeat: int, run) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def trace_file_speed(n_events: int, repeat: int) -> None:
    events = decode_like_events(n_events)
    n = len(events)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "decode.kbt")

        def null() -> None:
            emit = NullRecorder().emit
            for event in events:
                emit(*event)

        null_time = best_of(repeat, null)
        write_time = best_of(repeat, lambda: record_run(TraceWriter(path), events))
        size = os.path.getsize(path)
        read_time = best_of(repeat, lambda: read_trace(path))
        trace = read_trace(path)
        assert len(trace.events) == n and not trace.truncated
        decode_time = best_of(1, lambda: list(trace.iter_decoded()))
    print(f"synthetic decode-attention trace: {n:,} events, {size:,} bytes")
    print(f"bytes per event: {size / n:.2f} (goal <= 16)")
    print(
        f"write: {write_time:.3f} s  ({(write_time - null_time) / n * 1e9:.0f} ns/event"
        f" over a NullRecorder's {null_time / n * 1e9:.0f})"
    )
    print(f"read:  {read_time:.3f} s  ({read_time / n * 1e9:.0f} ns/event, goal well under 1 s)")
    print(f"decode every event to tuples: {decode_time:.3f} s")


def emulator_overhead(n_tiles: int, repeat: int) -> None:
    try:
        from emulator.scenarios import decode_prefetch
    except ImportError:
        print("emulator.scenarios not available: tracing overhead not measured")
        return

    def run(recorder) -> None:
        decode_prefetch(n_tiles=n_tiles).run(recorder=recorder)

    off = best_of(repeat, lambda: run(NullRecorder()))
    on = best_of(repeat, lambda: run(TraceWriter(io.BytesIO())))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.kbt")
        on_file = best_of(repeat, lambda: decode_prefetch(n_tiles=n_tiles).run(trace=path))
        trace = read_trace(path)
        size = os.path.getsize(path)
    n = len(trace.events)
    print(f"decode_prefetch, {n_tiles} tiles: {n:,} events, {size / n:.2f} bytes/event")
    print(f"tracing off: {off:.3f} s   on (memory): {on:.3f} s   on (file): {on_file:.3f} s")
    print(
        f"ratio on / off: {on / off:.2f}x in memory, {on_file / off:.2f}x to a file (goal <= 1.3x)"
    )


def cpu_time(run) -> float:
    gc.collect()
    start = time.process_time()
    run()
    return time.process_time() - start


def raw_decode(path: str) -> None:
    with open(path, "rb") as f:
        for _ in msgpack.Unpacker(f, raw=False):
            pass


def file_ratios(path: str, repeat: int) -> None:
    """The reader on ``path`` against the raw decode of it, run by run."""
    trace = read_trace(path, on_batch=lambda records: None, keep_events=False)
    n, size = trace.footer["events"] if trace.footer else 0, os.path.getsize(path)
    version = ".".join(map(str, trace.version or ()))
    print(f"{path}: format {version}, {n:,} events, {size:,} bytes, {size / max(n, 1):.2f} B/event")
    ratios: dict[str, list[float]] = {"raw decode s": [], "read_trace_tables": [], "read_trace": []}
    for _ in range(repeat):
        raw = cpu_time(lambda: raw_decode(path))
        tables = cpu_time(lambda: read_trace_tables(path, lambda batch: None))
        lists = cpu_time(lambda: read_trace(path, on_batch=lambda records: None, keep_events=False))
        ratios["raw decode s"].append(raw)
        ratios["read_trace_tables"].append(tables / raw)
        ratios["read_trace"].append(lists / raw)
    for name, values in ratios.items():
        unit = "s" if name.endswith(" s") else "x raw"
        print(
            f"  {name:<20} min {min(values):6.3f} {unit}   median {statistics.median(values):6.3f}"
            f" {unit}   ({repeat} runs, CPU time)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--emulator-tiles", type=int, default=2048, help="0 to skip")
    parser.add_argument("--file", action="append", default=[], help="a trace to read (alone)")
    args = parser.parse_args()
    if args.file:
        for path in args.file:
            file_ratios(path, args.repeat)
        return
    trace_file_speed(args.events, args.repeat)
    if args.emulator_tiles:
        emulator_overhead(args.emulator_tiles, args.repeat)


if __name__ == "__main__":
    main()
