"""How the emulator scales with the PEs of a mesh: peak memory and time per event at 4, 64, 256.

The figures, each measured in a child process of its own:

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
- the app's first screen on the largest ring's trace against a 1-PE prefill of about
  as many events: seconds from the start of a child process (before kbdebug is
  imported) to the end of the first refresh with the header up, as ``kbdebug TRACE``
  opens it (headless, Textual's ``run_test`` at 160x48), and that process's peak RSS
  (the index cache it writes included). Each run opens each trace twice: with an
  empty index cache (cold), then with the one the first open wrote (warm). Goal: the
  ring's within ``APP_GOAL`` of the 1-PE trace's (medians, warm), the two timed in
  turn in one run of this script.

Each figure is printed as the min and median over ``--runs`` runs, with its ratio to
4 PEs (of the medians). The sizes run interleaved, so the machine's load falls on all.

    python benchmarks/mesh_scale.py               # 4, 64 and 256 PEs, 3 runs
    python benchmarks/mesh_scale.py --runs 1 --pes 4 --pes 64
    python benchmarks/mesh_scale.py --app-only    # the app's first screen at 256 PEs
    python benchmarks/mesh_scale.py --app-only --ring RING.kbt --one-pe ONE.kbt  # reuse
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
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: prefill's n_tiles x PEs: every size emulates the same number of tile steps.
TILE_STEPS = 4096
RSS_GOAL = 600e6
REPORT_GOAL = 1e9
TIME_GOAL = 1.3
APP_GOAL = 1.1
#: Events a 1-PE prefill records per K/V tile (tile=8 keeps its inputs small).
PREFILL_EVENTS_PER_TILE = 107
#: What a child process runs: the app on argv[1] until its first screen with the header
#: is painted; prints the seconds since the process started, then leaves once the index
#: cache is written (the findings' thread would run on for a minute at 256 PEs).
APP_CODE = """
import time
started = time.perf_counter()
import asyncio, os, sys
from pathlib import Path
from kbdebug.commands.replay import make_app

async def first_screen():
    app = make_app(Path(sys.argv[1]))
    async with app.run_test(size=(160, 48)) as pilot:
        while not app.query("#header"):
            await pilot.pause(0.002)
        painted = asyncio.get_running_loop().create_future()
        app.call_after_refresh(lambda: painted.set_result(time.perf_counter()))
        print(await painted - started, flush=True)
        from kbdebug.replay import cache

        cache.wait()  # the index file the next open reads
        os._exit(0)

