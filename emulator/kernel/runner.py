"""run_kernel: launch a kernel over a grid of PEs, each program in a greenlet driven by SimPy."""

from __future__ import annotations

import inspect
import itertools
import math
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import greenlet
import numpy as np
import simpy

from emulator.config import HardwareConfig
from emulator.dtypes import f32_kept
from emulator.errors import DeadlockError, EmulatorError, KernelError
from emulator.hardware.mesh import Mesh
from emulator.kernel.fp_warnings import kernel_errstate
from emulator.kernel.futures import RecvFuture
from emulator.kernel.oplog import OpLog
from emulator.kernel.source import LocationCache, is_kernel_code, launch_root
from emulator.kernel.tl import TL
from emulator.memory import Memory
from emulator.recorder import (
    MemoryRecorder,
    NullRecorder,
    Recorder,
    TeeRecorder,
    compound_emitter,
    digest_adder,
    emitter,
)
from emulator.trace import wire
from emulator.trace.digests import (
    ITEMSIZES,
    TensorDef,
    digest_of,
    digest_record,
    f16_digest_record,
    row_major_strides,
)
from emulator.trace.schema import KIND_SINCE, Kind, SourceLoc

#: Set to 0 to record no digests, no named tensors and no provenance: the trace is then
#: what a format 1.4 writer wrote (the baseline of benchmarks/emulator_speed.py; the
#: 1.3 copies in tests/data/old_traces were recorded so).
DIGESTS_ENV = "KBDEBUG_DIGESTS"
#: Named tensors a trace's header lists at most.
MAX_TENSORS = 4096
_F16 = np.dtype(np.float16)


def digests_enabled() -> bool:
    """Whether runs record digests and named tensors (format 1.5): yes unless
    ``KBDEBUG_DIGESTS=0``."""
    return os.environ.get(DIGESTS_ENV, "1").strip() != "0"


def provenance_enabled() -> bool:
    """Whether runs record what produced each stored or sent tensor (format 1.6): yes
    unless ``KBDEBUG_DIGESTS=0``, and only when this build writes format 1.6."""
    return digests_enabled() and wire.FORMAT_VERSION >= KIND_SINCE[Kind.PROVENANCE]


@dataclass
class RunResult:
    """What a launch did: when it ended, what it issued, how busy each channel was."""

    #: Cycle at which the last kernel ended.
    end_time: int
    #: Every memory / compute / comm command, in issue order (a sequence of OpRecord).
    op_log: OpLog
    #: Counters: dma_read_count, dma_write_count, gemm_count, math_count,
    #: ipcq_send_count, ipcq_recv_count, stall_cycles.
    metrics: dict[str, int]
    #: Cycle at which each PE's kernel ended, by PE.
    pe_end_times: dict[int, int]
    #: Cycles each channel was held, by channel name.
    busy_cycles: dict[str, int]
    #: Highest scratch use of each PE, by PE.
    scratch_peak: dict[int, int]
    #: Every event as (kind, time, pe, *fields), when ``keep_events`` was asked for.
    events: list[tuple[Any, ...]] | None = field(default=None, repr=False)


class _Program:
    """One program instance: its greenlet, its tl and where it runs."""

    __slots__ = ("glet", "tl", "pe", "ended", "wake")

    def __init__(self, glet: greenlet.greenlet, tl: TL, pe: int):
        self.glet = glet
        self.tl = tl
        self.pe = pe
        self.ended = False
        #: SimPy callback that resumes the kernel with the event's value (set by the driver).
        self.wake = None


class _Start:
    """What starts a kernel: its tl, carried as an event carries its value."""

    __slots__ = ("_value",)

    def __init__(self, tl: TL):
        self._value = tl


