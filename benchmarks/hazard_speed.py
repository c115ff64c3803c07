"""The hazard check on 1M-event traces: find_hazards' time, min and median of --runs.

Three traces, recorded once into benchmarks/_out/ and reused:

- ``decode_prefetch`` at 9,500 tiles (~988k events, one PE: loads only, so the sweep
  meets no store);
- ``staged_ring``: 8 PEs in a ring, each step storing a tile to a staging slot, waiting
  it, telling its right neighbour, which waits the message and loads the slot back;
  slots are reused every 16 steps, so each slot is stored and loaded many times over
  (the sweep's overlapping pairs, the vector clocks of every message). Fenced: it has
  no hazard;
- ``staged_ring_racy``: the same ring sending before its store is waited: every
  read-back and every re-store of a slot is a hazard (a few lines, thousands of pairs).

Goal: under 1 s each. ``python benchmarks/hazard_speed.py [--runs 5]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from emulator import HardwareConfig, Memory, run_kernel
from emulator.scenarios import SCENARIOS
from kbdebug.analysis.hazards import find_hazards
from kbdebug.replay import Replay

OUT = Path(__file__).resolve().parent / "_out"
TILES = 9500
RING_PES, RING_STEPS, SLOTS = 8, 3600, 16
SHAPE, TILE = (8, 16), 8 * 16 * 4


def staged_ring(tl, x_ptr, stage_ptr, out_ptr, steps, fenced):
    """Each step: store a tile to this PE's slot, wait it (unless not ``fenced``), tell
    the right neighbour; take the left neighbour's word and load its slot back."""
    pid, n = tl.program_id(0), tl.num_programs(0)
    left = (pid - 1) % n
    t = tl.load(x_ptr, SHAPE, "f32")
    for step in range(steps):
        slot = step % SLOTS
        stored = tl.store(stage_ptr + (pid * SLOTS + slot) * TILE, t)
        if fenced:
            tl.wait(stored)
        tl.send("right", t)
        tl.free(tl.wait(tl.recv_async("left", SHAPE, "f32")))
        tl.free(tl.wait(tl.load_async(stage_ptr + (left * SLOTS + slot) * TILE, SHAPE, "f32")))
    tl.wait(tl.store(out_ptr + pid * TILE, t))


def ring_trace(fenced: bool) -> Path:
    name = "staged_ring" if fenced else "staged_ring_racy"
    path = OUT / f"hazards_{name}_{RING_PES}x{RING_STEPS}.kbt"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        memory = Memory(size_bytes=(RING_PES * SLOTS + RING_PES + 1) * TILE + (1 << 12))
        x = memory.put(np.ones(SHAPE, dtype=np.float32))
        stage, out = memory.alloc(RING_PES * SLOTS * TILE), memory.alloc(RING_PES * TILE)
        config = HardwareConfig(mesh_rows=1, mesh_cols=RING_PES, mesh_wrap=True)
        args = (x, stage, out, RING_STEPS, fenced)
        run_kernel(staged_ring, args, (RING_PES,), memory, config, trace=path)
    return path


def decode_trace() -> Path:
    path = OUT / f"findings_decode_prefetch_{TILES}.kbt"
    if not path.exists():
        OUT.mkdir(exist_ok=True)
        SCENARIOS["decode_prefetch"](n_tiles=TILES).run(trace=path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    traces = {
        "decode_prefetch": decode_trace,
        "staged_ring": lambda: ring_trace(True),
        "staged_ring_racy": lambda: ring_trace(False),
    }
    for name, make in traces.items():
        replay = Replay.open(make())
        times, found = [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            found = find_hazards(replay.index)
            times.append(time.perf_counter() - t0)
        print(
            f"{name:16s} {replay.n_events:,} events: find_hazards min {min(times):.3f} s, "
            f"median {statistics.median(times):.3f} s of {args.runs} (goal < 1 s), "
            f"{len(found)} hazards"
        )


if __name__ == "__main__":
    main()
