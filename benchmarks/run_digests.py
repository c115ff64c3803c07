"""What digests cost a user's ``kbdebug run``: the whole command with digests on (the
default) over the same command with ``KBDEBUG_DIGESTS=0`` (what a format 1.4 writer
wrote), each a fresh process, interleaved.

Times are the CPU seconds (user + system) of each child process, so other work on a
shared machine slows neither side much; the ratio is printed as min and median over
``--repeat`` pairs, and as the ratio of the fastest times. The command is what a user
types: start-up, building the inputs, the run writing its trace to a file, and the
output check. ``benchmarks/emulator_speed.py --digests-only`` measures the emulator's
traced run alone, without the rest of the command.

    python benchmarks/run_digests.py [--scenario decode_prefetch] [--set n_tiles=4096]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile


def child_cpu(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + system) of one run of ``argv``, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="decode_prefetch")
    parser.add_argument("--set", action="append", default=None, metavar="KEY=VALUE")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    settings = args.set if args.set is not None else ["n_tiles=4096"]
    with tempfile.TemporaryDirectory(prefix="kbdebug-bench-") as folder:
        out = os.path.join(folder, "run.kbt")
        argv = [sys.executable, "-m", "kbdebug", "run", args.scenario, "-o", out, "--force", "-q"]
        for setting in settings:
            argv += ["--set", setting]
        on_env = {**os.environ, "KBDEBUG_DIGESTS": "1", "KBDEBUG_CACHE_DIR": folder}
        off_env = {**on_env, "KBDEBUG_DIGESTS": "0"}
        child_cpu(argv, on_env)  # warm the file cache and the byte-code
        on, off = [], []
        for _ in range(args.repeat):
            off.append(child_cpu(argv, off_env))
            on.append(child_cpu(argv, on_env))
    ratios = [a / b for a, b in zip(on, off, strict=True)]
    print(
        f"kbdebug run {args.scenario} {' '.join('--set ' + s for s in settings)}: "
        f"digests off {statistics.median(off):.3f} CPU s median, on {statistics.median(on):.3f}"
    )
    print(
        f"digests on / off (the whole command): min {min(ratios):.2f}x  "
        f"median {statistics.median(ratios):.2f}x  fastest/fastest {min(on) / min(off):.2f}x  "
        "(goal <= 1.10)"
    )
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
