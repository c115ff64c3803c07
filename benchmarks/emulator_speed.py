"""Emulator speed on the depth-2 decode kernel, against bare SimPy in the same process.

The baseline is a SimPy loop doing N capacity-1 resource request / hold /
release cycles. Times are CPU seconds of this process (``time.process_time``),
so other work on a shared machine slows neither side much. Each ratio is printed
as the min and median over ``--repeat`` runs (each run against its own baseline
run, interleaved) and as the ratio of the fastest times:

- per modelled command: emulator time (tracing off) over the bare loop with
  N = len(op_log), the commands the kernel issued (goal <= 2.0);
- per tl call: the same run over the bare loop with N = commands plus explicit
  waits (a blocking tl.load counts once);
- tracing on / off: the run writing a .kbt file over the run without
  (goal <= 1.15), with compound records from format 1.2 on (the line above the
  ratios says how many records the trace holds per command);
- digests on / off: the run writing a .kbt file with the digest of every tensor
  waited and stored (format 1.5, the default) over the same run writing none
  (``KBDEBUG_DIGESTS=0``, what a 1.4 writer wrote), interleaved (goal <= 1.10).
  ``--digests-only`` measures just this line, on ``--scenario`` decode_prefetch
  (``--tiles`` K/V tiles), prefill (``--tiles`` K/V tiles per PE) or gemm_pipeline
  (``--tiles`` row tiles of A).

With ``--breakdown``, where tracing's time goes, each over tracing off: a
recorder that takes every call and keeps nothing (the emulator's emit sites and
the calls themselves), a TraceWriter whose packer packs nothing (its checks,
interning and record tuples), and the TraceWriter writing the file (plus msgpack
packing and the writes).

    python benchmarks/emulator_speed.py [--tiles 4096] [--repeat 5] [--breakdown]
    python benchmarks/emulator_speed.py --digests-only --scenario gemm_pipeline
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import msgpack
import simpy

from emulator.recorder import MemoryRecorder, NullRecorder, TeeRecorder
from emulator.scenarios import Scenario, decode_prefetch, gemm_pipeline, prefill
from emulator.trace import wire
from emulator.trace.schema import Kind
from emulator.trace.writer import TraceWriter


def count_work(n_tiles: int) -> tuple[int, int, int, int, int]:
    """(modelled commands, tl calls, events, event records, trace bytes) of one run of
    the decode kernel, traced as ``kbdebug run`` traces it."""
    rec, out = MemoryRecorder(), io.BytesIO()
    writer = TraceWriter(out)
    result = decode_prefetch(n_tiles=n_tiles).run(recorder=TeeRecorder(writer, rec))
    commands = len(result.op_log)
    blocking_loads = sum(1 for e in rec.events if e[0] == Kind.ISSUE and e[4] == "load" and e[10])
    waits = sum(1 for e in rec.events if e[0] == Kind.WAIT_BEGIN)
    data = out.getvalue()
    records = sum(
        1
        for record in msgpack.Unpacker(io.BytesIO(data), strict_map_key=False)
        if isinstance(record, list) and record[0] in wire.EVENT_CODES
    )
    return commands, commands + waits - blocking_loads, len(rec.events), records, len(data)


#: The scenarios --digests-only measures, each of ``n`` tiles.
DIGEST_SCENARIOS = {
    "decode_prefetch": lambda n: decode_prefetch(n_tiles=n),
    "prefill": lambda n: prefill(n_tiles=n),
    "gemm_pipeline": lambda n: gemm_pipeline(m=64 * n),
}


def time_emulator(
    n_tiles: int,
    trace: str | None = None,
    recorder: object = None,
    digests: bool = True,
    make: Callable[[int], Scenario] = DIGEST_SCENARIOS["decode_prefetch"],
) -> float:
    scenario = make(n_tiles)  # setup (random inputs) is not timed
    gc.collect()
    start = time.process_time()
    if recorder is None:
        scenario.run(trace=trace, digests=digests)
    else:
        scenario.run(recorder=recorder, digests=digests)
    return time.process_time() - start


class KeepNothing(NullRecorder):
    """Takes every call and keeps nothing: a subclass, so the emulator still makes the
    calls (it skips them for a plain NullRecorder)."""

    def emit(self, *args: object) -> None:
        pass

    def emit_compound(self, *args: object) -> None:
        pass


class PackNothing(TraceWriter):
    """A TraceWriter whose packer packs nothing: all of the writer's work but msgpack's."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self._pack = lambda records: b"\x90"


