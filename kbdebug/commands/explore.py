"""`kbdebug explore`: run a kernel under many seeded timing perturbations; list runs that differ."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from emulator.config import MAX_PERTURB_SEED, HardwareConfig
from emulator.scenarios import SCENARIOS
from kbdebug.errors import UserError
from kbdebug.launch import perturb
from kbdebug.launch.launcher import load
from kbdebug.launch.settings import read_config, with_hardware

#: Runs an explore makes at most (each is a whole run of the kernel).
MAX_RUNS = 100_000

DESCRIPTION = """\
Run SCENARIO once at its nominal timing, then --runs N times more with the
timing of every DMA transfer and IPCQ message perturbed from a seed (seeds
S, S+1, ..., S+N-1; --seed S, default 1): each latency drawn within
+/- --perturb-latency of its own, each DMA command granted up to
--perturb-delay HBM latencies late, each DMA read channel's grant going to one
of its --perturb-grant oldest waiting commands. An IPCQ link and a DMA write
channel stay FIFOs (one write channel lands its stores in order). No one
setting shows every race: try longer latencies (--perturb-latency 3) and
longer or no delays (--perturb-delay 3, 0) too.

Each run's output is checked against the numpy reference as `kbdebug run`
checks it, and the runs whose result differs from the nominal run's are
listed: another outcome (wrong output, deadlock, kernel error) or other bytes
left in HBM. Each comes with the command that records it again byte for byte
(`kbdebug run ... --perturb SEED`) and the hazard that explains it when the
hazard check finds one. Ending at another cycle is timing, not a result: it is
counted apart and never makes a run differ.

The first differing seed is run again here, to say which HBM bytes differ and
which store wrote them; with --open its trace is kept (SCENARIO.perturb-SEED.kbt
in the working directory, never replacing a file: -2, -3, ... when taken) and
opened in the app.

Runs go to the sweep's worker processes (-j at once; default: the number of
cores) or to Ray with --cluster, and come back as rows, never traces: the rows
are the same whatever ran them. Ctrl+C stops the runs still going and reports
those that finished.

If the nominal run itself fails (wrong output, deadlock, kernel error), the
report says so on its first line and the exit status is 1, whatever the other
runs do: they are still listed where they differ from that failing run.

