"""TL: the context a kernel receives as ``tl``; every call is a command on the modelled PE."""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from emulator.dtypes import forget_f32, name_of, to_numpy
from emulator.errors import (
    DoubleWaitError,
    EmulatorError,
    ForeignFutureError,
    InFlightRecycleError,
    RecycledBufferError,
    ShapeError,
    WaitError,
)
from emulator.hardware.mesh import DIRECTIONS
from emulator.hardware.pe import ProcessingElement
from emulator.kernel.free_hint import not_freeable
from emulator.kernel.futures import CompletionHandle, LoadFuture, RecvFuture, Waitable
from emulator.kernel.scope import Scope
from emulator.kernel.tensor import Buffer, TensorHandle
from emulator.kernel.tl_compute import ComputeOps, checked_shape
from emulator.recorder import (
    ISSUE_ALLOCATED,
    ISSUE_LOGGED,
    WAIT_DONE,
)
from emulator.trace.schema import Kind, SourceLoc

# Kind members as module constants: reading Kind.X costs a descriptor lookup per event.
_WAIT_BEGIN = Kind.WAIT_BEGIN
_WAIT_END = Kind.WAIT_END
_HOST_READ = Kind.HOST_READ
_READS = Kind.READS
_PROVENANCE = Kind.PROVENANCE

if TYPE_CHECKING:
    from emulator.kernel.runner import Launch

#: Handles whose wait gives a tensor in a scratch buffer.
_BUFFERED = (LoadFuture, RecvFuture)
#: Unwaited handles a kernel may hold before finished stores and sends are dropped.
_FORGET_ABOVE = 64