def breakdown(n_tiles: int, repeat: int, path: str) -> None:
    """Tracing's cost in parts, each over tracing off in the same repeat."""
    parts: dict[str, list[float]] = {"off": [], "calls": [], "writer": [], "packing": []}
    for _ in range(repeat):
        parts["off"].append(time_emulator(n_tiles))
        parts["calls"].append(time_emulator(n_tiles, recorder=KeepNothing()))
        parts["writer"].append(time_emulator(n_tiles, recorder=PackNothing(path)))
        parts["packing"].append(time_emulator(n_tiles, trace=path))
    off = parts["off"]
    print("where tracing's time goes (each over tracing off):")
    print(f"  emit sites and calls, recorder keeps nothing: {summary(parts['calls'], off)}")
    print(f"  + TraceWriter without msgpack packing:        {summary(parts['writer'], off)}")
    print(f"  + packing and writing (tracing on):           {summary(parts['packing'], off)}")


def time_bare_simpy(cycles: int) -> float:
    env = simpy.Environment()
    resource = simpy.Resource(env, capacity=1)

    def loop():
        for _ in range(cycles):
            with resource.request() as request:
                yield request
                yield env.timeout(1)

    env.process(loop())
    gc.collect()
    start = time.process_time()
    env.run()
    return time.process_time() - start


def summary(top: list[float], bottom: list[float]) -> str:
    """Min and median of the per-repeat ratios, and the ratio of the fastest times
    (the steadiest figure on a busy machine: noise only ever adds time)."""
    ratios = [t / b for t, b in zip(top, bottom, strict=True)]
    return (
        f"min {min(ratios):.2f}x  median {statistics.median(ratios):.2f}x  "
        f"fastest/fastest {min(top) / min(bottom):.2f}x"
    )


def digests_only(scenario: str, n_tiles: int, repeat: int) -> None:
    """The digests on / off line alone, on ``scenario``."""
    make = DIGEST_SCENARIOS[scenario]
    on, off = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.kbt")
        time_emulator(n_tiles, path, make=make)  # imports, first-run caches
        for _ in range(repeat):
            on.append(time_emulator(n_tiles, path, make=make))
            off.append(time_emulator(n_tiles, path, digests=False, make=make))
    print(f"{scenario}, {n_tiles} tiles: digests off {statistics.median(off):.3f} CPU s median")
    print(f"digests on / off (tracing on): {summary(on, off)}  (goal <= 1.10)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--breakdown", action="store_true", help="also print where tracing's time goes"
    )
    parser.add_argument(
        "--digests-only",
        action="store_true",
        help="measure only digests on / off, on --scenario",
    )
    parser.add_argument("--scenario", choices=sorted(DIGEST_SCENARIOS))
    args = parser.parse_args()
    if args.scenario is not None and not args.digests_only:
        parser.error("--scenario is for --digests-only (the other lines run decode_prefetch)")
    if args.digests_only:
        args.scenario = args.scenario or "decode_prefetch"
        digests_only(args.scenario, args.tiles, args.repeat)
        return

    commands, calls, events, records, size = count_work(args.tiles)
    gc.collect()
    off, on, bare_commands, bare_calls, no_digests = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "decode.kbt")
        for _ in range(args.repeat):
            off.append(time_emulator(args.tiles))
            bare_commands.append(time_bare_simpy(commands))
            on.append(time_emulator(args.tiles, path))
            bare_calls.append(time_bare_simpy(calls))
            no_digests.append(time_emulator(args.tiles, path, digests=False))
    median_off = statistics.median(off)
    print(f"decode_prefetch, {args.tiles} tiles: {commands} commands, {calls} tl calls")
    print(
        f"trace (format {'.'.join(map(str, wire.FORMAT_VERSION))}): {events} events in "
        f"{records} records ({records / commands:.2f} per command), {size:,} bytes"
    )
    print(
        f"emulator, tracing off: {median_off:.3f} CPU s median, "
        f"{commands / median_off:,.0f} commands/s"
    )
    print(f"per command  (emulator / bare SimPy): {summary(off, bare_commands)}  (goal <= 2.0)")
    print(f"per tl call  (emulator / bare SimPy): {summary(off, bare_calls)}")
    print(f"tracing on / off:                     {summary(on, off)}  (goal <= 1.15)")
    print(f"digests on / off (tracing on):        {summary(on, no_digests)}  (goal <= 1.10)")
    if args.breakdown:
        with tempfile.TemporaryDirectory() as tmp:
            breakdown(args.tiles, args.repeat, os.path.join(tmp, "decode.kbt"))


if __name__ == "__main__":
    main()
