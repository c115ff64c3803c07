"""Per-block speed of the trace reader's bulk scan (emulator/trace/bulk.py) against an
older version of it loaded from git, in the same process, as ratios.

Blocks of BULK_BYTES are cut from a recorded million-event trace (the one
replay_speed.py records) at record boundaries, found record by record, and between
definitions, as the reader cuts them; the sampled ones are full-size. Each round times
find_records and scan_records of the same block with both versions, alternating, best
of ``--repeat`` calls; the ratios (old / new, above 1 is faster) are given as min and
median over rounds. The two versions' results are checked to be equal first.

With ``--stream``, every block of the trace is scanned once per round, in order,
by one version and then the other, as the reader does (fresh memory each block
included, which best-of timings of one block hide).

    python benchmarks/scan_speed.py [--old 42d9753] [--rounds 7] [--repeat 10] [--blocks 8]
                                    [--stream]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import msgpack
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.replay_speed import decode_trace  # noqa: E402
from emulator.trace import bulk, wire  # noqa: E402
from emulator.trace.parser import BULK_BYTES  # noqa: E402

# The last commit of bulk.py before the per-block speed work.
BEFORE = "42d9753f349411a8d6727c5fc2eb0ed80da968ac"


def old_bulk(rev: str) -> types.ModuleType:
    """emulator/trace/bulk.py as of ``rev``, as a module."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:emulator/trace/bulk.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType("bulk_old")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:emulator/trace/bulk.py", "exec"), module.__dict__)
    return module


def blocks(data: bytes, count: int | None) -> list[bytes]:
    """The blocks the reader hands find_records, in order: runs of whole event records of
    at most BULK_BYTES, cut at every other record (a definition). With a ``count``,
    that many full-size ones spread over the file."""
    # Every record's start, read record by record (find_records started inside a record
    # would cut blocks at no real record), and whether it is an event.
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    starts, events = [0], []
    for record in unpacker:
        events.append(isinstance(record, list) and bool(record) and record[0] in wire.EVENT_CODES)
        starts.append(unpacker.tell())
    found: list[bytes] = []
    first = 0
    while first < len(events):
        last = first
        while (
            last < len(events) and events[last] and starts[last + 1] - starts[first] <= BULK_BYTES
        ):
            last += 1
        if last > first:
            found.append(data[starts[first] : starts[last]])
        first = max(last, first + 1)
    if count is None:
        return found
    full = [block for block in found if len(block) >= BULK_BYTES // 2]
    step = max(len(full) // count, 1)
    return full[::step][:count]


def best(call: Callable[[], object], repeat: int) -> float:
    """The best of ``repeat`` timed calls, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def same(a: object, b: object) -> bool:
    """Equal as scan results: arrays by value, containers element by element."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "__dataclass_fields__"):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return a == b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", default=BEFORE, help="git revision of the old bulk.py")
    parser.add_argument("--tiles", type=int, default=9500)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--stream", action="store_true", help="every block once, in order")
    args = parser.parse_args()
    old = old_bulk(args.old)
    data = decode_trace(args.tiles).read_bytes()
    chosen = blocks(data, None if args.stream else args.blocks)
    repeat = 1 if args.stream else args.repeat
    for block in chosen:
        assert same(old.find_records(block), bulk.find_records(block))
        assert same(old.scan_block(block, True), bulk.scan_block(block, True))
    print(f"{len(chosen)} blocks of about {BULK_BYTES} bytes, old = {args.old[:10]}")
    ratios: dict[str, list[float]] = {"find_records": [], "scan_records": [], "both": []}
    times: dict[str, list[float]] = {f"{k} {v}": [] for k in ratios for v in ("old", "new")}
    versions = (("old", old), ("new", bulk))
    for _ in range(args.rounds):
        total = {f"{k} {v}": 0.0 for k in ratios for v in ("old", "new")}
        turns = [(block, name, module) for block in chosen for name, module in versions]
        if args.stream:
            turns = [(block, name, module) for name, module in versions for block in chosen]
        for block, name, module in turns:
            start = time.perf_counter()
            records = module.find_records(block)
            find = time.perf_counter() - start
            if repeat > 1:
                find = min(find, best(lambda m=module, b=block: m.find_records(b), repeat))
            scan = best(lambda m=module, r=records: m.scan_records(r, True), repeat)
            total[f"find_records {name}"] += find
            total[f"scan_records {name}"] += scan
            total[f"both {name}"] += find + scan
        for key, value in total.items():
            times[key].append(value / len(chosen))
        for key in ratios:
            ratios[key].append(total[f"{key} old"] / total[f"{key} new"])
    for key in ratios:
        old_ms = [t * 1e3 for t in times[f"{key} old"]]
        new_ms = [t * 1e3 for t in times[f"{key} new"]]
        print(
            f"{key:13} per block: old {min(old_ms):.2f} ms"
            f" (median {statistics.median(old_ms):.2f}),"
            f" new {min(new_ms):.2f} ms (median {statistics.median(new_ms):.2f});"
            f" old/new min {min(ratios[key]):.2f}x median {statistics.median(ratios[key]):.2f}x"
        )


if __name__ == "__main__":
    main()
