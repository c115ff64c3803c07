"""`kbdebug run`: run a built-in scenario or your own launch in the emulator and write its trace."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from emulator.errors import DeadlockError, EmulatorError, KernelError
from emulator.scenarios import SCENARIOS, Scenario
from emulator.trace.writer import TraceWriter
from kbdebug.commands import run_values
from kbdebug.commands.run_status import RunStatus
from kbdebug.errors import UserError
from kbdebug.launch import perturb
from kbdebug.launch.check_report import CheckReport
from kbdebug.launch.errors import LaunchError, failure_text, python_hint
from kbdebug.launch.launcher import Launcher, is_trace, load
from kbdebug.launch.output_check import checked_verdict
from kbdebug.launch.settings import read_config, with_hardware
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
    perturb.add_seed(p)
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
    run_values.add_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.add_argument(
        "--open",
        action="store_true",
        help="open the trace in the app once it is written (a key there re-runs this command)",
    )
    p.add_argument(
        "--compare-with",
        metavar="OLD.kbt",
        help="once the trace is written, open the compare view of OLD.kbt (A) and it (B)",
    )
    p.add_argument(
        "--traceback", action="store_true", help="print the kernel's traceback if it raises"
    )


def run(args: argparse.Namespace) -> int:
    # -o - (or /dev/stdout): stdout carries the trace, so every status line goes to stderr.
    with status_lines(args.output):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    launcher = load(args.scenario)
    params, hw = launcher.split(launcher.settings(args.settings))
    hw.update(perturb.settings(args))
    config = with_hardware(read_config(args.config), hw)

    # Checked before the inputs are built: a refused OUT costs no wait.
    out = Output(
        args.output or f"{launcher.name}.kbt",
        what="a kbdebug trace",
        ours=is_trace,
        force=args.force,
        stdout=True,
        binary=True,
    )
    values = run_values.ValuesOutput(args, out)  # refused, like OUT, before the run
    folder = out.target.parent
    if not out.stream and not folder.is_dir():
        why = f"{folder} is not a folder" if folder.exists() else f"there is no folder {folder}"
        raise UserError(f"cannot write {out.name}: {why} (nothing was run)")
    if (args.open or args.compare_with) and out.stream:
        flag = "--open" if args.open else "--compare-with"
        raise UserError(f"{flag} needs a trace file; {out.name} is a device or a pipe")
    if args.compare_with:
        from kbdebug.commands.compare import open_run

        if Path(args.compare_with).resolve() == out.target.resolve():
            raise UserError(
                f"--compare-with {args.compare_with} is the trace this run writes over: "
                "give the new run another -o, or compare with a copy"
            )
        baseline = open_run(args.compare_with)  # a bad OLD is refused before the run
    show = not args.quiet and sys.stderr.isatty()
    found: CheckReport | None = None
    status = RunStatus(enabled=show)
    try:
        status.phase("building inputs")
        started = time.perf_counter()
        try:
            scenario = launcher.build(params, hw, config, config_given=args.config is not None)
        except LaunchError as e:
            status.clear()
            if args.traceback:
                print(e.details.rstrip(), file=sys.stderr)
            raise
        status.clear()
        print(f"setup:  inputs built in {time.perf_counter() - started:.2f} s", flush=True)
        writer = _writer(out)
        status.running(writer)
        failure, stopped, result, elapsed = _record(launcher, scenario, writer, out, values)
        # The check runs before the footer is written, which carries its verdict.
        checked: _Checked | None = None
        check_stopped: KeyboardInterrupt | None = None
        finished = failure is None and stopped is None and writer.held
        if finished and scenario.check is not None and not args.no_check:
            try:
                checked = _check_output(scenario, out, status, args.traceback)
            except KeyboardInterrupt as e:
                check_stopped = e  # the trace is kept, without a verdict
        _finish(writer, checked.verdict if checked is not None else None)
        status.clear()
        _report_written(out, writer, failure, stopped)
        values.save(out.target)
        if check_stopped is not None:
            raise check_stopped
        if failure is not None:
            kind = "deadlock" if isinstance(failure, DeadlockError) else "error"
            print(f"status: {kind} after {elapsed:.2f} s")
            message = _failure_message(failure, args.traceback)
        else:
            assert result is not None
            _print_result(result, elapsed)
            message = None
            if checked is not None:
                message, found = checked.message, checked.found
                if message is None:
                    print(
                        "check:  output matches the numpy reference "
                        f"(checked in {checked.seconds:.2f} s)"
                    )
                elif found is not None:
                    print("\n".join(found.lines), flush=True)
    finally:
        status.close()
    if args.compare_with:
        from kbdebug.commands.compare import open_compare, open_run

        open_compare(baseline, open_run(str(out.target)))
    elif args.open:
        from kbdebug.commands.replay import make_app

        # Opened at the wrong block's store, however large the trace (read before the
        # screen or in the background), its status saying so.
        open_at = found.open_at if found is not None else None
        app = make_app(out.target, rerun=_rerun_argv(args, out.target), open_at=open_at)
        app.run()
        if app.load_error is not None:
            raise UserError(app.load_error)
    elif not out.stream:
        there = ", or run with --open to open it at that store" if found and found.position else ""
        print(f"next:   kbdebug {out.target}{there}")
    if message is not None:
        raise UserError(message, status=1)
    return 0


def _writer(out: Output) -> TraceWriter:
    # Unbuffered: the writer buffers itself, and a killed run keeps what it wrote out.
    # The footer is held until the output check's verdict is known (_finish).
    return TraceWriter(out.open("wb", buffering=0), hold_footer=True)


def _finish(writer: TraceWriter, verdict: dict | None) -> None:
    """Write the held footer, with the check's verdict if there is one, and close."""
    try:
        writer.finish(verdict)
        writer.close()
    except OSError:
        pass  # kept in writer.write_error


