"""Findings on a 1M-event trace: find_all's time, against Replay.open of the same file.

Records decode_prefetch and flawed_prefetch at 9,500 tiles (~988k events each) once
into benchmarks/_out/ and reuses them. Goal: find_all under 1 s on each.
"""

from __future__ import annotations

import time
from pathlib import Path

from emulator.scenarios import SCENARIOS
from kbdebug.analysis import find_all, pe_bounds
from kbdebug.replay import Replay

OUT = Path(__file__).resolve().parent / "_out"
TILES = 9500


def trace(name: str) -> Path:
    path = OUT / f"findings_{name}_{TILES}.kbt"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        SCENARIOS[name](n_tiles=TILES).run(trace=path)
    return path


def main() -> None:
    for name in ("decode_prefetch", "flawed_prefetch"):
        path = trace(name)
        t0 = time.perf_counter()
        replay = Replay.open(path)
        t1 = time.perf_counter()
        found = find_all(replay)
        t2 = time.perf_counter()
        (bound,) = pe_bounds(replay)
        print(
            f"{name:16s} {replay.n_events:,} events: open {t1 - t0:.2f} s, find_all "
            f"{t2 - t1:.2f} s ({(t2 - t1) / (t1 - t0):.2f}x open; goal < 1 s), "
            f"{len(found)} findings, efficiency {bound.efficiency:.1%}"
        )


if __name__ == "__main__":
    main()