exit status: 0 the nominal run is right and every run gave its result; 1 some
run differs, or the nominal run failed; 2 bad input (nothing ran); 130
interrupted.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explore",
        help="run a kernel under seeded timing perturbations; list the runs that differ",
        description=DESCRIPTION,
        epilog="examples:\n"
        "  kbdebug explore my_kernels.py:launch --runs 64\n"
        "  kbdebug explore my_kernels.py:launch --runs 256 --seed 1000 --perturb-latency 0.9 "
        "--open\n"
        "  kbdebug explore flawed_prefetch --runs 16 --set n_tiles=32 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", metavar="SCENARIO", help="built-in name or FILE.py:FUNCTION")
    p.add_argument("--runs", type=int, default=64, metavar="N", help="perturbed runs (default 64)")
    p.add_argument(
        "--seed", type=int, default=1, metavar="S", help="the first run's seed (default 1)"
    )
    perturb.add_bounds(p)
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a scenario parameter or hardware field, the same for every run",
    )
    p.add_argument("--config", metavar="HW.toml", help="hardware configuration file")
    p.add_argument("-j", "--jobs", type=int, metavar="N", help="runs at once (default: cores)")
    p.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run on Ray: ray://HOST:PORT, auto, or local (a Ray instance here)",
    )
    p.add_argument(
        "--open",
        action="store_true",
        help="keep the first differing run's trace and open it in the app",
    )
    p.add_argument("--json", action="store_true", help="print JSON (schema kbdebug.explore/1)")
    p.add_argument("--no-check", action="store_true", help="skip the numpy reference check")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    # The runs' machinery loads here, not with the CLI: `kbdebug TRACE` never needs it.
    from kbdebug.sweep.backends import backend_for
    from kbdebug.sweep.explore import Exploration, differences
    from kbdebug.sweep.explore_first import first_failure
    from kbdebug.sweep.point import REFUSED, PointTask, run_point
    from kbdebug.sweep.progress import Progress
    from kbdebug.sweep.stop import StopRequest

    if args.open and args.json:
        raise UserError("--open opens the app: use it without --json")
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    if jobs < 1:
        raise UserError(f"-j {jobs}: expected at least 1")
    seeds = _seeds(args.seed, args.runs)
    launcher = load(args.scenario)
    params, hw = launcher.split(launcher.settings(args.settings))
    for key in hw:
        if key in HardwareConfig.PERTURB_FIELDS:
            raise UserError(
                f"--set {key}: explore sets the perturbation itself (--seed, "
                "--perturb-latency, --perturb-grant)"
            )
    base = read_config(args.config)
    with_hardware(base, hw)  # refused here, before anything runs
    defaults = HardwareConfig()
    bounds = {name: getattr(defaults, name) for _, _, name in perturb.BOUNDS}
    bounds.update(perturb.bounds(args))

    # Workers elsewhere (Ray) do not share our working directory: give them absolute paths.
    spec = args.scenario
    if ":" in spec and spec not in SCENARIOS:
        path_text, _, function = spec.rpartition(":")
        spec = f"{Path(path_text).resolve()}:{function}"
    base_config = None if args.config is None else tuple(base.to_dict().items())

    def task(seed: int) -> PointTask:
        """The run of ``seed`` (0: the nominal run), as a sweep point."""
        return PointTask(
            index=seed,
            scenario=spec,
            params=tuple(params.items()),
            hw=tuple(({**hw, "perturb_seed": seed, **bounds} if seed else hw).items()),
            base_config=base_config,
            check=not args.no_check,
            explore=True,
        )

    command = ["kbdebug", "run", args.scenario]
    for setting in args.settings:
        command += ["--set", setting]
    if args.config:
        command += ["--config", args.config]
    if args.no_check:
        command.append("--no-check")

    progress = Progress(
        len(seeds) + 1,
        enabled=not args.quiet and sys.stderr.isatty(),
        label="explore",
        unit="runs",
        failures="differ",
    )
    # Ctrl+C during the nominal run stops at once (nothing to report yet); during the
    # others it stops the runs still going and reports those that finished.
    try:
        progress.draw(force=True)
        with _sigterm_interrupts():
            nominal = run_point(task(0))
    finally:
        progress.clear()
    if nominal.outcome == REFUSED:
        raise UserError(nominal.message or "the launch was refused")
    progress.row(True)
    exploration = Exploration(launcher.name, command, seeds, bounds, nominal)

    def on_row(row) -> None:
        exploration.rows[row.index] = row
        progress.row(not differences(nominal, row))

    try:
        with StopRequest().installed() as stop:
            backend = backend_for(args.cluster, jobs)
            backend.run([task(seed) for seed in seeds], on_row, progress.tick, stop)
    except KeyboardInterrupt:
        exploration.interrupted = True
    finally:
        progress.clear()

    differing = exploration.differing()
    if differing and not exploration.interrupted:
        keep = _kept_path(launcher.name, differing[0][0]) if args.open else None
        exploration.first = first_failure(task(0), task(differing[0][0]), keep)
    if args.json:
        sys.stdout.write(json.dumps(exploration.to_json(), indent=2) + "\n")
        if exploration.nominal_failed:
            print(f"kbdebug explore: {exploration.nominal_failure()}", file=sys.stderr)
    else:
        sys.stdout.write(exploration.text())
        if args.open and not differing:
            print("--open: no run differs from the nominal, no trace to open")
    sys.stdout.flush()
    if exploration.interrupted:
        raise UserError(
            f"interrupted: {len(exploration.rows)} of {len(seeds)} runs finished "
            "(reported above); the others were cancelled",
            status=130,
        )
    if args.open and exploration.first is not None and exploration.first.trace is not None:
        from kbdebug.commands.replay import open_app

        seed = exploration.first.seed
        rerun = [*command[1:], *perturb.argv(seed, bounds), "-o", exploration.first.trace]
        open_app(Path(exploration.first.trace), rerun=rerun)
    # A nominal run that fails is a failure whatever the perturbed runs do: every one of
    # them may fail the same way and so "differ" from it in none.
    return 1 if differing or exploration.nominal_failed else 0


def _seeds(first: int, runs: int) -> list[int]:
    if not 1 <= runs <= MAX_RUNS:
        raise UserError(f"--runs {runs}: expected 1 to {MAX_RUNS:,}")
    if first < 1:
        raise UserError(f"--seed {first}: expected at least 1 (seed 0 is the nominal run)")
    if first + runs - 1 > MAX_PERTURB_SEED:
        raise UserError(
            f"--seed {first} --runs {runs}: the seeds would pass {MAX_PERTURB_SEED:,}, "
            "the largest perturb_seed"
        )
    return list(range(first, first + runs))


def _kept_path(name: str, seed: int) -> Path:
    """``NAME.perturb-SEED.kbt`` in the working directory, or with -2, -3, ... when taken."""
    stem = f"{name}.perturb-{seed}"
    path = Path(f"{stem}.kbt")
    n = 1
    while path.exists() or path.is_symlink():
        n += 1
        path = Path(f"{stem}-{n}.kbt")
    return path


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, as Ctrl+C does (the run removes its trace, the
    command says it was interrupted and exits 130), unless whoever started us ignores it."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
