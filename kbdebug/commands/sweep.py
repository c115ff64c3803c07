"""`kbdebug sweep`: run a scenario over a grid of parameters and hardware, one worker per point."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from emulator.scenarios import SCENARIOS
from kbdebug.errors import UserError
from kbdebug.launch.launcher import load
from kbdebug.launch.settings import parse_value, read_config, with_hardware
from kbdebug.safe_text import escape
from kbdebug.sweep.grid import Axis, Point, parse_axis, points, trace_name
from kbdebug.sweep.point import OK, PointTask
from kbdebug.sweep.progress import Progress
from kbdebug.sweep.results import TOLERANCE, Results
from kbdebug.sweep.stop import StopRequest

DESCRIPTION = f"""\
Run SCENARIO once per point of a grid and print one row per point: end cycle,
critical-path bound and efficiency, stall cycles, DMA reads, the findings with
their estimated savings, and the outcome (ok, kernel error, deadlock, ...).

Each --grid KEY=V1,V2,... (or KEY=A..B for the integers A to B) ranges over a
scenario parameter (depth, tile, n_tiles, ...) or a hardware field
(hbm_latency, hbm_bytes_per_cycle, dma_read_channels, ...); the points are
every combination, the first --grid varying slowest. --set and --config apply
to every point, as in `kbdebug run`.

The best point (smallest end cycle) is marked *, and, when depth is swept, the
smallest depth within {TOLERANCE:.0%} of the best end cycle at the same other
parameters is marked d: the depth the pipeline needs there.

Points run in worker processes (-j at once; default: the number of cores),
each worker replaced after 16 points so its memory stays bounded; or as Ray
tasks with --cluster ray://HOST:PORT, auto (the cluster this machine is part
of) or local (a Ray instance started here with -j CPUs). Ray is an optional
extra, pip install 'kbdebug[cluster]'; every Ray node needs kbdebug, and a
FILE.py or --traces DIR at the same path. The rows are the same whatever ran
them. A point that fails is a row and the sweep goes on; Ctrl+C stops the
points still running and prints those that finished (exit 130). Workers
return rows, never traces: a point's trace is deleted once read, or kept with
--traces DIR under a name that says its parameters
(SCENARIO.depth=2.hbm_latency=300.kbt); an existing file there is never
replaced without --force.