class Launch:
    """The state one launch shares across its programs: clock, hardware, ids, op log."""

    def __init__(
        self,
        config: HardwareConfig,
        memory: Memory,
        recorder: Recorder,
        grid,
        root: Path | None = None,
        *,
        digests: bool = True,
        values: Any = None,
        provenance: bool = False,
    ):
        self.config = config
        #: Whether each store and send records the command that produced its tensor
        #: (a PROVENANCE event, format 1.6; the header says so).
        self.provenance = provenance
        self.memory = memory
        self.recorder = recorder
        #: ``recorder.emit``, None when nothing is recorded (emit sites then do no work).
        self.emit = emitter(recorder)
        add_digest = digest_adder(recorder) if digests else None
        # A TraceWriter takes the digest's record itself (no Digest made at every wait).
        add_record = getattr(recorder, "add_digest_record", None) if add_digest else None
        keep = values.keep if values is not None else None
        #: ``on_value(future, array)``: the tensor of a waited load or receive, or of a
        #: store or send at its issue, handed to the recorder as a digest and to the
        #: values store; None when neither wants it (no work at the emit sites).
        self.on_value: Callable[[int, np.ndarray], None] | None = None
        if add_record is not None and keep is None:

            def on_value(future: int, array: np.ndarray) -> None:
                # A load's or receive's own array (C-ordered, owning its data):
                # converted once for the digest and the tl.dot that follows.
                if array.dtype == _F16 and array.base is None and array.flags.c_contiguous:
                    add_record(f16_digest_record(future, array, f32_kept(array)))
                else:
                    add_record(digest_record(future, array))

            self.on_value = on_value
        elif add_digest is not None or keep is not None:

            def on_value(future: int, array: np.ndarray) -> None:
                if add_digest is not None:
                    f32 = None
                    if array.dtype == _F16 and array.base is None and array.flags.c_contiguous:
                        f32 = f32_kept(array)
                    add_digest(digest_of(future, array, f32))
                if keep is not None:
                    keep(future, array)

            self.on_value = on_value
        #: ``recorder.emit_compound`` (see recorder.compound_emitter), None likewise.
        self.emit_compound = compound_emitter(recorder)
        self.grid = grid
        self.env = simpy.Environment()
        #: Source paths in the trace are relative to ``root`` (see source.launch_root).
        self.locations = LocationCache(recorder.add_source, root)
        self.mesh = Mesh(self.env, recorder, config, memory)
        self.op_log = OpLog()
        #: Set once every program has started and the SimPy loop runs.
        self.running = False
        self.stall_cycles = 0
        self._cmds = itertools.count()
        #: The last command id handed out (-1 before the first).
        self.last_cmd = -1
        self._futures = itertools.count()
        self._buffers = itertools.count()
        #: The greenlet running the SimPy loop; kernels switch to it to block.
        self.driver: greenlet.greenlet = greenlet.getcurrent()

    def next_cmd(self) -> int:
        self.last_cmd = cmd = next(self._cmds)
        return cmd

    def next_future(self) -> int:
        return next(self._futures)

    def next_buffer(self) -> int:
        return next(self._buffers)

    def log_op(self, time: int, pe: int, category: str, op: str) -> None:
        """Append to the op log. Its OP_LOG event is the caller's to record: it always
        follows the command's ISSUE, and the two go in one compound record."""
        self.op_log.append(time, pe, category, op)