class TL(ComputeOps):
    """The tl API of one program instance, running on one PE in its own greenlet."""

    __slots__ = (
        "_launch",
        "_pe",
        "_env",
        "_emit",
        "_emit_compound",
        "_on_value",
        "_caller",
        "_switch",
        "_pid",
        "_scopes",
        "_top",
        "_issued",
        "_forget_above",
        "waiting_on",
        "closed",
        "_computed_read_at",
        "_provenance",
    )

    def __init__(self, launch: Launch, pe: ProcessingElement, pid: tuple[int, ...]):
        self._launch = launch
        self._pe = pe
        self._env: simpy.Environment = launch.env
        #: ``recorder.emit``, None when nothing is recorded: then no event is built, and
        #: compute commands, whose location only a trace or an error needs, look it up
        #: only for an error (``_error`` finds the same frame from anywhere in here).
        #: Methods only reached through a tl method or a TensorHandle operator ask
        #: ``_caller(3)``: the kernel's frame is one further up.
        self._emit = launch.emit
        #: ``recorder.emit_compound``, None likewise: a command's ISSUE and the events
        #: that follow it in the same call (OP_LOG, ...) go out as one compound record.
        self._emit_compound = launch.emit_compound
        #: ``launch.on_value(future, array)``: the tensors waited, stored and sent, for
        #: their digests (and kept values); None when nothing takes them.
        self._on_value = launch.on_value
        self._caller = launch.locations.caller
        self._switch = launch.driver.switch
        self._pid = pid
        #: Scopes open now, innermost last; each holds the buffers allocated in it and
        #: not recycled yet, by id (a recycled buffer leaves its frame: a long kernel
        #: that frees what it received keeps nothing of it).
        self._scopes: list[dict[int, Buffer]] = []
        #: Buffers outside any scope, recycled when the kernel ends (or by tl.free).
        self._top: dict[int, Buffer] = {}
        #: Handles issued and not yet waited, by id (drained when the kernel ends); stores
        #: and sends that completed unwaited are dropped now and then (_forget_finished).
        self._issued: dict[int, Waitable] = {}
        #: Size of ``_issued`` above which a store or send looks for finished ones to drop.
        self._forget_above = _FORGET_ABOVE
        #: The handle and location of the wait blocking the kernel now, if any.
        self.waiting_on: tuple[Waitable, SourceLoc] | None = None
        #: Set once the kernel is over: nothing more is recorded.
        self.closed = False
        #: launch.last_cmd when a computed tensor's host read was last recorded.
        self._computed_read_at: int | None = None
        #: Whether a store or send records the command that produced its tensor.
        self._provenance = launch.provenance and self._emit is not None

    # --- program geometry -------------------------------------------------------------

    def program_id(self, axis: int = 0) -> int:
        """This program instance's index along ``axis`` of the grid."""
        return self._pid[self._axis(axis)]

    def num_programs(self, axis: int = 0) -> int:
        """The grid's size along ``axis``."""
        return self._launch.grid[self._axis(axis)]

    def _axis(self, axis: int) -> int:
        if not 0 <= axis < len(self._pid):
            raise self._error(EmulatorError, f"axis {axis} is outside the {len(self._pid)}-d grid")
        return axis

    # --- HBM loads and stores -----------------------------------------------------------

    def load(self, ptr: int, shape: tuple[int, ...], dtype: str = "f16") -> TensorHandle:
        """Load a tile from HBM and block until it has arrived."""
        loc = self._caller()
        future = self._load(ptr, shape, dtype, loc, blocking=True)
        return self._wait(future, loc)

    def load_async(self, ptr: int, shape: tuple[int, ...], dtype: str = "f16") -> LoadFuture:
        """Issue a DMA read and return at once; ``tl.wait(future)`` gives the tile."""
        return self._load(ptr, shape, dtype, self._caller(), blocking=False)

    def _load(self, ptr, shape, dtype, loc, *, blocking: bool) -> LoadFuture:
        try:
            np_dtype = to_numpy(dtype)
            shape = checked_shape(shape)
            nbytes = math.prod(shape) * np_dtype.itemsize
            self._launch.memory.check(ptr, nbytes)
        except EmulatorError as e:
            raise self._error(type(e), e.detail, loc) from None
        self._check_fits(nbytes, loc)
        launch, pe, now = self._launch, self._pe.pe, self._env.now
        cmd, fid = launch.next_cmd(), launch.next_future()
        launch.log_op(now, pe, "memory", "dma_read")
        emit_compound = self._emit_compound
        if emit_compound is None:
            buffer = self._alloc(nbytes, loc)
        else:
            buffer = self._alloc(nbytes, loc, record=False)
            op = "load" if blocking else "load_async"
            in_use = self._pe.scratch.in_use
            emit_compound(
                ISSUE_ALLOCATED, now, pe, cmd, op, fid, int(ptr), nbytes, shape, dtype, blocking,
                loc, "memory", "dma_read", buffer.id, nbytes, in_use,
            )  # fmt: skip
        self._charge_issue()
        event = self._pe.read(cmd, fid, int(ptr), shape, dtype, nbytes)
        future = LoadFuture(fid, pe, cmd, event, loc, buffer=buffer, shape=shape, dtype=dtype)
        buffer.fid, buffer.future = fid, future
        self._issued[fid] = future
        return future

    def store(self, ptr: int, x: Any) -> CompletionHandle:
        """Write ``x`` to HBM at ``ptr``; returns at once, the handle resolves when it lands."""
        loc = self._caller()
        data = self._array(x, loc)
        try:
            self._launch.memory.check(ptr, data.nbytes)
            dtype = name_of(data.dtype)
        except EmulatorError as e:
            raise self._error(type(e), e.detail, loc) from None
        launch, pe, now = self._launch, self._pe.pe, self._env.now
        cmd, fid = launch.next_cmd(), launch.next_future()
        if self._emit_compound is not None:
            fields = (cmd, "store", fid, int(ptr), data.nbytes, data.shape, dtype, False, loc)
            self._emit_compound(ISSUE_LOGGED, now, pe, *fields, "memory", "dma_write")
            self._reads(cmd, now, pe, x, None)
            if self._provenance:
                self._made_by(cmd, now, pe, x)
        launch.log_op(now, pe, "memory", "dma_write")
        data = np.array(data, copy=True)
        if self._on_value is not None:
            self._on_value(fid, data)
        self._charge_issue()
        event = self._pe.write(cmd, fid, int(ptr), data)
        handle = CompletionHandle(fid, pe, cmd, event, loc)
        self._issued[fid] = handle
        if len(self._issued) > self._forget_above:
            self._forget_finished()
        return handle

    # --- waiting ------------------------------------------------------------------------

    def wait(self, handle: Waitable) -> Any:
        """Block until ``handle`` completes; a TensorHandle for loads and receives, else None.

        Waiting on a handle twice raises DoubleWaitError: in a prefetch pipeline
        it almost always means the wrong future was rotated in.
        """
        return self._wait(handle, self._caller())

    def _wait(self, handle: Waitable, loc: SourceLoc) -> Any:
        if not isinstance(handle, Waitable):
            raise self._error(
                WaitError,
                f"tl.wait expects a LoadFuture, RecvFuture or CompletionHandle, "
                f"got {type(handle).__name__}",
                loc,
            )
        if handle.pe != self._pe.pe:
            raise self._error(
                ForeignFutureError,
                f"future {handle.id} was issued by PE {handle.pe} at {handle.loc}; "
                f"only that PE can wait on it",
                loc,
            )
        if handle.waited_at is not None:
            raise self._error(
                DoubleWaitError,
                f"future {handle.id} (issued at {handle.loc}) was already waited at "
                f"{handle.waited_at}",
                loc,
            )
        emit, start = self._emit, self._env.now
        event = handle.event
        # handle.done, inlined (most waits of a good pipeline). A load without latency
        # completes with its hold's timeout, which counts as triggered from its creation.
        if event.triggered and (event.callbacks is None or type(event) is not simpy.Timeout):
            if self._emit_compound is not None:
                self._emit_compound(WAIT_DONE, start, self._pe.pe, handle.id, loc, handle.id, 0)
        else:
            if emit is not None:
                emit(_WAIT_BEGIN, start, self._pe.pe, handle.id, loc)
            self.waiting_on = (handle, loc)
            self._switch(handle.event)
            self.waiting_on = None
            now = self._env.now
            if emit is not None:
                emit(_WAIT_END, now, self._pe.pe, handle.id, now - start)
            self._launch.stall_cycles += now - start
        handle.waited_at = loc
        self._issued.pop(handle.id, None)
        if isinstance(handle, _BUFFERED):
            data = handle.event.value
            if isinstance(handle, RecvFuture):
                self._check_received(handle, data, loc)
            if self._on_value is not None:
                self._on_value(handle.id, data)
            buffer = handle.buffer
            buffer.future = None
            if buffer.orphan:
                buffer.orphan = False
                frame = self._scopes[-1] if self._scopes else self._top
                frame[buffer.id] = buffer
                buffer.frame = frame
            handle.result = TensorHandle(self, data, buffer, handle.cmd)
        return handle.result

    def _check_received(self, future: RecvFuture, data: np.ndarray, loc: SourceLoc) -> None:
        if data.shape != future.shape or data.dtype != to_numpy(future.dtype):
            raise self._error(
                ShapeError,
                f"future {future.id} received {data.shape} {name_of(data.dtype)} from the "
                f"{future.direction} neighbour but tl.recv_async expected {future.shape} "
                f"{future.dtype}",
                loc,
            )

    # --- IPCQ ---------------------------------------------------------------------------

    def send(self, direction: str, x: Any) -> CompletionHandle:
        """Send ``x`` to the neighbouring PE in ``direction``; resolves on delivery."""
        loc = self._caller()
        self._check_direction(direction, loc)
        data = np.array(self._array(x, loc), copy=True)
        launch, pe, now = self._launch, self._pe.pe, self._env.now
        cmd, fid = launch.next_cmd(), launch.next_future()
        dtype = name_of(data.dtype)
        if self._emit_compound is not None:
            fields = (cmd, "send", fid, -1, data.nbytes, data.shape, dtype, False, loc)
            self._emit_compound(ISSUE_LOGGED, now, pe, *fields, "comm", "ipcq_send")
            self._reads(cmd, now, pe, x, None)
            if self._provenance:
                self._made_by(cmd, now, pe, x)
        launch.log_op(now, pe, "comm", "ipcq_send")
        if self._on_value is not None:
            self._on_value(fid, data)
        self._charge_issue()
        event = self._pe.send(cmd, fid, direction, data)
        handle = CompletionHandle(fid, pe, cmd, event, loc)
        self._issued[fid] = handle
        if len(self._issued) > self._forget_above:
            self._forget_finished()
        return handle

    def recv_async(self, direction: str, shape: tuple[int, ...], dtype: str = "f16") -> RecvFuture:
        """Post a receive from the neighbour in ``direction``; ``tl.wait`` gives the tile."""
        loc = self._caller()
        self._check_direction(direction, loc)
        try:
            np_dtype = to_numpy(dtype)
            shape = checked_shape(shape)
        except EmulatorError as e:
            raise self._error(type(e), e.detail, loc) from None
        nbytes = math.prod(shape) * np_dtype.itemsize
        self._check_fits(nbytes, loc)
        launch, pe, now = self._launch, self._pe.pe, self._env.now
        cmd, fid = launch.next_cmd(), launch.next_future()
        launch.log_op(now, pe, "comm", "ipcq_recv")
        emit_compound = self._emit_compound
        if emit_compound is None:
            buffer = self._alloc(nbytes, loc)
        else:
            buffer = self._alloc(nbytes, loc, record=False)
            in_use = self._pe.scratch.in_use
            fields = (cmd, "recv_async", fid, -1, nbytes, shape, dtype, False, loc)
            fields += ("comm", "ipcq_recv", buffer.id, nbytes, in_use)
            emit_compound(ISSUE_ALLOCATED, now, pe, *fields)
        self._charge_issue()

        event = self._pe.recv(cmd, fid, direction)
        future = RecvFuture(
            fid, pe, cmd, event, loc, buffer=buffer, shape=shape, dtype=dtype, direction=direction
        )
        buffer.fid, buffer.future = fid, future
        self._issued[fid] = future
        return future

    def _check_direction(self, direction: str, loc: SourceLoc) -> None:
        if direction not in DIRECTIONS:
            raise self._error(
                EmulatorError,
                f"unknown IPCQ direction {direction!r} (use {', '.join(DIRECTIONS)})",
                loc,
            )
        if direction not in self._pe.links:
            raise self._error(EmulatorError, self._no_neighbour(direction), loc)

    def _no_neighbour(self, direction: str) -> str:
        """Why PE N has no link ``direction``: the mesh's shape says (an edge, or a mesh
        one PE thick, which has no links across that thickness even when wrapped)."""
        config = self._pe.config
        rows, cols = config.mesh_rows, config.mesh_cols
        pe = self._pe.pe
        r, c = divmod(pe, cols)
        thin = (rows == 1 and direction in ("up", "down")) or (
            cols == 1 and direction in ("left", "right")
        )
        if thin:
            why = f"the mesh is {rows}x{cols}: one PE thick, no link {direction} even wrapped"
        else:
            why = f"PE {pe} is at row {r}, column {c} of a {rows}x{cols} mesh without mesh_wrap"
        return f"PE {pe} has no neighbour {direction}: {why}"

    # --- scratch ------------------------------------------------------------------------

    def scope(self) -> Scope:
        """Recycle, on exit, the scratch buffers allocated inside.

        A buffer whose load or receive has not been waited yet is kept: the
        scope that waits on it adopts it (ADR-0063: in-flight prefetch buffers
        are never recycled).
        """
        return Scope(self)

    def free(self, x: TensorHandle | LoadFuture | RecvFuture) -> None:
        """Recycle the scratch buffer of ``x`` now (InFlightRecycleError if not yet waited)."""
        loc = self._caller()
        buffer = x.buffer if isinstance(x, TensorHandle | LoadFuture | RecvFuture) else None
        if buffer is None:
            frame = sys._getframe(1)  # the line that called tl.free, to quote its argument
            raise self._error(EmulatorError, not_freeable(x, frame, loc), loc)
        future = buffer.future
        if future is not None:
            raise self._error(
                InFlightRecycleError,
                f"buffer {buffer.id} of future {future.id} (issued at {future.loc}) recycled "
                f"while its load is in flight; tl.wait on it first",
                loc,
            )
        self._free(buffer)

    def _check_fits(self, nbytes: int, loc: SourceLoc) -> None:
        """Refuse before anything is recorded, so a refused load leaves no trace of issue."""
        try:
            self._pe.scratch.check(nbytes)
        except EmulatorError as e:
            raise self._error(type(e), e.detail, loc) from None

    def _alloc(self, nbytes: int, loc: SourceLoc, *, record: bool = True) -> Buffer:
        """A new scratch buffer (``record=False``: the caller records its SCRATCH_ALLOC)."""
        buffer = Buffer(self._launch.next_buffer(), nbytes)
        try:
            self._pe.scratch.alloc(buffer.id, nbytes, record=record)
        except EmulatorError as e:
            raise self._error(type(e), e.detail, loc) from None
        frame = self._scopes[-1] if self._scopes else self._top
        frame[buffer.id] = buffer
        buffer.frame = frame
        return buffer

    def _free(self, buffer: Buffer) -> None:
        if not buffer.freed:
            buffer.freed = True
            frame = buffer.frame
            if frame is not None:
                buffer.frame = None
                del frame[buffer.id]
            self._pe.scratch.free(buffer.id)

    def _forget_finished(self) -> None:
        """Drop the stores and sends that completed unwaited from ``_issued``: the kernel's
        end has nothing to wait for or recycle in them, and a kernel that never waits on
        its sends would otherwise keep one handle per send until it ends."""
        self._issued = {
            fid: handle
            for fid, handle in self._issued.items()
            if isinstance(handle, _BUFFERED) or not handle.event.triggered
        }
        self._forget_above = max(_FORGET_ABOVE, 2 * len(self._issued))

    def _host_read(self, x: TensorHandle) -> None:
        """Record that kernel code read ``x``'s values (HOST_READ): once per loaded or
        received buffer; for a computed tensor (future -1) once between two commands."""
        if self.closed:
            return
        forget_f32(x._data)  # kernel code holds the array now: it may write to it
        buffer = x.buffer
        if buffer is not None and buffer.fid >= 0:
            if buffer.host_read:
                return
            buffer.host_read = True
            fid = buffer.fid
        else:
            last_cmd = self._launch.last_cmd
            if self._computed_read_at == last_cmd:
                return
            self._computed_read_at = last_cmd
            fid = -1
        if self._emit is not None:
            self._emit(_HOST_READ, self._env.now, self._pe.pe, fid)

    def _reads(self, cmd: int, now: int, pe: int, a: Any, b: Any) -> None:
        """Record (traced only) that command ``cmd``, just issued, consumes the data of
        operands ``a`` and ``b``: a READS per load or receive whose scratch buffer holds
        one of them (a view of it included: ``x[...]``, ``tl.trans(x)``), once per future.
        A computed tensor, an array or a number reads none."""
        first = -1
        if isinstance(a, TensorHandle):
            buffer = a.buffer
            if buffer is not None and buffer.fid >= 0:
                first = buffer.fid
                self._emit(_READS, now, pe, cmd, first)
        if isinstance(b, TensorHandle):
            buffer = b.buffer
            if buffer is not None and buffer.fid >= 0:
                fid = buffer.fid
                if fid != first:
                    self._emit(_READS, now, pe, cmd, fid)

    def _made_by(self, cmd: int, now: int, pe: int, x: Any) -> None:
        """Record (PROVENANCE) the command whose result store or send ``cmd``, just issued,
        moves: the compute that made ``x``, or the load or receive whose wait gave it;
        -1 for a host array (ready whenever the kernel issues it)."""
        made_by = x.producer if isinstance(x, TensorHandle) else -1
        self._emit(_PROVENANCE, now, pe, cmd, made_by)

    def _recycled(self, x: TensorHandle) -> None:
        raise self._error(
            RecycledBufferError,
            f"tensor {x.shape} {x.dtype} used after its scratch buffer {x.buffer.id} was "
            f"recycled (by the end of its tl.scope, tl.free or the kernel's end)",
            self._caller(),
        )

    # --- plumbing -----------------------------------------------------------------------

    def _charge_issue(self) -> None:
        cycles = self._launch.config.issue_cycles
        if cycles:
            env = self._env
            next_time = env.peek()
            self._block_until(env.timeout(cycles), env.now + cycles, next_time)

    def _block_until(self, event: simpy.Event, due: int, next_time: float) -> None:
        """Suspend the kernel until ``event``, scheduled to fire at cycle ``due``, fires;
        ``next_time`` is ``env.peek()`` from before it was scheduled.

        When nothing else is due by then and every program has started, ``event`` is
        the next one the SimPy loop would process, and the kernel would be resumed
        right after its callbacks: the kernel processes it itself (``env.step()``),
        which saves two greenlet switches. Either way nothing runs in between: a
        kernel runs inside the callback that resumed it, the last of its event's
        (nothing but the kernel waits on what a kernel waits on)."""
        if next_time > due and self._launch.running:
            self._env.step()
        else:
            self._switch(event)

    def _block(self, event: simpy.Event) -> Any:
        """Suspend the kernel until ``event`` fires; returns its value."""
        return self._switch(event)

    # _array and _operand read a tensor's values as the emulator's own work, not as a
    # host read of the kernel (TensorHandle._values, inlined: they are on the hot path).
    def _array(self, x: Any, loc: SourceLoc) -> np.ndarray:
        if isinstance(x, TensorHandle):
            if x.buffer is not None and x.buffer.freed:
                self._recycled(x)
            return x._data
        if isinstance(x, np.ndarray):
            return x
        raise self._error(
            EmulatorError, f"expected a tensor, got {type(x).__name__} {x!r:.40}", loc
        )

    def _operand(self, x: Any, loc: SourceLoc) -> Any:
        if isinstance(x, TensorHandle):
            if x.buffer is not None and x.buffer.freed:
                self._recycled(x)
            return x._data
        if isinstance(x, np.number):
            # A number is weakly typed, as in Triton: np.float64(0.5) * tile keeps the
            # tile's dtype (numpy would make an f16 or f32 tile f64, and a store would
            # then write twice its bytes past its buffer). np.float64 is a float too:
            # tested first.
            return x.item()
        if isinstance(x, np.ndarray | int | float | np.generic):
            return x
        raise self._error(
            EmulatorError, f"expected a tensor or a number, got {type(x).__name__}", loc
        )

    def _error(self, cls: type[EmulatorError], message: str, loc: SourceLoc | None = None):
        return cls(message, pe=self._pe.pe, loc=loc or self._caller())

    def _drain(self) -> None:
        """At kernel end: let everything issued land, then recycle every buffer."""
        for handle in list(self._issued.values()):
            # A receive nobody waited for may never be matched; it does not hold the end.
            if not handle.done and not isinstance(handle, RecvFuture):
                self._block(handle.event)
            buffer = getattr(handle, "buffer", None)
            if buffer is not None:
                self._free(buffer)
        self._issued.clear()
        for frame in (*self._scopes, self._top):
            for buffer in list(frame.values()):
                self._free(buffer)
