"""Key-to-screen latency of the terminal app on a one-million-event trace at 160x48.

For every move (step, reverse step, tl call, continue to a breakpoint both ways,
a lifecycle event of a future, a seek to an event or a cycle) this measures
from the start of the key's action to a ``call_after_refresh`` callback, i.e.
to the end of the next screen refresh; the time Pilot spends waiting between
keys is not part of the figure. The trace is generated once into
benchmarks/_out/ (gitignored).

Each move is timed twice: wall time (the target) and this process's CPU time over
the same span. On a machine shared with other work the wall time grows with the
load while the CPU time does not, so compare CPU medians between two versions.

    python benchmarks/ui_latency.py [--keys 200] [--trace PATH]

Target: median <= 16 ms, p95 <= 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from emulator.scenarios import decode_prefetch  # noqa: E402
from kbdebug.replay import Replay  # noqa: E402
from kbdebug.ui import KbdebugApp  # noqa: E402

TRACE = ROOT / "benchmarks" / "_out" / "decode_1m.kbt"
SIZE = (160, 48)


class TimedApp(KbdebugApp):
    """The app, timing each action from its start to the end of the next refresh."""

    def __init__(self, replay: Replay) -> None:
        super().__init__(replay=replay)
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.cpu: dict[str, list[float]] = defaultdict(list)
        self.pending = 0

    def measure_from(self, name: str, start: float, cpu_start: float) -> None:
        self.pending += 1

        def done() -> None:
            self.samples[name].append(time.perf_counter() - start)
            self.cpu[name].append(time.process_time() - cpu_start)
            self.pending -= 1

        self.call_after_refresh(done)

    async def run_action(self, action, default_namespace=None) -> bool:
        start, cpu_start = time.perf_counter(), time.process_time()
        result = await super().run_action(action, default_namespace)
        if isinstance(action, str):
            self.measure_from(action, start, cpu_start)
        return result


def ensure_trace(path: Path) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"generating {path} (decode_prefetch, n_tiles=9500) ...", flush=True)
    start = time.perf_counter()
    decode_prefetch(n_tiles=9500).run(trace=str(path))
    print(f"  {time.perf_counter() - start:.1f} s", flush=True)


async def drive(app: TimedApp, keys: int, seed: int) -> None:
    rng = random.Random(seed)
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()

        async def press(*names: str) -> None:
            for name in names:
                await pilot.press(name)
                while app.pending:
                    await pilot.pause(0.001)

        async def seek(name: str, move) -> None:
            start, cpu_start = time.perf_counter(), time.process_time()
            move()
            app.measure_from(name, start, cpu_start)
            while app.pending:
                await pilot.pause(0.001)

        replay = app.replay
        await press("w")
        for _ in range(keys):
            await press("c")
        for _ in range(keys):
            await press("C")
        for _ in range(keys):
            await press("e")  # one raw event
        for _ in range(keys):
            await press("E")
        for _ in range(keys // 2):
            await press("n", "N")  # gdb's next (a helper call one step), and back
        for _ in range(keys // 2):
            await press("s", "S")  # the next tl call, into helpers, and back
        for _ in range(keys // 4):
            await press("f", "F")
        for _ in range(keys):
            target = rng.randrange(replay.n_events)
            await seek("seek event", lambda t=target: app.move_to(t))
        for _ in range(keys):
            cycle = rng.randrange(replay.end_time)
            await seek("seek cycle", lambda c=cycle: app.seek_cycle(c))
        await press("G", "g")


def report(samples: dict[str, list[float]]) -> tuple[float, float]:
    print(f"{'move':<22}{'n':>6}{'median ms':>12}{'p95 ms':>10}{'max ms':>10}")
    everything: list[float] = []
    for name, values in samples.items():
        everything += values
        print(
            f"{name:<22}{len(values):>6}{1e3 * statistics.median(values):>12.2f}"
            f"{1e3 * _p95(values):>10.2f}{1e3 * max(values):>10.2f}"
        )
    median, p95 = statistics.median(everything), _p95(everything)
    print(f"{'all moves':<22}{len(everything):>6}{1e3 * median:>12.2f}{1e3 * p95:>10.2f}")
    return median, p95


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=200, help="presses per kind of move")
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ensure_trace(args.trace)
    start = time.perf_counter()
    replay = Replay.open(args.trace)
    print(
        f"{args.trace.name}: {replay.n_events:,} events, {replay.n_futures:,} futures, "
        f"opened in {time.perf_counter() - start:.2f} s; terminal {SIZE[0]}x{SIZE[1]}"
    )
    app = TimedApp(replay)
    asyncio.run(drive(app, args.keys, args.seed))
    median, p95 = report(app.samples)
    cpu = [v for values in app.cpu.values() for v in values]
    print(
        f"{'all moves, CPU time':<22}{len(cpu):>6}{1e3 * statistics.median(cpu):>12.2f}"
        f"{1e3 * _p95(cpu):>10.2f}"
    )
    ok = median <= 0.016 and p95 <= 0.050
    print(("PASS" if ok else "FAIL") + ": target median <= 16 ms, p95 <= 50 ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
