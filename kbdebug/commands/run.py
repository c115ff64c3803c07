"""`kbdebug run`: run a built-in scenario or your own launch in the emulator and write its trace."""

from __future__ import annotations

import argparse
import ast
import difflib
import functools
import inspect
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack

from emulator.config import HardwareConfig
from emulator.errors import ConfigError, DeadlockError, EmulatorError, KernelError
from emulator.recorder import NullRecorder
from emulator.scenarios import SCENARIOS, Scenario
from emulator.trace import wire
from emulator.trace.writer import TraceWriter
from kbdebug.commands import launch_file
from kbdebug.commands.hints import listed, run_hint, scenario_functions, syntax_error
from kbdebug.commands.run_status import RunStatus
from kbdebug.errors import UserError
from kbdebug.outputs import Output, status_lines

DESCRIPTION = """\
Run a kernel in the emulator and record its trace.

SCENARIO is a built-in name or path/to/file.py:function, where the function
takes keyword parameters (set with --set) and returns an
emulator.scenarios.Scenario.

The trace goes to OUT (default SCENARIO.kbt, FILE.FUNCTION.kbt for a file's
function) only once the run has ended: until then it is written to
OUT.partial-PID beside it. A run that ends in a kernel error or a deadlock is
still written to OUT (status error/deadlock in its footer); a launch refused
before it runs leaves OUT as it was. Ctrl+C or SIGTERM stops the run, ends the
trace with status "interrupted", keeps it as OUT.partial-PID, leaves OUT as
it was and exits 130; a killed run leaves OUT.partial-PID without a footer
(kbdebug reads it as truncated). An existing OUT is replaced only if it is a
kbdebug trace (or empty); --force replaces anything. A device or FIFO
(/dev/null, a named pipe) is written directly. -o - (or /dev/stdout) writes
the trace to stdout, a pipe or a file but not a terminal, and every status
line to stderr.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    names = ", ".join(SCENARIOS)
    p = sub.add_parser(
        "run",
        help="run a scenario in the emulator and write its trace",
        description=DESCRIPTION,
        epilog=f"built-in scenarios: {names}\n\n"
        "examples:\n"
        "  kbdebug run decode_prefetch --set n_tiles=256 -o decode.kbt --open\n"
        "  kbdebug run flawed_prefetch --set hbm_latency=800\n"
        "  kbdebug run my_kernels.py:launch --config hw.toml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", metavar="SCENARIO", help="built-in name or FILE.py:FUNCTION")
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a scenario parameter (e.g. n_tiles=64) or a hardware field (e.g. hbm_latency=800)",
    )
    p.add_argument("--config", metavar="HW.toml", help="hardware configuration file")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT.kbt",
        help="trace file (default SCENARIO.kbt, or FILE.FUNCTION.kbt); - for stdout",
    )
    p.add_argument(
        "--force", action="store_true", help="replace OUT even if it is not a kbdebug trace"
    )
    p.add_argument("--no-check", action="store_true", help="skip the numpy reference check")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.add_argument(
        "--open",
        action="store_true",
        help="open the trace in the app once it is written (a key there re-runs this command)",
    )
    p.add_argument(
        "--traceback", action="store_true", help="print the kernel's traceback if it raises"
    )


def run(args: argparse.Namespace) -> int:
    # -o - (or /dev/stdout): stdout carries the trace, so every status line goes to stderr.
    with status_lines(args.output):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    builder, name = _builder(args.scenario)
    scenario_params = _accepted(builder)
    hw_fields = set(HardwareConfig.__dataclass_fields__)
    params: dict[str, Any] = {}
    hw: dict[str, Any] = {}
    for setting in args.settings:
        key, value = _parse_setting(setting)
        if key in scenario_params:
            params[key] = _typed(builder, name, key, value)
        elif key in hw_fields:
            hw[key] = value
        else:
            known = ", ".join(sorted(scenario_params - {"config"}))
            raise UserError(
                f"--set {key}: not a parameter of {name} ({known}) nor a hardware field "
                "(kbdebug hw lists them)"
            )
    try:
        config = HardwareConfig.from_toml(args.config) if args.config else HardwareConfig()
        if hw:
            config = config.replace(**hw)
    except ConfigError as e:
        hint = (
            " (kbdebug hw lists them)"
            if "unknown hardware field" in str(e)
            else " (kbdebug hw lists the ranges)"
            if " must be <= " in str(e)
            else ""
        )
        raise UserError(f"{e}{hint}") from None
    if "config" in scenario_params:
        params["config"] = config

    # _builder's name is SCENARIO or FILE.FUNCTION: two launches of one file get two traces.
    # Checked before the inputs are built: a refused OUT costs no wait.
    out = Output(
        args.output or f"{name}.kbt",
        what="a kbdebug trace",
        ours=_is_trace,
        force=args.force,
        stdout=True,
        binary=True,
    )
    if args.open and out.stream:
        raise UserError(f"--open needs a trace file; {out.name} is a device or a pipe")
    show = not args.quiet and sys.stderr.isatty()
    status = RunStatus(enabled=show)
    try:
        status.phase("building inputs")
        started = time.perf_counter()
        scenario = _build(builder, name, params, scenario_params, hw, config, args.config)
        total = _estimate_events(builder, params) if show else None
        status.clear()
        print(f"setup:  inputs built in {time.perf_counter() - started:.2f} s", flush=True)
        writer = _writer(out)
        status.running(writer, total)
        failure, stopped, result, elapsed = _record(scenario, writer, out)
        status.clear()
        _report_written(out, writer, failure, stopped)
        if failure is not None:
            kind = "deadlock" if isinstance(failure, DeadlockError) else "error"
            print(f"status: {kind} after {elapsed:.2f} s")
            message = _failure_message(failure, args.traceback)
        else:
            assert result is not None
            _print_result(result, elapsed)
            message = None
            if scenario.check is not None and not args.no_check:
                status.phase("checking output against numpy")
                message, seconds = _check(scenario)
                status.clear()
                if message is None:
                    print(
                        f"check:  output matches the numpy reference (checked in {seconds:.2f} s)"
                    )
    finally:
        status.close()
    if args.open:
        from kbdebug.commands.replay import open_app

        open_app(out.target, rerun=_rerun_argv(args, out.target))
    elif not out.stream:
        print(f"next:   kbdebug {out.target}")
    if message is not None:
        raise UserError(message, status=1)
    return 0


def _build(builder, name, params, scenario_params, hw, config, config_file) -> Scenario:
    """The scenario of ``params``, with the hardware of ``config`` unless it sets its own."""
    try:
        scenario = builder(**params)
    except (TypeError, ValueError, EmulatorError) as e:
        raise UserError(f"{name}: {e}") from None
    if not isinstance(scenario, Scenario):
        raise UserError(f"{name} returned {type(scenario).__name__}, expected a Scenario")
    if "config" not in scenario_params and (hw or config_file):
        # A --config file stands for the hardware, not the launch: the scenario keeps its
        # mesh unless --set names it.
        mesh = {"mesh_rows": scenario.config.mesh_rows, "mesh_cols": scenario.config.mesh_cols}
        scenario.config = config.replace(**{**mesh, **hw})
    for key, value in hw.items():
        if getattr(scenario.config, key) != value:
            own = ", ".join(sorted(scenario_params - {"config"}))
            raise UserError(
                f"--set {key}={value}: {name} sets {key} to {getattr(scenario.config, key)} "
                f"itself; use its own parameters ({own})"
            )
    return scenario


def _writer(out: Output) -> TraceWriter:
    # Unbuffered: the writer buffers itself, and a killed run keeps what it wrote out.
    return TraceWriter(out.open("wb", buffering=0))


def _record(scenario: Scenario, writer: TraceWriter, out: Output):
    """Run ``scenario`` into ``writer``: (failure, stop signal, result, wall seconds)."""
    started = time.perf_counter()
    failure: EmulatorError | None = None
    stopped: KeyboardInterrupt | None = None
    result = None
    try:
        with _stopped_by_signals(writer):
            result = scenario.run(recorder=writer)
    except EmulatorError as e:
        failure = e
    except KeyboardInterrupt as e:
        stopped = e
    except Exception:
        if writer.write_error is None:
            out.discard()
            raise
        # A refused write surfaces as whatever the emulator made of it: write_error tells.
    finally:
        try:
            writer.close()
        except OSError:
            pass  # kept in writer.write_error
    return failure, stopped, result, time.perf_counter() - started


def _report_written(
    out: Output,
    writer: TraceWriter,
    failure: EmulatorError | None,
    stopped: KeyboardInterrupt | None,
) -> None:
    """Put the trace in place and say where it went, or raise UserError for a lost run."""
    if writer.write_error is not None:
        out.discard()
        reason = writer.write_error.strerror or writer.write_error
        raise UserError(f"cannot write {out.name}: {reason}", status=1)
    if failure is not None and writer.events == 0:
        # Refused before anything ran (a grid the mesh cannot hold, say): no trace to keep.
        out.discard()
        raise UserError(f"{failure} (nothing ran, no trace written)", status=1)
    if stopped is not None:
        raise UserError(_interrupted(out, writer, stopped), status=130)
    size = out.size()
    out.commit()
    if out.stream:
        print(f"trace:  {out.name} ({writer.events:,} events)")
    else:
        print(
            f"trace:  {out.target} ({size:,} bytes, {writer.events:,} events, "
            f"{size / max(writer.events, 1):.1f} bytes/event)"
        )


def _failure_message(failure: EmulatorError, traceback: bool) -> str:
    if isinstance(failure, KernelError) and failure.kernel_traceback and traceback:
        print(failure.kernel_traceback.rstrip(), file=sys.stderr)
    hint = (
        " (--traceback shows the kernel's traceback)"
        if (isinstance(failure, KernelError) and not traceback)
        else ""
    )
    return f"{failure}{hint}"


def _print_result(result, elapsed: float) -> None:
    print(f"end:    simulated {result.end_time:,} cycles in {elapsed:.2f} s of wall time")
    print(f"stall:  {result.metrics['stall_cycles']:,} cycles waiting in tl.wait")
    print(f"reads:  {result.metrics['dma_read_count']:,} DMA reads")
    sys.stdout.flush()  # on screen before the check's status line


def _check(scenario: Scenario) -> tuple[str | None, float]:
    """Run the scenario's numpy check: (None, or what failed; wall seconds it took)."""
    started = time.perf_counter()
    try:
        scenario.check(scenario.memory)
    except AssertionError as e:
        return f"output check failed: {e}", time.perf_counter() - started
    return None, time.perf_counter() - started


