"""How the emulator scales with the PEs of a mesh: peak memory and time per event at 4, 64, 256.

Two figures per mesh size, each measured in a child process of its own:

- peak RSS of ``kbdebug run ring_attention --set pes=N`` (os.wait4's ru_maxrss of
  the whole command: inputs, emulation, trace writing and the numpy reference
  check; ``--no-check`` leaves the check out). Ring attention sends every K/V block
  around the ring: N x (N - 1) x 2 messages, 65,536 at 256 PEs, 7.8M events. Goal:
  at most 600 MB at 256 PEs.
- emulation time per event of ``prefill`` with the same number of events at every
  size (n_tiles = 4096 / N: 16 tiles a PE at 256), traced into a file as ``kbdebug
  run`` traces it: CPU seconds of ``Scenario.run`` over the events written. Goal: at
  256 PEs within 1.3x of 4 PEs.
- wall seconds and peak RSS of ``kbdebug report`` on that ring trace (no index
  cache: the trace read, indexed and analysed). Goal: at most 1 GB at 256 PEs.

Each figure is printed as the min and median over ``--runs`` runs, with its ratio to
4 PEs (of the medians). The sizes run interleaved, so the machine's load falls on all.

    python benchmarks/mesh_scale.py               # 4, 64 and 256 PEs, 3 runs
    python benchmarks/mesh_scale.py --runs 1 --pes 4 --pes 64
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: prefill's n_tiles x PEs: every size emulates the same number of tile steps.
TILE_STEPS = 4096
RSS_GOAL = 600e6
REPORT_GOAL = 1e9
TIME_GOAL = 1.3


def ring_rss(pes: int, folder: Path, check: bool) -> tuple[float, float]:
    """(peak RSS in bytes, emulation wall seconds) of ``kbdebug run ring_attention``."""
    out = folder / f"ring_{pes}.kbt"
    argv = [sys.executable, "-m", "kbdebug", "run", "ring_attention", "--set", f"pes={pes}"]
    argv += ["-q", "-o", str(out), *([] if check else ["--no-check"])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryFile("w+") as stdout:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        stdout.seek(0)
        text = stdout.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"ring_attention pes={pes} failed: {proc.stderr.read().strip()}")
    found = re.search(r"^end: +simulated [\d,]+ cycles in ([\d.]+) s", text, re.M)
    if found is None:
        sys.exit(f"no emulation time in the run's output:\n{text}")
    return usage.ru_maxrss * 1024, float(found.group(1))  # ru_maxrss is in KiB on Linux


def report_cost(pes: int, folder: Path) -> tuple[float, float]:
    """(peak RSS in bytes, wall seconds) of ``kbdebug report`` on the ring's trace."""
    trace = folder / f"ring_{pes}.kbt"
    argv = [sys.executable, "-m", "kbdebug", "report", str(trace)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KBDEBUG_NO_CACHE": "1"}
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"report of ring_attention pes={pes} failed: {proc.stderr.read().strip()}")
    trace.unlink(missing_ok=True)
    return usage.ru_maxrss * 1024, seconds