def run_kernel(
    kernel,
    args: tuple = (),
    grid: tuple[int, ...] | int = (1,),
    memory: Memory | None = None,
    config: HardwareConfig | None = None,
    *,
    recorder: Recorder | None = None,
    trace: str | Path | None = None,
    keep_events: bool = False,
    launch_file: str | Path | None = None,
    digests: bool | None = None,
    values: Any = None,
    provenance: bool | None = None,
) -> RunResult:
    """Run ``kernel(tl, *args)`` once per program of ``grid``, program i on PE i.

    ``trace`` writes a .kbt file (complete with its footer even when the run
    fails, status "interrupted" on KeyboardInterrupt); ``recorder`` receives
    every event too; ``keep_events`` puts them in the result. Source paths in the
    trace are relative to the root of ``launch_file`` (default: the kernel function's
    file; see ``source.launch_root``), never to the working directory. ``digests``
    (default: ``digests_enabled()``) records the memory's named tensors in the header
    and a digest of every tensor waited, stored or sent (format 1.5); ``values``, an
    object with ``keep(future, array)`` (kbdebug's ValueStore), gets those tensors
    themselves. ``provenance`` (default: ``provenance_enabled()``, whatever ``digests``
    says) records, for each store and send, the command that produced its tensor
    (format 1.6): when the value it moves was ready. Raises KernelError
    when kernel code raises, DeadlockError when kernels wait on what can never
    come, and the EmulatorError subclass of any command the hardware refuses.
    """
    config = config or HardwareConfig()
    memory = memory if memory is not None else Memory()
    grid = _check_grid(grid, config)
    if not callable(kernel):
        raise EmulatorError(f"kernel must be a function, got {type(kernel).__name__}")
    if not isinstance(args, tuple | list):
        raise EmulatorError(f"args must be a tuple, got {type(args).__name__}")

    recorders: list[Recorder] = []
    writer = None
    if trace is not None:
        from emulator.trace.writer import TraceWriter

        writer = TraceWriter(trace)
        recorders.append(writer)
    if recorder is not None:
        recorders.append(recorder)
    kept = MemoryRecorder() if keep_events else None
    if kept is not None:
        recorders.append(kept)
    rec: Recorder = (
        NullRecorder()
        if not recorders
        else recorders[0]
        if len(recorders) == 1
        else TeeRecorder(*recorders)
    )

    if launch_file is None:
        launch_file = getattr(
            getattr(inspect.unwrap(kernel), "__code__", None), "co_filename", None
        )
    if digests is None:
        digests = digests_enabled()
    if provenance is None:
        provenance = provenance_enabled()
    launch = Launch(
        config,
        memory,
        rec,
        grid,
        launch_root(launch_file),
        digests=digests,
        values=values,
        provenance=provenance,
    )
    header = _header(launch, kernel, args)
    if provenance:
        header["provenance"] = True
    if digests:
        header["tensors"] = [t.header_entry() for t in named_tensors(memory, kernel, args)]
    rec.begin(header)
    try:
        pe_end_times = _drive(launch, kernel, tuple(args))
    except EmulatorError as e:
        status = "deadlock" if isinstance(e, DeadlockError) else "error"
        rec.end({"status": status, "end_time": launch.env.now, "error": str(e), "error_loc": e.loc})
        raise
    except KeyboardInterrupt as e:
        # Stopped from outside (Ctrl+C, or a SIGTERM the caller turned into one): not the
        # kernel's error, so not status "error". The message says what stopped it, if known.
        rec.end(
            {
                "status": "interrupted",
                "end_time": launch.env.now,
                "error": f"interrupted by {e}" if str(e) else "interrupted",
                "error_loc": None,
            }
        )
        raise
    except BaseException as e:
        rec.end(
            {
                "status": "error",
                "end_time": launch.env.now,
                "error": f"{type(e).__name__}: {e}",
                "error_loc": None,
            }
        )
        raise
    rec.end({"status": "ok", "end_time": launch.env.now, "error": None, "error_loc": None})

    # Counted once at the end rather than per command: the op log is the hot path.
    counts = launch.op_log.counts()
    metrics = {
        "dma_read_count": counts[("memory", "dma_read")],
        "dma_write_count": counts[("memory", "dma_write")],
        "gemm_count": counts[("compute", "gemm")],
        "math_count": counts[("compute", "math")],
        "ipcq_send_count": counts[("comm", "ipcq_send")],
        "ipcq_recv_count": counts[("comm", "ipcq_recv")],
        "stall_cycles": launch.stall_cycles,
    }
    return RunResult(
        end_time=max(pe_end_times.values(), default=0),
        op_log=launch.op_log,
        metrics=metrics,
        pe_end_times=pe_end_times,
        busy_cycles={c.name: c.busy_cycles for c in launch.mesh.channels},
        scratch_peak={pe.pe: pe.scratch.peak for pe in launch.mesh.pes},
        events=kept.events if kept is not None else None,
    )