def _rerun_argv(args: argparse.Namespace, output: Path) -> list[str]:
    """The ``kbdebug`` argv that records this trace again (what --open hands the app)."""
    argv = ["run", args.scenario]
    for setting in args.settings:
        argv += ["--set", setting]
    if args.config:
        argv += ["--config", args.config]
    argv += ["-o", str(output)]
    flags = {
        "force": "--force",
        "no_check": "--no-check",
        "quiet": "-q",
        "traceback": "--traceback",
    }
    argv += [flag for name, flag in flags.items() if getattr(args, name)]
    return argv


def _is_trace(path: Path) -> bool:
    """Whether ``path`` starts with a kbt header: a trace kbdebug wrote, whole or cut short."""
    try:
        with open(path, "rb") as f:
            # The header is the first object; a bounded buffer keeps a big non-trace cheap.
            header = next(msgpack.Unpacker(f, max_buffer_size=1 << 20))
    except (OSError, ValueError, StopIteration, msgpack.UnpackException):
        return False
    return isinstance(header, dict) and header.get("format") == wire.FORMAT_NAME


def _interrupted(out: Output, writer: TraceWriter, stopped: KeyboardInterrupt) -> str:
    """The one line for a run stopped by a signal, saying where its trace went."""
    what = f"interrupted by {stopped}" if str(stopped) else "interrupted"
    if writer.events == 0:
        out.discard()
        return f"{what} before the run began (no trace written)"
    if out.stream:
        out.commit()
        return f"{what}; the trace written to {out.name} ends with status interrupted"
    partial = out.keep()
    # Kept apart, not renamed over OUT: a previous whole trace there is worth more than a cut one.
    return (
        f"{what}; partial trace ({writer.events:,} events, status interrupted) in {partial}; "
        f"{out.target} left as it was"
    )


