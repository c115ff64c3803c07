"""Key-to-screen latency of the compare app on two one-million-event traces at 160x48.

The flawed prefetch and its fix (decode_prefetch), 9,500 tiles each (about a million
events), opened with ``kbdebug A B``'s app. For every move (step both ways, tl call
both ways, continue to a stalled wait both ways, a seek to an event, zoom, pan, flip
the focused run) this measures from the start of the key's action to a
``call_after_refresh`` callback, i.e. to the end of the next screen refresh, as
benchmarks/ui_latency.py does. Each move repaints both runs' lanes and moves both
cursors. As an in-process baseline the single-run app (``kbdebug A``) gets the same
kinds of keys on trace A; the ratio compare / single is printed too, since timing
on a shared machine is noisy. The traces are generated once into benchmarks/_out/.

    python benchmarks/compare_latency.py [--keys 100] [--repeat 3]

Target (the single-run app's): median <= 16 ms, p95 <= 50 ms.
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

from emulator.scenarios import decode_prefetch, flawed_prefetch  # noqa: E402
from kbdebug.replay import Replay  # noqa: E402
from kbdebug.ui import KbdebugApp  # noqa: E402
from kbdebug.ui.compare.app import CompareApp  # noqa: E402

OUT = ROOT / "benchmarks" / "_out"
TRACES = {
    "a": (OUT / "compare_flawed_prefetch_9500.kbt", flawed_prefetch),
    "b": (OUT / "compare_decode_prefetch_9500.kbt", decode_prefetch),
}
SIZE = (160, 48)


class Timing:
    """Times each action from its start to the end of the next refresh."""

    def init_timing(self) -> None:
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.pending = 0

    def measure_from(self, name: str, start: float) -> None:
        self.pending += 1

        def done() -> None:
            self.samples[name].append(time.perf_counter() - start)
            self.pending -= 1

        self.call_after_refresh(done)

    async def run_action(self, action, default_namespace=None) -> bool:
        start = time.perf_counter()
        result = await super().run_action(action, default_namespace)
        if isinstance(action, str):
            self.measure_from(action, start)
        return result


class TimedCompare(Timing, CompareApp):
    def __init__(self, a: Replay, b: Replay) -> None:
        super().__init__(a, b)
        self.init_timing()


class TimedSingle(Timing, KbdebugApp):
    def __init__(self, replay: Replay) -> None:
        super().__init__(replay=replay)
        self.init_timing()


def ensure_traces() -> None:
    for path, scenario in TRACES.values():
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"generating {path.name} (n_tiles=9500) ...", flush=True)
        start = time.perf_counter()
        scenario(n_tiles=9500).run(trace=str(path))
        print(f"  {time.perf_counter() - start:.1f} s", flush=True)


async def drive(app, keys: int, seed: int, compare: bool) -> None:
    rng = random.Random(seed)
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()

        async def press(*names: str) -> None:
            for name in names:
                await pilot.press(name)
                while app.pending:
                    await pilot.pause(0.001)

        replay = app.replays["a"] if compare else app.replay
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
            await press("plus", "greater_than_sign", "less_than_sign", "minus")
        if compare:
            for _ in range(keys // 4):
                await press("x", "n")
        for _ in range(keys):
            target = rng.randrange(replay.n_events)
            start = time.perf_counter()
            app.move_to(target, "seek") if compare else app.move_to(target)
            app.measure_from("seek event", start)
            while app.pending:
                await pilot.pause(0.001)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def summary(samples: dict[str, list[float]]) -> tuple[float, float, dict[str, float]]:
    everything = [v for values in samples.values() for v in values]
    per_move = {name: statistics.median(values) for name, values in samples.items()}
    return statistics.median(everything), _p95(everything), per_move


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100, help="presses per kind of move")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each app")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ensure_traces()
    start = time.perf_counter()
    a, b = (Replay.open(TRACES[run][0]) for run in ("a", "b"))
    print(
        f"A {TRACES['a'][0].name}: {a.n_events:,} events; B {TRACES['b'][0].name}: "
        f"{b.n_events:,} events; opened in {time.perf_counter() - start:.2f} s; "
        f"terminal {SIZE[0]}x{SIZE[1]}"
    )
    medians, p95s, ratios = [], [], []
    for k in range(args.repeat):
        single = TimedSingle(Replay(a.index, a.path))
        asyncio.run(drive(single, args.keys, args.seed + k, compare=False))
        compare = TimedCompare(Replay(a.index, a.path), Replay(b.index, b.path))
        asyncio.run(drive(compare, args.keys, args.seed + k, compare=True))
        median, p95, per_move = summary(compare.samples)
        base, _, _ = summary(single.samples)
        medians.append(median)
        p95s.append(p95)
        ratios.append(median / base)
        print(
            f"run {k + 1}: compare median {1e3 * median:.2f} ms, p95 {1e3 * p95:.2f} ms; "
            f"single-run app median {1e3 * base:.2f} ms; ratio {median / base:.2f}"
        )
        if k == 0:
            print(
                "  compare, median per move (ms): "
                + ", ".join(f"{name} {1e3 * value:.1f}" for name, value in per_move.items())
            )
    print(
        f"compare median: min {1e3 * min(medians):.2f} ms, median "
        f"{1e3 * statistics.median(medians):.2f} ms; p95: min {1e3 * min(p95s):.2f} ms, "
        f"median {1e3 * statistics.median(p95s):.2f} ms; ratio to the single-run app: "
        f"min {min(ratios):.2f}, median {statistics.median(ratios):.2f}"
    )
    ok = statistics.median(medians) <= 0.016 and statistics.median(p95s) <= 0.050
    print(("PASS" if ok else "FAIL") + ": target median <= 16 ms, p95 <= 50 ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