def _check_grid(grid, config: HardwareConfig) -> tuple[int, ...]:
    if isinstance(grid, int | np.integer):
        grid = (int(grid),)
    try:
        grid = tuple(int(g) for g in grid)
    except (TypeError, ValueError):
        raise EmulatorError(f"grid must be a tuple of positive integers, got {grid!r}") from None
    if not 1 <= len(grid) <= 3 or any(g < 1 for g in grid):
        raise EmulatorError(f"grid must be 1 to 3 positive integers, got {grid!r}")
    if math.prod(grid) > config.num_pes:
        raise EmulatorError(
            f"grid {grid} needs {math.prod(grid)} PEs but the mesh has {config.num_pes} "
            f"({config.mesh_rows}x{config.mesh_cols}); raise mesh_rows / mesh_cols"
        )
    return grid


def _header(launch: Launch, kernel, args: tuple) -> dict[str, Any]:
    config = launch.config
    header = {
        "config": config.header_dict(),
        "mesh": [config.mesh_rows, config.mesh_cols],
        "channels": [c.describe() for c in launch.mesh.channels],
        "launch": {
            "kernel": getattr(kernel, "__name__", repr(kernel)),
            "grid": list(launch.grid),
            "args": [_short_repr(a) for a in args],
        },
    }
    if config.hbm_stacks:
        # The PEs of each stack whose bandwidth they share (HBM_SHARE events name them).
        header["hbm_stacks"] = config.hbm_stacks
    return header


def named_tensors(memory: Memory, kernel, args: tuple) -> list[TensorDef]:
    """The memory's tensors, each unnamed one named after the kernel parameter its address
    is passed as (``k_ptr`` -> ``k``), else ``in0``, ``in1``... in the order put."""
    try:
        params = list(inspect.signature(kernel).parameters)[1:]  # after tl
    except (TypeError, ValueError):
        params = []
    by_addr: dict[int, str] = {}
    for param, arg in zip(params, args, strict=False):
        if isinstance(arg, int | np.integer) and not isinstance(arg, bool):
            base = param.removesuffix("_ptr").removesuffix("_addr") or param
            by_addr.setdefault(int(arg), base)
    taken = {t.name for t in memory.tensors if t.name is not None}
    unnamed = itertools.count()
    tensors = []
    # The header's arrays hold MAX_TENSORS at most (wire.MAX_ARRAY_LEN): past that, the
    # places of the rest are shown by address.
    for region in memory.tensors[:MAX_TENSORS]:
        name = region.name
        if name is None:
            name = by_addr.get(region.addr)
            while name is None or name in taken:
                name = f"in{next(unnamed)}"
            taken.add(name)
        strides = row_major_strides(region.shape, ITEMSIZES[region.dtype])
        tensors.append(TensorDef(name, region.addr, region.shape, region.dtype, strides))
    return tensors