@contextmanager
def _stopped_by_signals(writer: TraceWriter) -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt("SIGINT"/"SIGTERM") once, never mid-write.

    The run then ends its trace with status interrupted. A signal that lands while
    the writer moves bytes is retried 10 ms later (SIGALRM), since raising there
    could write a record twice or lose it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = {"raised": False, "signum": 0}

    def handler(signum: int, frame: object) -> None:
        if signum != signal.SIGALRM:
            state["signum"] = signum
        if state["raised"] or not state["signum"]:
            return  # already stopping: let the footer be written
        if writer.writing:
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            return
        state["raised"] = True
        raise KeyboardInterrupt(signal.Signals(state["signum"]).name)

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM):
        old = signal.getsignal(sig)
        if old is not signal.SIG_IGN:  # ignored by who started us (nohup, &): stays ignored
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, old in previous.items():
            signal.signal(sig, old)


def _builder(spec: str):
    """The scenario builder ``spec`` names and the name its trace takes; UserError if none."""
    if spec in SCENARIOS:
        return SCENARIOS[spec], spec
    if ":" not in spec:
        raise UserError(_unknown_scenario(spec))
    path_text, _, func = spec.rpartition(":")
    path = Path(path_text)
    # Read bounded, compiled before it runs: a file that is not one, or that Python
    # cannot compile, is one line with its line number.
    module = launch_file.load(path, f"kbdebug_user_{path.stem}")
    builder = getattr(module, func, None)
    if not callable(builder):
        functions = scenario_functions(path)
        there = f" (functions there: {listed(functions)})" if functions else ""
        raise UserError(f"{path} has no function {func!r}{there}")
    return _launched_from(builder, path.resolve()), path.stem + "." + func