@dataclass(frozen=True)
class _Checked:
    """The output check of a finished run: what failed (None: it passed), the wrong
    block's report, the seconds it took, and the verdict the footer carries (None when
    the check itself raised: no verdict on the output)."""

    message: str | None
    found: CheckReport | None
    seconds: float
    verdict: dict | None


def _check_output(scenario: Scenario, out: Output, status: RunStatus, traceback: bool) -> _Checked:
    """Run the numpy check and, when it fails, find the first wrong block in the trace
    written so far (all its events; the footer waits for this verdict)."""
    status.phase("checking output against numpy")
    trace = None if out.stream else Path(out.path)
    message, seconds, found, verdict = checked_verdict(scenario, trace, traceback)
    status.clear()
    return _Checked(message, found, seconds, verdict)


def _record(
    launcher: Launcher,
    scenario: Scenario,
    writer: TraceWriter,
    out: Output,
    values: run_values.ValuesOutput,
):
    """Run ``scenario`` into ``writer``: (failure, stop signal, result, wall seconds)."""
    started = time.perf_counter()
    failure: EmulatorError | None = None
    stopped: KeyboardInterrupt | None = None
    result = None
    try:
        with _stopped_by_signals(writer), launcher.importing():
            result = scenario.run(recorder=writer, values=values.keeper)
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
            if not writer.held:  # a held footer waits for the check's verdict (_finish)
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
        # Refused before anything ran (a grid the mesh cannot hold, say): bad input, no
        # trace to keep.
        out.discard()
        raise UserError(f"{failure} (nothing ran, no trace written)", status=2)
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
    # Python's "Did you mean: 'load_async'?" for a misspelt tl call, which the message
    # (the exception's str) leaves out.
    python = python_hint(failure.__cause__) if failure.__cause__ is not None else ""
    return f"{failure_text(failure)}{'; ' + python if python else ''}{hint}"


def _print_result(result, elapsed: float) -> None:
    print(f"end:    simulated {result.end_time:,} cycles in {elapsed:.2f} s of wall time")
    pes = len(result.pe_end_times)
    summed = f", summed over {pes} PEs" if pes > 1 else ""
    print(f"stall:  {result.metrics['stall_cycles']:,} cycles waiting in tl.wait{summed}")
    print(f"reads:  {result.metrics['dma_read_count']:,} DMA reads")
    sys.stdout.flush()  # on screen before the check's status line


def _rerun_argv(args: argparse.Namespace, output: Path) -> list[str]:
    """The ``kbdebug`` argv that records this trace again (what --open hands the app)."""
    argv = ["run", args.scenario]
    for setting in args.settings:
        argv += ["--set", setting]
    if args.config:
        argv += ["--config", args.config]
    if args.perturb is not None:
        argv += perturb.argv(args.perturb, perturb.bounds(args))
    argv += run_values.argv(args)
    argv += ["-o", str(output)]
    flags = {
        "force": "--force",
        "no_check": "--no-check",
        "quiet": "-q",
        "traceback": "--traceback",
    }
    argv += [flag for name, flag in flags.items() if getattr(args, name)]
    return argv


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