def _short_repr(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"array{value.shape} {value.dtype}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _pids(grid: tuple[int, ...]):
    """Program ids in launch order: axis 0 fastest, as Triton numbers them."""
    for linear in range(math.prod(grid)):
        pid, rest = [], linear
        for size in grid:
            rest, i = divmod(rest, size)
            pid.append(i)
        yield linear, tuple(pid)


def _drive(launch: Launch, kernel, args: tuple) -> dict[int, int]:
    """Start every program at cycle 0, run the SimPy loop, and report how it ended."""
    env, rec = launch.env, launch.recorder
    programs: list[_Program] = []
    pe_end_times: dict[int, int] = {}
    kernel_loc = launch.locations.of_code(kernel.__code__) if hasattr(kernel, "__code__") else None
    # tl calls made in helpers record the kernel line that called them (see LocationCache).
    launch.locations.kernel_code = getattr(inspect.unwrap(kernel), "__code__", None)
    name = getattr(kernel, "__name__", "kernel")

    def body(tl: TL) -> None:
        with kernel_errstate():  # numpy's warnings at the kernel's line, not ours
            kernel(tl, *args)
            tl._drain()

    def failed(program: _Program, error: Exception) -> Exception:
        """Record that the kernel raised ``error``; what run_kernel raises for it."""
        if isinstance(error, EmulatorError):
            _kernel_failed(launch, program, error, error.loc)
            return error
        loc = _innermost_kernel_loc(launch, error)
        _kernel_failed(launch, program, error, loc)
        return KernelError(
            f"{name} raised {type(error).__name__}: {error}",
            pe=program.pe,
            loc=loc,
            kernel_traceback="".join(traceback.format_exception(error)),
        )

    def ended(program: _Program) -> None:
        program.ended = True
        program.tl.closed = True
        pe_end_times[program.pe] = env.now
        rec.emit(Kind.KERNEL_END, env.now, program.pe)

    def waker(program: _Program) -> Callable[[Any], None]:
        """The callback that resumes ``program`` with an event's value (a kernel blocks on
        an event by switching to the driver with it)."""
        glet = program.glet
        switch = glet.switch

        def wake(event: Any) -> None:
            try:
                blocked_on = switch(event._value)
            except Exception as e:
                error = failed(program, e)
                if error is e:
                    raise
                raise error from e
            if glet.dead:
                ended(program)
            else:
                blocked_on.callbacks.append(wake)

        return wake

    try:
        for linear, pid in _pids(launch.grid):
            tl = TL(launch, launch.mesh.pes[linear], pid)
            program = _Program(greenlet.greenlet(body, parent=launch.driver), tl, linear)
            program.wake = waker(program)
            programs.append(program)
            rec.emit(Kind.KERNEL_START, 0, linear, name, kernel_loc)
        for program in programs:
            program.wake(_Start(program.tl))
        launch.running = True
        env.run()
        blocked = [p for p in programs if not p.ended]
        if blocked:
            raise _deadlock(launch, blocked)
    finally:
        for program in programs:
            if not program.glet.dead:
                program.tl.closed = True
                program.glet.throw(greenlet.GreenletExit)
    return pe_end_times


def _kernel_failed(
    launch: Launch, program: _Program, error: BaseException, loc: SourceLoc | None
) -> None:
    program.ended = True
    program.tl.closed = True
    message = (
        error.detail if isinstance(error, EmulatorError) else f"{type(error).__name__}: {error}"
    )
    launch.recorder.emit(Kind.KERNEL_ERROR, launch.env.now, program.pe, message, loc)


def _innermost_kernel_loc(launch: Launch, error: BaseException) -> SourceLoc | None:
    loc = None
    for frame, line in traceback.walk_tb(error.__traceback__):
        if is_kernel_code(frame.f_code.co_filename):
            loc = launch.locations.of_frame(frame, line)
    return loc


def _deadlock(launch: Launch, blocked: list[_Program]) -> DeadlockError:
    now = launch.env.now
    parts, details = [], []
    for program in blocked:
        waiting = program.tl.waiting_on
        if waiting is None:
            what, loc, fid = "its outstanding commands at kernel end", None, -1
        else:
            handle, loc = waiting
            kind = "receive" if isinstance(handle, RecvFuture) else handle.kind
            what, fid = f"{kind} future {handle.id}", handle.id
        launch.recorder.emit(Kind.DEADLOCK, now, program.pe, fid, loc)
        where = f" at {loc}" if loc else ""
        parts.append(f"PE {program.pe} waits on {what}{where}")
        details.append((program.pe, what, loc))
    error = DeadlockError(f"deadlock at cycle {now}: " + "; ".join(parts), blocked=details)
    error.loc = details[0][2]
    return error
