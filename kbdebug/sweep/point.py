"""One point of a sweep, run where a worker is: build, record, analyse, return one small Row.

This is the only code a worker process runs. It returns a :class:`Row` of plain
numbers and strings; the trace stays on the worker's disk (deleted, or kept
under ``--traces DIR``) and never travels back to the parent. A point that is
cancelled removes its partial trace itself; one killed first (SIGKILL after the
grace, a crash) leaves it under a name that says whose it was
(``partial_traces``), for the process that outlives it to remove.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from emulator.config import HardwareConfig
from emulator.errors import ConfigError, DeadlockError, EmulatorError, KernelError
from emulator.scenarios import Scenario
from emulator.trace.writer import TraceWriter
from kbdebug.analysis import Analysis
from kbdebug.errors import UserError
from kbdebug.launch.check_failure import check_failure
from kbdebug.launch.errors import failure_text
from kbdebug.launch.launcher import Launcher, load
from kbdebug.launch.settings import with_hardware
from kbdebug.outputs import Output
from kbdebug.replay import Replay

#: Outcomes of a point; only "ok" points compete for the best.
OK = "ok"
KERNEL_ERROR = "kernel error"
DEADLOCK = "deadlock"
CHECK_FAILED = "check failed"
REFUSED = "refused"  # the launch was refused before it ran (a bad parameter value)
ERROR = "error"  # anything else the point raised (an emulator or analysis bug)
CRASHED = "crashed"  # the worker died (killed, out of memory) without a row
OUTCOMES = (OK, KERNEL_ERROR, DEADLOCK, CHECK_FAILED, REFUSED, ERROR, CRASHED)
#: A point's error message is cut to this many characters (it comes from kernels).
MESSAGE_CHARS = 500


class Cancelled(BaseException):
    """The sweep was cancelled while this point ran (SIGTERM in a worker)."""


@dataclass(frozen=True)
class PointTask:
    """Everything a worker needs for one point: plain data, cheap to pickle."""

    index: int
    #: The scenario as the user gave it: a built-in name or FILE.py:FUNCTION.
    scenario: str
    #: Scenario parameters (--set and this point's grid values for them).
    params: tuple[tuple[str, Any], ...]
    #: HardwareConfig fields set by --set or this point's grid values.
    hw: tuple[tuple[str, Any], ...]
    #: The --config file's fields (None: no --config), read once by the parent.
    base_config: tuple[tuple[str, Any], ...] | None
    #: Where to keep the trace (None: a temporary file, deleted once analysed).
    trace_path: str | None = None
    force: bool = False
    check: bool = True
    #: Keys given by --grid (the others by --set): what a refusal names.
    swept: tuple[str, ...] = ()
    #: The directory of the temporary trace (None: the system's); the local backend
    #: gives one of its own and removes it, whatever a killed worker left there.
    scratch_dir: str | None = None
    #: A run of ``kbdebug explore``: the row carries the digest of the HBM the run left
    #: and what each hazard read, and no findings (explore compares results, not speed).
    explore: bool = False


@dataclass(frozen=True)
class Row:
    """What one point did; identical whatever worker or backend ran it."""

    index: int
    outcome: str
    #: One line saying what went wrong (None for ok); text from a kernel: escape to show.
    message: str | None = None
    end_cycle: int | None = None
    #: Critical-path lower bound of the run: the largest PE start + bound.
    bound: int | None = None
    #: bound / end_cycle.
    efficiency: float | None = None
    stall_cycles: int | None = None
    dma_read_count: int | None = None
    #: (finding id, estimated saving in cycles), largest saving first; None when the
    #: diagnosis failed on this trace (``message`` says how), the other numbers standing.
    findings: tuple[tuple[str, int], ...] | None = ()
    #: The kept trace (--traces), else None.
    trace: str | None = None
    #: An explore run's digest of the HBM bytes the launch allocated, as they ended.
    output_digest: str | None = None
    #: An explore run's hazards as (hazard id, label, what its access read or wrote in
    #: this run); None for a sweep's row.
    hazards: tuple[tuple[str, str, str], ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.findings is not None:
            out["findings"] = [{"id": i, "saving": s} for i, s in self.findings]
        for explore_only in ("output_digest", "hazards"):
            if out[explore_only] is None:
                del out[explore_only]  # a sweep's rows read as they did before explore
        return out


def run_point(task: PointTask, finishing: Callable[[], None] | None = None) -> Row:
    """Run one point and return its Row; any failure becomes the Row's outcome.

    Only :class:`Cancelled` (the sweep being stopped) escapes, after removing
    whatever partial trace the point had written. ``finishing`` is called once
    the row is known, before its trace is put in place: a worker then stops
    taking cancellation, so a kept trace always has its row.
    """
    try:
        return _run(task, finishing)
    except (Cancelled, KeyboardInterrupt):
        raise
    except UserError as e:
        return Row(task.index, REFUSED, _one_line(str(e)))
    except Exception as e:  # one point's bug must not stop the sweep: it is its row
        return Row(task.index, ERROR, _one_line(f"{type(e).__name__}: {e}"))


def build(task: PointTask) -> tuple[Launcher, Scenario]:
    """The point's launcher and launch, its values applied as ``kbdebug run`` applies them.

    Raises UserError when the launch is refused (a bad value, a hardware field the
    scenario sets itself).
    """
    launcher = load(task.scenario)
    params, hw = dict(task.params), dict(task.hw)

    def option_of(key: str) -> str:
        return "--grid" if key in task.swept else "--set"

    try:
        base = (
            HardwareConfig.from_dict(dict(task.base_config), source="--config")
            if task.base_config is not None
            else HardwareConfig()
        )
    except ConfigError as e:
        raise UserError(str(e)) from None
    config = with_hardware(base, hw, option_of)
    scenario = launcher.build(
        params, hw, config, config_given=task.base_config is not None, option_of=option_of
    )
    return launcher, scenario


def partial_traces(task: PointTask, pid: int) -> list[Path]:
    """The partial traces the worker ``pid`` may have left of ``task`` if it was killed.

    Kept traces are written as Output writes them, to ``OUT.partial-PID`` (or
    ``OUT.partial-PID-N``) beside OUT until the point is done.
    """
    if task.trace_path is None:
        return []
    target = Path(os.path.realpath(task.trace_path))
    pattern = re.compile(re.escape(f"{target.name}.partial-{pid}") + r"(-\d+)?")
    try:
        names = os.listdir(target.parent)
    except OSError:
        return []
    return [target.parent / name for name in names if pattern.fullmatch(name)]


def _run(task: PointTask, finishing: Callable[[], None] | None) -> Row:
    launcher, scenario = build(task)
    out: Output | None = None
    path: str | None = None
    try:
        if task.trace_path is not None:
            # Never replaces a file that was there (the parent checked; checked again on commit).
            out = Output(
                task.trace_path,
                what="a file this sweep wrote",
                ours=lambda _: False,
                force=task.force,
            )
            handle = out.open("wb", buffering=0)
            path = str(out.path)
        else:
            if task.scratch_dir is not None:
                os.makedirs(task.scratch_dir, exist_ok=True)  # a Ray worker on another machine
            fd, path = tempfile.mkstemp(
                prefix="kbdebug-sweep-", suffix=".kbt", dir=task.scratch_dir
            )
            handle = os.fdopen(fd, "wb", buffering=0)
        writer = TraceWriter(handle)
        outcome, message = OK, None
        try:
            with launcher.importing():
                # A point's own trace is read for its row, then removed: the digests of
                # its tensors (a fifth of the run on decode) only in a trace kept.
                scenario.run(recorder=writer, digests=None if out is not None else False)
        except DeadlockError as e:
            outcome, message = DEADLOCK, failure_text(e)
        except KernelError as e:
            outcome, message = KERNEL_ERROR, str(e)
        except EmulatorError as e:
            outcome, message = ERROR, str(e)
        except Exception:
            if writer.write_error is None:
                raise
            # A refused write surfaces as whatever the emulator made of it: write_error tells.
        finally:
            writer.close()
            if out is None:
                handle.close()  # an Output's file is closed by its commit (after an fsync)
        if writer.write_error is not None:
            reason = writer.write_error.strerror or writer.write_error
            return Row(task.index, ERROR, _one_line(f"cannot write its trace: {reason}"))
        if outcome != OK and writer.events == 0:
            return Row(task.index, REFUSED, _one_line(f"{message} (nothing ran)"))
        row = _analyse(task.index, path, outcome, message, findings=not task.explore)
        if row.outcome == OK and task.check and scenario.check is not None:
            try:
                scenario.check(scenario.memory)
            except AssertionError as e:
                row = replace(row, outcome=CHECK_FAILED, message=_one_line(check_failure(e)[0]))
        if task.explore:
            row = replace(row, output_digest=memory_digest(scenario.memory))
        if finishing is not None:
            finishing()
        if out is not None:
            out.commit()
            row = replace(row, trace=str(out.target))
            out = None
        return row
    finally:
        if out is not None:
            out.discard()
        elif task.trace_path is None and path is not None:
            os.unlink(path)


def memory_digest(memory: Any) -> str:
    """A digest of the HBM bytes ``memory`` has allocated: equal exactly when they are."""
    allocated = memory.data[: memory.next_free]
    return hashlib.blake2b(allocated.tobytes(), digest_size=16).hexdigest()


def _analyse(
    index: int, path: str, outcome: str, message: str | None, *, findings: bool = True
) -> Row:
    """The row's numbers, read back from the trace as ``kbdebug report`` reads them
    (``findings``: also the bound and findings of a complete run; else the hazards)."""
    replay = Replay.open(path, cache=False)  # a point opens its trace once: no index cache
    analysis = Analysis(replay)
    summary = analysis.summary
    row = Row(
        index,
        outcome,
        None if message is None else _one_line(message),
        end_cycle=int(summary.end_time),
        stall_cycles=int(summary.stall_cycles),
        dma_read_count=int(summary.counts.get("dma_read_count", 0)),
    )
    if not findings:
        return replace(row, hazards=hazard_outcomes(analysis))
    if outcome != OK:
        return row  # the bound and findings of a run that did not complete cover only part
    bounds = analysis.bounds
    # The launch's bound (its last PE's) and efficiency, as compare shows them.
    bound, efficiency = analysis.launch_efficiency
    start = min((b.start for b in bounds), default=0)
    row = replace(row, bound=int(start + bound), efficiency=efficiency)
    try:
        findings = analysis.findings
    except Exception as e:  # the run's numbers stand without its diagnosis: keep them
        return replace(row, findings=None, message=_one_line(f"findings: {type(e).__name__}: {e}"))
    ranked = sorted(findings, key=lambda f: (-f.saving, f.id))
    return replace(row, findings=tuple((f.id, int(f.saving)) for f in ranked))


def hazard_outcomes(analysis: Analysis) -> tuple[tuple[str, str, str], ...]:
    """(id, label, what its access did) of each hazard of the run: the label names its
    rule and both lines; what it did is the outcome without this run's cycles ("this run
    read the old bytes"), which another timing may change."""
    return tuple((h.id, _hazard_label(h), h.outcome.partition(" (")[0]) for h in analysis.hazards)


def _hazard_label(hazard: Any) -> str:
    """``KB201 read-after-write k.py:30 after :28`` (the second line, then the first)."""
    first, second = hazard.first.loc, hazard.second.loc
    if hazard.first is hazard.second:  # one access outside its tensor (KB204)
        lines = f"{second}"
    elif first is not None and second is not None and first.file == second.file:
        lines = f"{second} after :{first.line}"
    else:
        lines = f"{second} after {first}"
    return _one_line(f"{hazard.rule} {hazard.title} {lines}")


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 3] + "..."