asyncio.run(first_screen())
"""


def ring_rss(pes: int, folder: Path, check: bool) -> tuple[float, float, int]:
    """(peak RSS in bytes, emulation wall seconds, events) of ``kbdebug run
    ring_attention``."""
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
    events = re.search(r"^trace: .*?([\d,]+) events", text, re.M)
    if found is None or events is None:
        sys.exit(f"no emulation time or events in the run's output:\n{text}")
    # ru_maxrss is in KiB on Linux
    return usage.ru_maxrss * 1024, float(found.group(1)), int(events.group(1).replace(",", ""))


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
    return usage.ru_maxrss * 1024, seconds


def one_pe_trace(events: int, folder: Path) -> tuple[Path, int]:
    """A 1-PE prefill trace of about ``events`` events (recorded without its check), and
    its events."""
    out = folder / "prefill_1pe.kbt"
    tiles = max(1, round(events / PREFILL_EVENTS_PER_TILE))
    argv = [sys.executable, "-m", "kbdebug", "run", "prefill", "--set", "pes=1"]
    argv += ["--set", f"n_tiles={tiles}", "--set", "tile=8", "--no-check", "-q", "-o", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    found = re.search(r"^trace: .*?([\d,]+) events", done.stdout, re.M)
    if done.returncode != 0 or found is None:
        sys.exit(f"prefill pes=1 n_tiles={tiles} failed: {done.stderr.strip()}")
    return out, int(found.group(1).replace(",", ""))


def trace_events(trace: Path) -> int:
    """The events of a recorded trace (its index, read in a child process)."""
    code = "import sys; from kbdebug.replay import Replay; print(Replay.open(sys.argv[1]).n_events)"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KBDEBUG_NO_CACHE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(trace)], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        sys.exit(f"cannot read {trace}: {done.stderr.strip()}")
    return int(done.stdout.split()[-1])


def app_first_screen(trace: Path, cache: Path) -> tuple[float, float]:
    """(seconds to the first screen with the header, peak RSS in bytes) of the app
    opening ``trace`` in a child process, its index cache in ``cache``."""
    argv = [sys.executable, "-c", APP_CODE, str(trace)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KBDEBUG_CACHE_DIR": str(cache)}
    env.pop("KBDEBUG_NO_CACHE", None)
    with tempfile.TemporaryFile("w+") as stdout:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        stdout.seek(0)
        text = stdout.read().strip()
    if os.waitstatus_to_exitcode(status) != 0 or not text:
        sys.exit(f"the app on {trace.name} failed: {proc.stderr.read().strip()}")
    return float(text.splitlines()[-1]), usage.ru_maxrss * 1024


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
    parser.add_argument(
        "--app-only",
        action="store_true",
        help="only the app's first screen (the largest ring recorded once, no other figure)",
    )
    parser.add_argument(
        "--ring", type=Path, help="with --app-only: this recorded ring instead of recording one"
    )
    parser.add_argument(
        "--one-pe",
        type=Path,
        help="with --app-only: this recorded 1-PE trace instead of recording one",
    )
    args = parser.parse_args()
    for given in (args.ring, args.one_pe):
        if given is not None and not given.is_file():
            sys.exit(f"{given}: no such trace")
    sizes = sorted(set(args.pes or [4, 64, 256]))
    if 4 not in sizes:
        sizes.insert(0, 4)  # the reference of every ratio
    rss: dict[int, list[float]] = {n: [] for n in sizes}
    wall: dict[int, list[float]] = {n: [] for n in sizes}
    per_event: dict[int, list[float]] = {n: [] for n in sizes}
    report_rss: dict[int, list[float]] = {n: [] for n in sizes}
    report_wall: dict[int, list[float]] = {n: [] for n in sizes}
    events: dict[int, int] = {}
    ring_events: dict[int, int] = {}
    largest = max(sizes)
    # Per trace ("ring", "1 PE") and cache ("cold", "warm"): seconds and peak RSS.
    app: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    app_events: dict[str, int] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mesh_scale-") as name:
        folder = Path(name)
        for run in range(args.runs):
            for pes in sizes if not args.app_only else []:
                seconds, events[pes] = prefill_time(pes, folder)
                per_event[pes].append(seconds / events[pes])
                if not args.no_rss:
                    peak, emulation, ring_events[pes] = ring_rss(pes, folder, not args.no_check)
                    rss[pes].append(peak)
                    wall[pes].append(emulation)
                    peak, seconds = report_cost(pes, folder)
                    report_rss[pes].append(peak)
                    report_wall[pes].append(seconds)
            if not args.no_rss:
                ring = args.ring or folder / f"ring_{largest}.kbt"
                if not ring.exists():
                    ring_events[largest] = ring_rss(largest, folder, check=False)[2]
                if not app_events:
                    app_events["ring"] = ring_events.get(largest) or trace_events(ring)
                    if args.one_pe:
                        one_pe, app_events["1 PE"] = args.one_pe, trace_events(args.one_pe)
                    else:
                        one_pe, app_events["1 PE"] = one_pe_trace(app_events["ring"], folder)
                for label, trace in (("ring", ring), ("1 PE", one_pe)):
                    cache = Path(tempfile.mkdtemp(dir=folder))
                    for state in ("cold", "warm"):
                        app[(label, state)].append(app_first_screen(trace, cache))
                if not args.app_only:
                    for old in folder.glob("ring_*.kbt"):
                        old.unlink()
            print(f"run {run + 1} of {args.runs} done ({time.perf_counter() - started:.0f} s)")
    if args.app_only:
        return print_app(app, app_events, largest)
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
        ok &= print_app(app, app_events, largest) == 0
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


def print_app(
    app: dict[tuple[str, str], list[tuple[float, float]]], events: dict[str, int], pes: int
) -> int:
    """Print the app's first-screen figures; 0 when the ring's is within APP_GOAL."""
    print(f"\nthe app's first screen (header painted, 160x48), {pes}-PE ring vs 1 PE:")
    for label in ("ring", "1 PE"):
        for state in ("cold", "warm"):
            samples = app[(label, state)]
            seconds = [s for s, _ in samples]
            peaks = [p for _, p in samples]
            print(
                f"  {label:5} {events[label]:10,} events  {state}  "
                f"{min_median(seconds, 1, 's', 5)}  peak {min_median(peaks, 1e6, 'MB')}"
            )
    ok = True
    for state in ("cold", "warm"):
        ratio = statistics.median(s for s, _ in app[("ring", state)]) / statistics.median(
            s for s, _ in app[("1 PE", state)]
        )
        print(f"  ring over 1 PE, {state} (medians): x{ratio:5.2f}")
        if state == "warm":
            ok = ratio <= APP_GOAL
            print(f"  goal: within {APP_GOAL}x, warm: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
