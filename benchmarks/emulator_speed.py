"""Emulator speed: tl calls per second on the depth-2 decode kernel, against bare SimPy.

The baseline runs, in the same process, a SimPy loop doing as many resource
request / hold / release cycles as the kernel made tl calls (commands issued
plus explicit waits). Goal: the emulator within 4x of it.

    python benchmarks/emulator_speed.py [--tiles 4096] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import simpy

from emulator.recorder import MemoryRecorder
from emulator.scenarios import decode_prefetch
from emulator.trace.schema import Kind


def count_tl_calls(n_tiles: int) -> int:
    """Commands issued plus explicit waits (a blocking tl.load counts once)."""
    rec = MemoryRecorder()
    decode_prefetch(n_tiles=n_tiles).run(recorder=rec)
    issues = {e[3]: e[10] for e in rec.events if e[0] == Kind.ISSUE}  # cmd -> blocking
    blocking_loads = sum(
        1 for e in rec.events if e[0] == Kind.ISSUE and e[4] == "load" and e[10]
    )
    waits = sum(1 for e in rec.events if e[0] == Kind.WAIT_BEGIN)
    return len(issues) + waits - blocking_loads


def time_emulator(n_tiles: int) -> float:
    scenario = decode_prefetch(n_tiles=n_tiles)
    start = time.perf_counter()
    scenario.run()
    return time.perf_counter() - start


def time_bare_simpy(cycles: int) -> float:
    env = simpy.Environment()
    resource = simpy.Resource(env, capacity=1)

    def loop():
        for _ in range(cycles):
            with resource.request() as request:
                yield request
                yield env.timeout(1)

    env.process(loop())
    start = time.perf_counter()
    env.run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    calls = count_tl_calls(args.tiles)
    emu, bare = [], []
    for _ in range(args.repeat):
        emu.append(time_emulator(args.tiles))
        bare.append(time_bare_simpy(calls))
    e, b = statistics.median(emu), statistics.median(bare)
    print(f"decode_prefetch, {args.tiles} tiles: {calls} tl calls")
    print(f"emulator:   {e:.3f} s  {calls / e:,.0f} tl calls/s")
    print(f"bare SimPy: {b:.3f} s  {calls / b:,.0f} request/hold/release cycles/s")
    print(f"ratio emulator / bare SimPy: {e / b:.2f}x (goal <= 4x)")


if __name__ == "__main__":
    main()
