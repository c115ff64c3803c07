"""Perfetto protobuf against Chrome JSON: each export's file size, peak RSS and time.

Each export runs as its own ``kbdebug export`` process under ``/usr/bin/time -v``, so
its peak resident set is its own (the trace's index is opened from the cache in both,
after one warm-up open). Usage::

    python benchmarks/export_size.py TRACE [--out DIR] [--parquet]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def measure(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of ``command``, from GNU time's verbose report."""
    done = subprocess.run(
        ["/usr/bin/time", "-v", *command], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1])
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", done.stderr)[1]
    seconds = 0.0
    for part in wall.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--out", type=Path, help="where the exports go (default: a temp dir)")
    parser.add_argument("--parquet", action="store_true", help="measure --parquet DIR too")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kbdebug-export-size-"))
    out.mkdir(parents=True, exist_ok=True)
    kbdebug = [sys.executable, "-m", "kbdebug"]
    # Warm the index cache, so every export opens the trace the same way; the second
    # open is the baseline: what opening the trace alone costs.
    opener = "import sys; from kbdebug.replay import Replay; Replay.open(sys.argv[1])"
    open_seconds, open_rss = measure([sys.executable, "-c", opener, str(args.trace)])
    open_seconds, open_rss = measure([sys.executable, "-c", opener, str(args.trace)])
    rows = []
    for label, target, extra in (
        ("Chrome JSON", out / "trace.json", []),
        ("Perfetto protobuf", out / "trace.pftrace", []),
        ("Parquet tables", out / "parquet", ["--parquet"]),
    ):
        if label == "Parquet tables" and not args.parquet:
            continue
        if target.is_dir():
            shutil.rmtree(target)
        command = [*kbdebug, "export", str(args.trace), "--force"]
        command += [*extra, str(target)] if extra else ["-o", str(target)]
        seconds, rss = measure(command)
        files = [target] if target.is_file() else sorted(target.iterdir())
        size = sum(f.stat().st_size for f in files)
        rows.append((label, size, rss, seconds))
    print(f"trace: {args.trace} ({args.trace.stat().st_size:,} bytes)")
    print(f"{'export':<20} {'bytes':>16} {'peak RSS MiB':>13} {'wall s':>8}")
    print(f"{'(opening alone)':<20} {'':>16} {open_rss / 1024:>13,.0f} {open_seconds:>8.1f}")
    for label, size, rss, seconds in rows:
        print(f"{label:<20} {size:>16,} {rss / 1024:>13,.0f} {seconds:>8.1f}")
    json_size = rows[0][1]
    for label, size, _, _ in rows[1:]:
        print(f"{label}: {json_size / size:.1f}x smaller than the JSON")


if __name__ == "__main__":
    main()
