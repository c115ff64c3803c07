"""Chrome trace export speed: the one-million-event decode trace to Perfetto JSON.

Records decode_prefetch at 9,500 tiles (about a million events) into
benchmarks/_out/ the first time, then times opening it and exporting it, and
prints the output's size. ``--check`` also loads the JSON and runs the test
suite's importer-rules validator on it.

    python benchmarks/export_speed.py [--tiles 9500] [--repeat 3] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from emulator.scenarios import decode_prefetch
from kbdebug.analysis import Analysis
from kbdebug.export.chrome import write_chrome
from kbdebug.replay.replay import Replay

OUT = Path(__file__).resolve().parent / "_out"


def trace_for(tiles: int) -> Path:
    """The decode_prefetch trace of ``tiles`` tiles, recorded on first use."""
    path = OUT / f"export_decode_{tiles}.kbt"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        started = time.perf_counter()
        decode_prefetch(n_tiles=tiles).run(trace=path)
        print(f"recorded {path.name} in {time.perf_counter() - started:.1f} s")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=9500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="validate the JSON afterwards")
    args = parser.parse_args()
    trace = trace_for(args.tiles)
    output = trace.with_suffix(".json")

    started = time.perf_counter()
    replay = Replay.open(trace)
    opened = time.perf_counter() - started
    findings = Analysis(replay).findings
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        stats = write_chrome(replay, output, findings=findings)
        times.append(time.perf_counter() - started)
    export = statistics.median(times)

    print(f"trace:   {trace.name}: {replay.n_events:,} events, {trace.stat().st_size:,} bytes")
    print(f"open:    {opened:.2f} s (read and index)")
    print(
        f"export:  {export:.2f} s median of {args.repeat}, "
        f"{replay.n_events / export / 1e6:.1f} M trace events/s"
    )
    phases = ", ".join(f"{n:,} {ph}" for ph, n in sorted(stats.phases.items()))
    print(f"output:  {output.name}: {stats.bytes:,} bytes, {stats.events:,} JSON events ({phases})")
    print(f"ratio:   {stats.bytes / trace.stat().st_size:.1f}x the .kbt")
    if args.check:
        sys.path.insert(0, os.fspath(Path(__file__).resolve().parent.parent / "tests"))
        from chrome_trace_validator import problems

        started = time.perf_counter()
        with open(output, encoding="utf-8") as f:
            found = problems(json.load(f))
        print(f"check:   {'ok' if not found else found} ({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