def prefill_time(pes: int, folder: Path) -> tuple[float, int]:
    """(CPU seconds, events) of one traced prefill run of TILE_STEPS / pes tiles a PE."""
    code = (
        "import json, sys, time\n"
        "from emulator.scenarios import prefill\n"
        "from emulator.trace.writer import TraceWriter\n"
        "pes, tiles, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]\n"
        "scenario = prefill(pes=pes, n_tiles=tiles)\n"
        "with TraceWriter(path) as writer:\n"
        "    started = time.process_time()\n"
        "    scenario.run(recorder=writer)\n"
        "    seconds = time.process_time() - started\n"
        "print(json.dumps([seconds, writer.events]))\n"
    )
    out = folder / f"prefill_{pes}.kbt"
    argv = [sys.executable, "-c", code, str(pes), str(TILE_STEPS // pes), str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    out.unlink(missing_ok=True)
    if done.returncode != 0:
        sys.exit(f"prefill pes={pes} failed: {done.stderr.strip()}")
    seconds, events = json.loads(done.stdout)
    return seconds, events


def min_median(values: list[float], scale: float, unit: str, width: int = 7) -> str:
    low, mid = min(values) / scale, statistics.median(values) / scale
    return f"min {low:{width},.2f} {unit}  median {mid:{width},.2f} {unit}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pes", type=int, action="append", help="mesh sizes (repeatable)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-check", action="store_true", help="runs without the numpy check")
    parser.add_argument("--no-rss", action="store_true", help="only the time per event")
    args = parser.parse_args()
    sizes = sorted(set(args.pes or [4, 64, 256]))
    if 4 not in sizes:
        sizes.insert(0, 4)  # the reference of every ratio
    rss: dict[int, list[float]] = {n: [] for n in sizes}
    wall: dict[int, list[float]] = {n: [] for n in sizes}
    per_event: dict[int, list[float]] = {n: [] for n in sizes}
    report_rss: dict[int, list[float]] = {n: [] for n in sizes}
    report_wall: dict[int, list[float]] = {n: [] for n in sizes}
    events: dict[int, int] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mesh_scale-") as name:
        folder = Path(name)
        for run in range(args.runs):
            for pes in sizes:
                seconds, events[pes] = prefill_time(pes, folder)
                per_event[pes].append(seconds / events[pes])
                if not args.no_rss:
                    peak, emulation = ring_rss(pes, folder, check=not args.no_check)
                    rss[pes].append(peak)
                    wall[pes].append(emulation)
                    peak, seconds = report_cost(pes, folder)
                    report_rss[pes].append(peak)
                    report_wall[pes].append(seconds)
            print(f"run {run + 1} of {args.runs} done ({time.perf_counter() - started:.0f} s)")
    check = "without" if args.no_check else "with"
    print(f"\n{args.runs} runs, min and median; ratios are of the medians to 4 PEs")
    ok = True
    if not args.no_rss:
        print(f"\npeak RSS of kbdebug run ring_attention --set pes=N ({check} its numpy check):")
        base = statistics.median(rss[4])
        for pes in sizes:
            ratio = statistics.median(rss[pes]) / base
            print(
                f"  {pes:4} PEs  {min_median(rss[pes], 1e6, 'MB')}  x{ratio:5.2f}"
                f"   (emulation {min_median(wall[pes], 1, 's', 6)})"
            )
        if 256 in sizes:
            within = max(rss[256]) <= RSS_GOAL
            ok &= within
            print(f"  goal: 256 PEs <= {RSS_GOAL / 1e6:.0f} MB: {'met' if within else 'NOT met'}")
        print("\nkbdebug report on that trace (no index cache):")
        for pes in sizes:
            print(
                f"  {pes:4} PEs  {min_median(report_wall[pes], 1, 's', 6)}  "
                f"peak {min_median(report_rss[pes], 1e6, 'MB')}"
            )
        if 256 in sizes:
            within = max(report_rss[256]) <= REPORT_GOAL
            ok &= within
            print(
                f"  goal: 256 PEs <= {REPORT_GOAL / 1e9:.0f} GB: {'met' if within else 'NOT met'}"
            )
    print(f"\nemulation time per event, traced prefill of {TILE_STEPS:,} / N tiles a PE:")
    base = statistics.median(per_event[4])
    for pes in sizes:
        ratio = statistics.median(per_event[pes]) / base
        print(
            f"  {pes:4} PEs  {events[pes]:9,} events  "
            f"{min_median(per_event[pes], 1e-6, 'us', 5)}  x{ratio:5.2f}"
        )
    if 256 in sizes:
        within = statistics.median(per_event[256]) / base <= TIME_GOAL
        ok &= within
        print(f"  goal: 256 PEs within {TIME_GOAL}x of 4: {'met' if within else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