exit status: 0 at least one point ran ok; 1 none did; 2 bad input (nothing
ran); 130 interrupted.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a scenario over a grid of parameters and hardware, in parallel",
        description=DESCRIPTION,
        epilog="examples:\n"
        "  kbdebug sweep decode_prefetch --grid depth=1..4 --grid hbm_latency=300,500,800\n"
        "  kbdebug sweep decode_prefetch --grid depth=1,2,4 --grid tile=32,64 --set n_tiles=256 "
        "--csv > sweep.csv\n"
        "  kbdebug sweep my_kernels.py:launch --grid block=64,128 --cluster ray://head:10001\n"
        "  kbdebug sweep decode_prefetch --grid depth=1..6 --plot",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", metavar="SCENARIO", help="built-in name or FILE.py:FUNCTION")
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a swept scenario parameter or hardware field, with its values (or KEY=A..B)",
    )
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a scenario parameter or hardware field, the same for every point",
    )
    p.add_argument("--config", metavar="HW.toml", help="hardware configuration file")
    p.add_argument(
        "-j", "--jobs", type=int, metavar="N", help="points run at once (default: cores)"
    )
    p.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run the points on Ray: ray://HOST:PORT, auto, or local (a Ray instance here)",
    )
    p.add_argument("--traces", metavar="DIR", help="keep every point's trace in DIR")
    p.add_argument("--force", action="store_true", help="replace existing files in --traces DIR")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print JSON (schema kbdebug.sweep/1)")
    form.add_argument("--csv", action="store_true", help="print CSV, one line per point")
    p.add_argument(
        "--plot",
        nargs="?",
        const="end",
        choices=("end", "efficiency"),
        help="after the table, plot end cycle (or efficiency) against the first --grid "
        "parameter, one series per value of the others",
    )
    p.add_argument("--no-check", action="store_true", help="skip the numpy reference check")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    if args.plot and (args.json or args.csv):
        raise UserError("--plot draws on the terminal: use it without --json or --csv")
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    if jobs < 1:
        raise UserError(f"-j {jobs}: expected at least 1")
    launcher = load(args.scenario)
    if not args.grid:
        raise UserError("nothing to sweep: give at least one --grid KEY=V1,V2,...")
    axes = [parse_axis(text, parse_value) for text in args.grid]
    for i, axis in enumerate(axes):
        if launcher.is_parameter("--grid", axis.key):
            typed = tuple(launcher.typed("--grid", axis.key, v) for v in axis.values)
            axes[i] = Axis(axis.key, typed)
    swept = [a.key for a in axes]
    settings = launcher.settings(args.settings)
    for key in settings:
        if key in swept:
            raise UserError(f"--set {key}: also swept by --grid {key}; give it once")
    # Every hardware value is refused here, before any point runs, as the point would.
    base = read_config(args.config)
    config = with_hardware(base, launcher.split(settings)[1])
    for axis in axes:
        if not launcher.is_parameter("--grid", axis.key):
            for value in axis.values:
                with_hardware(config, {axis.key: value}, lambda key: "--grid")
    grid = points(axes)
    directory = _traces_dir(args.traces) if args.traces else None
    names = _trace_paths(directory, launcher.name, grid, args.force) if directory else {}

    # Workers elsewhere (Ray) do not share our working directory: give them absolute paths.
    spec = args.scenario
    if ":" in spec and spec not in SCENARIOS:
        path_text, _, func = spec.rpartition(":")
        spec = f"{Path(path_text).resolve()}:{func}"
    base_config = None if args.config is None else tuple(base.to_dict().items())
    tasks = []
    for point in grid:
        params, hw = launcher.split({**settings, **dict(point.params)})
        tasks.append(
            PointTask(
                index=point.index,
                scenario=spec,
                params=tuple(params.items()),
                hw=tuple(hw.items()),
                base_config=base_config,
                trace_path=names.get(point.index),
                force=args.force,
                check=not args.no_check,
                swept=tuple(swept),
            )
        )
    from kbdebug.sweep.backends import backend_for  # the pools load only when a sweep runs

    backend = backend_for(args.cluster, jobs)
    results = Results(launcher.name, axes, grid, settings=settings)
    progress = Progress(len(tasks), enabled=not args.quiet and sys.stderr.isatty())

    def on_row(row) -> None:
        results.add(row)
        progress.row(row.outcome == OK)

    try:
        with StopRequest().installed() as stop:
            backend.run(tasks, on_row, progress.tick, stop)
    except KeyboardInterrupt:
        results.interrupted = True
    finally:
        progress.clear()

    if args.json:
        sys.stdout.write(results.json_text())
    elif args.csv:
        sys.stdout.write(results.csv_text())
    else:
        sys.stdout.write(results.table())
        if directory is not None:
            kept = sum(1 for _, r in results.finished() if r.trace)
            print(f"traces: {kept} kept in {escape(str(directory), 300)}")
        if args.plot:
            width = min(shutil.get_terminal_size().columns, 120)
            sys.stdout.write("\n")
            sys.stdout.write(_plot(results, axes[0].key, args.plot, width, sys.stdout.isatty()))
    sys.stdout.flush()
    if results.interrupted:
        raise UserError(
            f"interrupted: {len(results.rows)} of {len(grid)} points finished "
            "(listed above); the others were cancelled",
            status=130,
        )
    return 0 if results.best() is not None else 1


def _traces_dir(text: str) -> Path:
    directory = Path(text)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"--traces {escape(text, 300)}: exists and is not a directory") from None
    except OSError as e:
        raise UserError(f"--traces {escape(text, 300)}: {e.strerror or e}") from None
    return directory


def _trace_paths(directory: Path, name: str, grid: list[Point], force: bool) -> dict[int, str]:
    """Each point's trace path; refuses (before anything runs) to replace a file."""
    directory = directory.resolve()
    paths = {p.index: str(directory / trace_name(name, p)) for p in grid}
    seen: dict[str, int] = {}
    for index, path in paths.items():
        if path in seen:
            raise UserError(
                f"--traces: points {seen[path]} and {index} would share the file name "
                f"{escape(Path(path).name, 300)}"
            )
        seen[path] = index
    if not force:
        taken = [p for p in paths.values() if os.path.exists(p) and os.path.getsize(p) > 0]
        if taken:
            more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
            raise UserError(
                f"{escape(taken[0], 300)} exists{more}; use --force to overwrite, or another "
                "--traces DIR"
            )
    return paths


def _plot(results: Results, x_key: str, metric: str, width: int, color: bool) -> str:
    from kbdebug.sweep.plot import render  # plotext loads only when a plot is asked for

    return render(results, x_key, metric, width=width, color=color)
