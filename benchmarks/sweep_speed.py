"""kbdebug sweep of 256-tile decodes at -j 1 and -j 2, against the same points run in-process.

The baseline runs a few points of the sweep one after another in this process
(build, record to a temporary trace, read back, bound and findings: what a
worker does), so the ratios say what the worker processes cost and what a
second core buys, whatever the machine's speed that minute. The sweep is
decode_prefetch at 256 tiles over depth=1..5 x hbm_latency (--points of them,
default 500). The rows of -j 1 and -j 2 are checked to be identical.

    python benchmarks/sweep_speed.py                 # 500 points, about 10 minutes
    python benchmarks/sweep_speed.py --points 50 --repeat 3
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import sys
import time
from contextlib import redirect_stdout

from kbdebug.cli import main as kbdebug
from kbdebug.sweep.point import PointTask, run_point

TILES = 256
DEPTHS = 5


def grid(points: int) -> list[str]:
    latencies = max(1, points // DEPTHS)
    values = ",".join(str(300 + 5 * i) for i in range(latencies))
    return [f"depth=1..{DEPTHS}", f"hbm_latency={values}"]


def sweep(points: int, jobs: int) -> tuple[float, list[dict]]:
    depth, latency = grid(points)
    argv = ["sweep", "decode_prefetch", "--grid", depth, "--grid", latency]
    argv += ["--set", f"n_tiles={TILES}", "-j", str(jobs), "-q", "--json"]
    buf = io.StringIO()
    start = time.perf_counter()
    with redirect_stdout(buf):
        status = kbdebug(argv)
    elapsed = time.perf_counter() - start
    assert status == 0, status
    return elapsed, json.loads(buf.getvalue())["rows"]


def in_process(samples: int) -> float:
    """Seconds per point, run here one after another (median of ``samples``)."""
    times = []
    for i in range(samples):
        task = PointTask(
            i, "decode_prefetch", (("n_tiles", TILES), ("depth", 1 + i % DEPTHS)),
            (("hbm_latency", 300 + 5 * i),), None,
        )  # fmt: skip
        start = time.perf_counter()
        row = run_point(task)
        times.append(time.perf_counter() - start)
        assert row.outcome == "ok", row
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=1, help="sweeps per -j value")
    args = parser.parse_args()
    points = DEPTHS * max(1, args.points // DEPTHS)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    per_point = in_process(20)
    print(f"in-process: {per_point:.3f} s per point (median of 20)")
    results: dict[int, list[float]] = {1: [], 2: []}
    rows_seen: list[list[dict]] = []
    for _ in range(args.repeat):
        for jobs in (1, 2):
            elapsed, rows = sweep(points, jobs)
            results[jobs].append(elapsed)
            rows_seen.append(rows)
            print(
                f"  -j {jobs}: {points} points in {elapsed:.1f} s "
                f"({elapsed / points:.3f} s/point; {elapsed / (points * per_point):.2f}x "
                "the in-process time)",
                flush=True,
            )
    assert all(rows == rows_seen[0] for rows in rows_seen), "rows differ between runs"
    assert len(rows_seen[0]) == points
    for jobs, times in results.items():
        print(
            f"-j {jobs}: {points} points, min {min(times):.1f} s, median "
            f"{statistics.median(times):.1f} s"
        )
    j1, j2 = statistics.median(results[1]), statistics.median(results[2])
    print(f"-j 2 speed-up over -j 1: {j1 / j2:.2f}x (rows identical)")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"largest worker's peak memory: {peak:.0f} MiB (16 points per worker)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    sys.exit(main())