def _launched_from(builder, path: Path):
    """``builder``, whose Scenarios say they come from ``path`` (FILE.py): their traces'
    source paths are then relative to its root, whatever the working directory (see
    Scenario.launch_file). Its signature is the builder's (``inspect`` follows the wrap)."""

    @functools.wraps(builder)
    def build(*args, **kwargs):
        scenario = builder(*args, **kwargs)
        if isinstance(scenario, Scenario) and scenario.launch_file is None:
            scenario.launch_file = str(path)
        return scenario

    return build


def _unknown_scenario(spec: str) -> str:
    """The one line for a SCENARIO that is neither built in nor FILE.py:FUNCTION."""
    path = Path(spec)
    if spec.endswith(".py") or path.is_file():
        if not path.is_file():
            return str(launch_file.problem(path) or f"{path}: no such file")
        if _is_trace(path):
            return f"{path} is a trace already: open it with kbdebug {path}"
        broken = syntax_error(path)
        if broken is not None:
            return f"{path}: does not parse ({broken}); fix it, then: kbdebug run {path}:FUNCTION"
        return f"{path}: which function builds the Scenario? {run_hint(path)}"
    close = difflib.get_close_matches(spec, SCENARIOS, n=1)
    guess = f"did you mean {close[0]}? " if close else ""
    return (
        f"unknown scenario {spec!r}: {guess}use one of {', '.join(SCENARIOS)} or FILE.py:FUNCTION"
    )


def _accepted(builder) -> set[str]:
    try:
        return set(inspect.signature(builder).parameters)
    except (TypeError, ValueError):
        return set()


def _parse_setting(setting: str) -> tuple[str, Any]:
    """``KEY=VALUE`` as (key, value): VALUE a Python literal, true/false, or else the text."""
    key, sep, text = setting.partition("=")
    if not sep or not key:
        raise UserError(f"--set {setting!r}: expected KEY=VALUE (e.g. --set n_tiles=64)")
    if text.lower() in ("true", "false"):
        return key, text.lower() == "true"
    try:
        return key, ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return key, text


#: What a value of a default's type is called in a message.
_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "text"}


def _typed(builder, name: str, key: str, value: Any) -> Any:
    """``value`` for scenario parameter ``key``, checked against the type of its default.

    An int where a float is expected becomes a float; a parameter without a
    default (or one of another type) takes the value as it is.
    """
    default = _default(builder, key)
    kind = type(default)
    if default is None or default is inspect.Parameter.empty or kind not in _TYPE_NAMES:
        return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is kind:
        return value
    raise UserError(
        f"--set {key}: {name}'s {key} takes {_TYPE_NAMES[kind]} (default {default!r}), "
        f"got {value!r}"
    )


class _CountingRecorder(NullRecorder):
    """Counts events and discards them."""

    def __init__(self) -> None:
        self.events = 0

    def emit(self, kind, time, pe, *fields) -> None:
        self.events += 1


def _estimate_events(builder, params: dict[str, Any]) -> int | None:
    """Events a scenario with ``n_tiles`` will emit, extrapolated from runs of 1 and 2 tiles."""
    n = params.get("n_tiles", _default(builder, "n_tiles"))
    if not isinstance(n, int) or n < 4:
        return None
    counts = []
    for tiles in (1, 2):
        counter = _CountingRecorder()
        try:
            builder(**{**params, "n_tiles": tiles}).run(recorder=counter)
        except Exception:  # an estimate only: the real run reports any problem
            return None
        counts.append(counter.events)
    return counts[0] + (counts[1] - counts[0]) * (n - 1)


def _default(builder, name: str) -> Any:
    try:
        parameter = inspect.signature(builder).parameters.get(name)
    except (TypeError, ValueError):
        return None
    return None if parameter is None else parameter.default
