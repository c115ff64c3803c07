"""An independent, rough reference of the per-PE lower bound, for writing the corpus.

Used while designing kernels (``python tests/corpus/_reference.py MODULE``) to
check that a fixed twin sits at the model's bound before the analysis exists;
the tests themselves only trust ``kbdebug.analysis.pe_bounds``. It follows the
model as the issue states it: a serial chain in program order (compute and issue
cycles add up); a load's wait ends no earlier than an issue plus the transfers of
every load waited so far spread over the read channels, plus latency; stores and
sends drain before the end; a receive no earlier than it was actually delivered.
It knows nothing of data dependencies (page tables, fences).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import defaultdict
from pathlib import Path

from emulator.trace.schema import Kind

_TRANSFERS = {"load", "load_async", "store", "send", "recv_async"}


def reference_bounds(result, config) -> dict[int, int]:
    """Lower bound per PE from a RunResult recorded with keep_events=True."""
    events = result.events
    busy: dict[tuple[int, int], int] = {}
    grant: dict[tuple[int, int], int] = {}
    recv_done: dict[int, int] = {}
    for ev in events:
        kind, time, pe = ev[0], ev[1], ev[2]
        if kind == Kind.CHAN_GRANT:
            grant[(pe, ev[4])] = time
        elif kind == Kind.CHAN_RELEASE:
            busy[(pe, ev[4])] = time - grant.get((pe, ev[4]), time)
        elif kind == Kind.IPCQ_RECV:
            recv_done[ev[5]] = time
    chain: dict[int, int] = defaultdict(int)
    waited: dict[int, int] = defaultdict(int)
    write_free: dict[int, int] = defaultdict(int)
    floor: dict[int, int] = defaultdict(int)
    loads: dict[int, int] = {}
    recvs: set[int] = set()
    issue = config.issue_cycles
    for ev in events:
        kind, pe = ev[0], ev[2]
        if kind == Kind.ISSUE:
            cmd, op, fid, nbytes = ev[3], ev[4], ev[5], ev[7]
            if op in _TRANSFERS:
                chain[pe] += issue
                if op in ("load", "load_async"):
                    loads[fid] = math.ceil(nbytes / config.hbm_bytes_per_cycle)
                elif op == "store":
                    cycles = math.ceil(nbytes / config.hbm_bytes_per_cycle)
                    write_free[pe] = max(write_free[pe], chain[pe]) + cycles
                    floor[pe] = max(floor[pe], write_free[pe] + config.hbm_latency)
                elif op == "send":
                    cycles = math.ceil(nbytes / config.ipcq_bytes_per_cycle)
                    floor[pe] = max(floor[pe], chain[pe] + cycles + config.ipcq_latency)
                else:
                    recvs.add(fid)
            elif fid == -1:
                chain[pe] += busy.get((pe, cmd), 0)
        elif kind == Kind.WAIT_BEGIN:
            fid = ev[3]
            if fid in loads:
                waited[pe] += loads.pop(fid)
                arrive = issue + math.ceil(waited[pe] / config.dma_read_channels)
                chain[pe] = max(chain[pe], arrive + config.hbm_latency)
            elif fid in recvs:
                chain[pe] = max(chain[pe], recv_done.get(fid, 0))
    return {pe: max(chain[pe], floor[pe]) for pe in result.pe_end_times}


def _load(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(paths: list[str]) -> None:
    for path in paths:
        module = _load(path)
        params = getattr(module, "PAIR", getattr(module, "CLEAN", {})).get("params", {})
        rows = []
        for name in ("launch_bug", "launch_fixed", "launch"):
            launch = getattr(module, name, None)
            if launch is None:
                continue
            scenario = launch(**params)
            result = scenario.run(keep_events=True)
            if scenario.check:
                scenario.check(scenario.memory)
            ref = reference_bounds(result, scenario.config)
            rows.append((name, result.pe_end_times, ref))
        print(Path(path).stem)
        for name, ends, ref in rows:
            cells = " ".join(
                f"pe{pe}={ends[pe]}/{ref[pe]}({ref[pe] / ends[pe]:.2f})" for pe in sorted(ends)
            )
            print(f"  {name:13s} {cells}")
        if len(rows) >= 2 and rows[0][0] == "launch_bug":
            bug, fixed = rows[0][1], rows[1][1]
            cells = " ".join(
                f"pe{pe}={bug[pe] - fixed[pe]}({(bug[pe] - fixed[pe]) / bug[pe]:.1%})"
                for pe in sorted(bug)
            )
            print(f"  {'bug cost':13s} {cells}")


if __name__ == "__main__":
    main(sys.argv[1:])
