"""tl.composite: argument checking and recording around the PE scheduler's CompositeJob."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from emulator.dtypes import to_numpy
from emulator.errors import EmulatorError, ScratchOverflowError, ShapeError
from emulator.hardware.composite import CompositeJob, Epilogue
from emulator.memory import check_shape
from emulator.recorder import ISSUE_LOGGED
from emulator.trace.schema import Kind, SourceLoc

# Kind members as module constants: reading Kind.X costs a descriptor lookup per event.
_ISSUE = Kind.ISSUE
_COMPLETE = Kind.COMPLETE

if TYPE_CHECKING:
    from emulator.kernel.tl import TL

EPILOGUE_HELP = '"exp", "relu", ("scale", x), ("bias", ptr_to_f32_of_N), ("cast", dtype)'


def run_composite(
    tl: TL,
    loc: SourceLoc,
    a_ptr: int,
    a_shape: tuple[int, int],
    b_ptr: int,
    b_shape: tuple[int, int],
    out_ptr: int,
    *,
    tile: int,
    dtype: str,
    epilogues: Sequence[Any],
    out_dtype: str,
) -> None:
    """Check the call, record it, run the job on the PE and block until it is done."""
    launch, pe = tl._launch, tl._pe
    try:
        a_shape, b_shape = check_shape(a_shape), check_shape(b_shape)
        np_dtype, np_out = to_numpy(dtype), to_numpy(out_dtype)
        if len(a_shape) != 2 or len(b_shape) != 2 or a_shape[1] != b_shape[0]:
            raise ShapeError(
                f"tl.composite needs A (M, K) and B (K, N), got {a_shape} and {b_shape}"
            )
        if not isinstance(tile, int) or tile < 1:
            raise ShapeError(f"tile must be a positive integer, got {tile!r}")
        m, k = a_shape
        n = b_shape[1]
        parsed, bias_ptr = _epilogues(epilogues)
        memory = launch.memory
        memory.check(a_ptr, m * k * np_dtype.itemsize)
        memory.check(b_ptr, k * n * np_dtype.itemsize)
        memory.check(out_ptr, m * n * np_out.itemsize)
        if bias_ptr is not None:
            memory.check(bias_ptr, n * 4)
    except EmulatorError as e:
        raise tl._error(type(e), e.detail, loc) from None

    depth = launch.config.composite_depth
    scratch = pe.scratch
    a_tile_bytes = min(tile, m) * k * np_dtype.itemsize
    need = scratch_needed(m, k, n, tile, depth, np_dtype.itemsize, bias_ptr is not None)
    free = scratch.capacity - scratch.in_use
    if need > free:
        raise tl._error(
            ScratchOverflowError,
            f"tl.composite at depth {depth} needs {need} bytes of scratch (B, bias and "
            f"{depth + 1} A tiles of {a_tile_bytes}) but {free} of {scratch.capacity} are free; "
            f"lower tile or composite_depth",
            loc,
        )

    pe_id, env, emit, emit_compound = pe.pe, tl._env, tl._emit, tl._emit_compound

    def issue(op, addr, nbytes, shape, dt, category, engine_op) -> int:
        cmd = launch.next_cmd()
        now = env.now
        if emit_compound is not None:
            fields = (cmd, op, -1, addr, nbytes, shape, dt, False, loc, category, engine_op)
            emit_compound(ISSUE_LOGGED, now, pe_id, *fields)
        launch.log_op(now, pe_id, category, engine_op)
        return cmd

    def alloc(nbytes: int) -> int:
        buffer = launch.next_buffer()
        scratch.alloc(buffer, nbytes)
        return buffer

    cmd = launch.next_cmd()
    if emit is not None:
        emit(
            _ISSUE,
            env.now,
            pe_id,
            cmd,
            "composite",
            -1,
            int(a_ptr),
            m * n * np_out.itemsize,
            (m, n),
            out_dtype,
            True,
            loc,
        )
    job = CompositeJob(
        pe,
        issue,
        a=(int(a_ptr), a_shape, dtype),
        b=(int(b_ptr), b_shape, dtype),
        bias_ptr=None if bias_ptr is None else int(bias_ptr),
        out_ptr=int(out_ptr),
        out_dtype=np_out,
        tile=tile,
        epilogues=parsed,
        depth=depth,
        alloc=alloc,
        free=scratch.free,
    )
    tl._block(env.process(job.run()))
    if emit is not None:
        emit(_COMPLETE, env.now, pe_id, cmd, -1)


def _epilogues(items: Sequence[Any]) -> tuple[list[Epilogue], int | None]:
    parsed: list[Epilogue] = []
    bias_ptr = None
    for item in items:
        op, args = (item, ()) if isinstance(item, str) else (item[0], tuple(item[1:]))
        if op in ("exp", "relu") and not args:
            parsed.append(Epilogue(op))
        elif op == "scale" and len(args) == 1 and isinstance(args[0], int | float):
            parsed.append(Epilogue(op, float(args[0])))
        elif op == "bias" and len(args) == 1 and isinstance(args[0], int) and bias_ptr is None:
            bias_ptr = args[0]
            parsed.append(Epilogue(op))
        elif op == "cast" and len(args) == 1:
            parsed.append(Epilogue(op, to_numpy(args[0])))
        else:
            raise EmulatorError(f"bad epilogue {item!r}: use {EPILOGUE_HELP} (one bias at most)")
    return parsed, bias_ptr


def scratch_needed(m: int, k: int, n: int, tile: int, depth: int, itemsize: int, bias: bool) -> int:
    """Scratch bytes a composite holds at most: B, the bias and ``depth + 1`` A tiles.

    Tile j's buffer is still held by its GEMM when the load ``depth`` tiles
    ahead is issued, hence the one extra.
    """
    a_tiles = min(depth + 1, math.ceil(m / tile)) * min(tile, m) * k * itemsize
    return k * n * itemsize + (n * 4 if bias else 0) + a_tiles
