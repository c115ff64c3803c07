"""Trace size and cost: bytes per event, against Chrome trace JSON, and tracing's run-time overhead.

On the depth-2 decode scenario at 4,096 tiles:
- bytes per event of the .kbt file (goal: at most 16);
- the size of the same events as Chrome Trace Event JSON, one object per event;
- the emulator's CPU time with tracing on over tracing off, in the same process,
  min and median of the per-repeat ratios (goal: at most 1.15).

    python benchmarks/trace_size.py [--tiles 4096] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import time

from emulator.recorder import MemoryRecorder
from emulator.scenarios import decode_prefetch
from emulator.trace.schema import FIELDS


def chrome_json_bytes(rec: MemoryRecorder) -> int:
    """Size of the events as Chrome trace JSON (instant events carrying every field)."""
    total = 2
    for kind, t, pe, *fields in rec.events:
        args = {}
        for (name, _), value in zip(FIELDS[kind], fields, strict=True):
            args[name] = list(value) if isinstance(value, tuple) else value
        event = {
            "name": kind.name.lower(),
            "ph": "i",
            "ts": t / 1000,
            "pid": pe,
            "tid": 0,
            "args": args,
        }
        total += len(json.dumps(event)) + 2
    return total


def timed_run(n_tiles: int, trace: str | None) -> float:
    scenario = decode_prefetch(n_tiles=n_tiles)  # setup (random K/V) is not timed
    gc.collect()
    start = time.process_time()
    scenario.run(trace=trace)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "decode.kbt")
        rec = MemoryRecorder()
        decode_prefetch(n_tiles=args.tiles).run(trace=path, recorder=rec)
        size, events = os.path.getsize(path), len(rec.events)
        chrome = chrome_json_bytes(rec)
        # A heap full of recorded events would slow every later run's garbage collection.
        del rec
        gc.collect()
        off, ratios = [], []
        for _ in range(args.repeat):
            off.append(timed_run(args.tiles, None))
            ratios.append(timed_run(args.tiles, path) / off[-1])
    t_off = statistics.median(off)
    print(f"decode_prefetch, {args.tiles} tiles: {events:,} events")
    print(f"kbt:          {size:,} bytes, {size / events:.2f} bytes/event (goal <= 16)")
    print(
        f"chrome json:  {chrome:,} bytes, {chrome / events:.1f} bytes/event, "
        f"{chrome / size:.1f}x the kbt"
    )
    print(
        f"run time:     {t_off:.3f} CPU s untraced (median); traced / untraced: "
        f"min {min(ratios):.2f}x  median {statistics.median(ratios):.2f}x (goal <= 1.15)"
    )


if __name__ == "__main__":
    main()
