"""The compute half of tl: tl.dot, elementwise ops, reductions, fills and composites, each a
command on the PE's GEMM or MATH engine (mixed into ``TL``, whose plumbing it uses)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from emulator.dtypes import NUMPY_DTYPES, as_f32, name_of, to_numpy
from emulator.errors import EmulatorError, ShapeError
from emulator.kernel.composite import run_composite
from emulator.kernel.tensor import TensorHandle
from emulator.memory import check_shape
from emulator.recorder import ISSUE_GRANTED, ISSUE_REQUESTED
from emulator.trace.schema import SourceLoc

#: numpy dtype -> its name, for the common dtypes (name_of handles the rest and errors).
_DTYPE_NAMES = {dtype: name for name, dtype in NUMPY_DTYPES.items()}


def checked_shape(shape: Any) -> tuple[int, ...]:
    """memory.check_shape, without its generator expressions for a tuple of ints."""
    if type(shape) is tuple:
        for dim in shape:
            if type(dim) is not int or dim < 0:
                return check_shape(shape)
        return shape
    return check_shape(shape)


class ComputeOps:
    """tl's compute commands: each blocks the kernel while its engine works.

    A part of ``TL``: it records and blocks through TL's launch, PE, recorder and
    greenlet switch (``_emit``, ``_emit_compound``, ``_switch``, ...), and reads
    operands with TL's ``_array`` and ``_operand``.
    """

    __slots__ = ()

    def dot(self, a: Any, b: Any) -> TensorHandle:
        """Matrix product on the GEMM engine, accumulated in f32."""
        loc = self._caller() if self._emit is not None else None
        x, y = self._array(a, loc), self._array(b, loc)
        if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[0]:
            raise self._error(
                ShapeError, f"tl.dot needs (M, K) @ (K, N), got {x.shape} @ {y.shape}", loc
            )
        out = np.matmul(as_f32(x), as_f32(y))
        macs = x.shape[0] * x.shape[1] * y.shape[1]
        cmd = self._compute(
            "dot", "gemm", self._pe.gemm, self._pe.gemm_cycles(macs), out, loc, a, b
        )
        return TensorHandle(self, out, None, cmd)

    def trans(self, x: Any) -> TensorHandle:
        """The transpose (a layout change, free): a view, in the same scratch buffer."""
        data = self._array(x, None).T
        if isinstance(x, TensorHandle):
            return TensorHandle(self, data, x.buffer, x.producer)
        return TensorHandle(self, data)

    def exp(self, x: Any) -> TensorHandle:
        """Elementwise e**x on the MATH engine."""
        return self._unary("exp", np.exp, x)

    def log(self, x: Any) -> TensorHandle:
        """Elementwise natural log on the MATH engine."""
        return self._unary("log", np.log, x)

    def maximum(self, a: Any, b: Any) -> TensorHandle:
        """Elementwise maximum on the MATH engine."""
        return self._binary("maximum", np.maximum, a, b)

    def max(self, x: Any, axis: int | None = None) -> TensorHandle:
        """Reduction by maximum along ``axis`` on the MATH engine."""
        return self._reduce("max", np.max, x, axis)

    def sum(self, x: Any, axis: int | None = None) -> TensorHandle:
        """Reduction by sum along ``axis`` on the MATH engine."""
        return self._reduce("sum", np.sum, x, axis)

    def zeros(self, shape: tuple[int, ...], dtype: str = "f32") -> TensorHandle:
        """A new tile of zeros (written by the MATH engine)."""
        return self._fill("zeros", shape, 0, dtype)

    def full(self, shape: tuple[int, ...], value: float, dtype: str = "f32") -> TensorHandle:
        """A new tile filled with ``value`` (written by the MATH engine)."""
        return self._fill("full", shape, value, dtype)

    def _fill(self, op: str, shape: tuple[int, ...], value: float, dtype: str) -> TensorHandle:
        loc = self._caller(3) if self._emit is not None else None
        try:
            out = np.full(checked_shape(shape), value, dtype=to_numpy(dtype))
        except EmulatorError as e:
            raise self._error(type(e), e.detail, loc) from None
        cmd = self._compute(op, "math", self._pe.math, self._pe.math_cycles(out.size), out, loc)
        return TensorHandle(self, out, None, cmd)

    def _cast(self, x: TensorHandle, dtype: str) -> TensorHandle:
        loc = self._caller(3) if self._emit is not None else None
        try:
            out = x._values().astype(to_numpy(dtype))
        except EmulatorError as e:
            raise self._error(type(e), e.detail, loc) from None
        cycles = self._pe.math_cycles(out.size)
        cmd = self._compute("cast", "math", self._pe.math, cycles, out, loc, x)
        return TensorHandle(self, out, None, cmd)

    def _unary(self, op: str, fn: Callable, x: Any) -> TensorHandle:
        loc = self._caller(3) if self._emit is not None else None
        a = self._array(x, loc)
        out = fn(a)
        cmd = self._compute(op, "math", self._pe.math, self._pe.math_cycles(a.size), out, loc, x)
        return TensorHandle(self, out, None, cmd)

    def _binary(self, op: str, fn: Callable, x: Any, y: Any) -> TensorHandle:
        loc = self._caller(3) if self._emit is not None else None
        a, b = self._operand(x, loc), self._operand(y, loc)
        try:
            out = fn(a, b)
        except ValueError:
            raise self._error(
                ShapeError,
                f"operands of {op} have shapes {np.shape(a)} and {np.shape(b)}, "
                f"which do not broadcast",
                loc,
            ) from None
        if type(out) is not np.ndarray:  # numbers on both sides give a numpy scalar
            out = np.asarray(out)
        cycles = self._pe.math_cycles(out.size)
        cmd = self._compute(op, "math", self._pe.math, cycles, out, loc, x, y)
        return TensorHandle(self, out, None, cmd)

    def _reduce(self, op: str, fn: Callable, x: Any, axis: int | None) -> TensorHandle:
        loc = self._caller(3) if self._emit is not None else None
        a = self._array(x, loc)
        try:
            out = np.asarray(fn(a, axis=axis))
        except (ValueError, np.exceptions.AxisError):
            raise self._error(
                ShapeError, f"cannot reduce shape {a.shape} along axis {axis}", loc
            ) from None
        cmd = self._compute(op, "math", self._pe.math, self._pe.math_cycles(a.size), out, loc, x)
        return TensorHandle(self, out, None, cmd)

    def _compute(
        self,
        op: str,
        engine_name: str,
        engine,
        cycles: int,
        out: np.ndarray,
        loc: SourceLoc | None,
        a: Any = None,
        b: Any = None,
    ) -> int:
        """Record the command, block while the engine works (``loc`` None: not traced);
        returns its command id (the producer of its output).

        ``a`` and ``b``: its operands as the kernel passed them (tensors, arrays or
        numbers); traced, a READS follows its ISSUE for each loaded or received one.
        """
        launch, pe, env = self._launch, self._pe.pe, self._env
        now = env.now
        cmd = launch.next_cmd()
        dtype = _DTYPE_NAMES.get(out.dtype)
        if dtype is None:
            try:
                dtype = name_of(out.dtype)
            except EmulatorError as e:
                raise self._error(type(e), e.detail, loc) from None
        launch.log_op(now, pe, "compute", engine_name)
        next_time = env.peek()
        emit_compound = self._emit_compound
        if engine.busy or engine.queue:
            if emit_compound is not None:
                fields = (cmd, op, -1, -1, out.nbytes, out.shape, dtype, True, loc)
                emit_compound(
                    ISSUE_REQUESTED, now, pe, *fields, "compute", engine_name, engine.cid, cmd
                )
                if (isinstance(a, TensorHandle) and a.buffer is not None) or (
                    isinstance(b, TensorHandle) and b.buffer is not None
                ):
                    self._reads(cmd, now, pe, a, b)
            self._switch(engine.submit(cmd, cycles, recorded=emit_compound is not None))
            return cmd
        # A free engine: its hold's end is the completion (_block_until, inlined).
        if emit_compound is not None:
            # One call with every field spelled out (no tuple built to spread).
            cid = engine.cid
            emit_compound(
                ISSUE_GRANTED, now, pe, cmd, op, -1, -1, out.nbytes, out.shape, dtype, True, loc,
                "compute", engine_name, cid, cmd, cid, cmd,
            )  # fmt: skip
            # Most operands are computed tensors (no buffer): no call for them.
            if (isinstance(a, TensorHandle) and a.buffer is not None) or (
                isinstance(b, TensorHandle) and b.buffer is not None
            ):
                self._reads(cmd, now, pe, a, b)
            done = engine.submit(cmd, cycles, recorded=True)
        else:
            done = engine.submit(cmd, cycles)
        if next_time > engine.busy_until and launch.running:
            env.step()
        else:
            self._switch(done)
        return cmd

    def composite(
        self,
        a_ptr: int,
        a_shape: tuple[int, int],
        b_ptr: int,
        b_shape: tuple[int, int],
        out_ptr: int,
        *,
        tile: int,
        dtype: str = "f16",
        epilogues: Sequence[Any] = (),
        out_dtype: str = "f32",
    ) -> None:
        """C = epilogues(A @ B), pipelined tile by tile of A's rows by the PE's scheduler.

        A is (M, K) and B (K, N), both row-major ``dtype`` in HBM; C (M, N) of
        ``out_dtype`` is written row-major at ``out_ptr``. The scheduler keeps
        ``config.composite_depth`` tile loads in flight ahead of the GEMM, so
        tile j+1's DMA overlaps tile j's compute, and recycles each tile's
        scratch when its GEMM is done. Epilogues apply in order to each tile:
        "exp", "relu", ("scale", x), ("bias", ptr) with an f32 vector of N at
        ptr, ("cast", dtype). Blocks like tl.dot until the last tile landed.

            tl.composite(q_ptr, (256, 64), kt_ptr, (64, 512), s_ptr, tile=64,
                         epilogues=[("scale", 0.125), "exp"])
        """
        run_composite(
            self,
            self._caller(),
            a_ptr,
            a_shape,
            b_ptr,
            b_shape,
            out_ptr,
            tile=tile,
            dtype=dtype,
            epilogues=epilogues,
            out_dtype=out_dtype,
        )
