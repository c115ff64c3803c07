"""Peak memory and phase times of `kbdebug run decode_prefetch` at scale, against the HBM it reads.

Each run is a child process (`python -m kbdebug run ...`): its peak RSS comes
from os.wait4, its setup / emulation / check wall times from the lines it
prints. The baseline is the HBM bytes the kernel reads (Q once, every K and V
tile once); the goal is peak RSS <= 2 x that + 200 MB, with setup and check
each no longer than the emulation.

    python benchmarks/run_memory.py              # 2,000 and 20,000 tiles, 3 runs each
    python benchmarks/run_memory.py --quick      # 2,000 tiles, 1 run
    python benchmarks/run_memory.py --tiles 5000 --runs 5
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = "decode_prefetch"
#: decode_prefetch's defaults: 64-row tiles, 8 heads, head_dim 128, f16.
TILE, HEADS, HEAD_DIM, F16 = 64, 8, 128, 2
ALLOWANCE = 200 << 20

PATTERNS = {
    "setup": r"^setup: +inputs built in ([\d.]+) s$",
    "emulation": r"^end: +simulated [\d,]+ cycles in ([\d.]+) s of wall time$",
    "check": r"^check: .*\(checked in ([\d.]+) s\)$",
}


def hbm_read_bytes(n_tiles: int) -> int:
    """Bytes the kernel's loads move out of HBM: Q once, then one K and one V tile per step."""
    return HEADS * HEAD_DIM * F16 + 2 * n_tiles * TILE * HEAD_DIM * F16


def one_run(n_tiles: int, folder: Path) -> dict[str, float]:
    out = folder / f"decode_{n_tiles}.kbt"
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "kbdebug", "run", SCENARIO, "--set", f"n_tiles={n_tiles}"]
    argv += ["-q", "-o", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as stdout:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        stdout.seek(0)
        text = stdout.read()
    if proc.returncode != 0:
        sys.exit(f"run failed ({proc.returncode}): {proc.stderr.read().strip()}")
    out.unlink(missing_ok=True)
    figures = {"rss": usage.ru_maxrss * 1024, "wall": wall}  # ru_maxrss is in KiB on Linux
    for name, pattern in PATTERNS.items():
        found = re.search(pattern, text, re.M)
        if found is None:
            sys.exit(f"no {name} time in the run's output:\n{text}")
        figures[name] = float(found.group(1))
    return figures


def report(n_tiles: int, runs: list[dict[str, float]]) -> bool:
    hbm = hbm_read_bytes(n_tiles)
    limit = 2 * hbm + ALLOWANCE
    rss = [r["rss"] for r in runs]

    def mm(key: str) -> str:
        values = [r[key] for r in runs]
        return f"min {min(values):6.2f}  median {statistics.median(values):6.2f}"

    print(
        f"n_tiles={n_tiles:,}  HBM read {hbm / 1e6:,.0f} MB  limit 2x+200MB {limit / 1e6:,.0f} MB"
    )
    median = statistics.median(rss)
    print(
        f"  peak RSS      min {min(rss) / 1e6:7,.0f} MB  median {median / 1e6:7,.0f} MB"
        f"  RSS/HBM {median / hbm:.2f}  ({'within' if max(rss) <= limit else 'OVER'} the limit)"
    )
    for key in ("setup", "emulation", "check", "wall"):
        print(f"  {key:<10} s  {mm(key)}")
    ratios = {
        k: statistics.median(r[k] / max(r["emulation"], 1e-9) for r in runs)
        for k in ("setup", "check")
    }
    print(f"  setup/emulation {ratios['setup']:.2f}  check/emulation {ratios['check']:.2f}")
    return max(rss) <= limit and max(ratios.values()) <= 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, action="append", help="n_tiles (repeatable)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 tiles, one run")
    args = parser.parse_args()
    sizes = args.tiles or ([2000] if args.quick else [2000, 20000])
    runs = 1 if args.quick else args.runs
    ok = True
    with tempfile.TemporaryDirectory(prefix="run_memory-") as folder:
        for n_tiles in sizes:
            ok &= report(n_tiles, [one_run(n_tiles, Path(folder)) for _ in range(runs)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
