"""CompositeJob: the PE scheduler's own tile pipeline for a tiled GEMM with math epilogues.

The scheduler streams row tiles of A through the GEMM engine: it keeps
``depth`` tile loads in flight on the DMA read channel(s) ahead of the GEMM,
runs each tile's epilogues on the MATH engine, writes the tile on the write
channel, and recycles each tile's scratch as soon as the tile is done. It uses
the same channels as everything else, so a kernel's own load_async traffic
contends with it for real.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from emulator.dtypes import name_of, to_numpy
from emulator.hardware.pe import ProcessingElement


@dataclass(frozen=True)
class Epilogue:
    """One elementwise step after the GEMM: scale, bias, exp, relu or cast."""

    op: str
    #: The scale factor, the bias vector, or the cast's numpy dtype.
    arg: Any = None

    def apply(self, x: np.ndarray) -> np.ndarray:
        if self.op == "scale":
            return x * np.float32(self.arg)
        if self.op == "bias":
            return x + self.arg
        if self.op == "exp":
            return np.exp(x)
        if self.op == "relu":
            return np.maximum(x, 0)
        if self.op == "cast":
            return x.astype(self.arg)
        raise AssertionError(self.op)


#: issue(op, addr, nbytes, shape, dtype, category, engine_op) -> command id; records the command.
IssueFn = Callable[[str, int, int, tuple[int, ...], str, str, str], int]


class CompositeJob:
    """One tl.composite call: C[rows] = epilogues(A[rows] @ B) tile by tile of rows.

    B (and a bias, if an epilogue adds one) is loaded once first; each A tile's
    scratch is recycled once its GEMM is done; output tiles go from the
    engines straight to the write channel.
    """

    def __init__(
        self,
        pe: ProcessingElement,
        issue: IssueFn,
        *,
        a: tuple[int, tuple[int, int], str],
        b: tuple[int, tuple[int, int], str],
        bias_ptr: int | None,
        out_ptr: int,
        out_dtype: np.dtype,
        tile: int,
        epilogues: list[Epilogue],
        depth: int,
        alloc: Callable[[int], int],
        free: Callable[[int], None],
    ):
        self.pe = pe
        self.issue = issue
        self.a_ptr, self.a_shape, self.a_dtype = a
        self.b_ptr, self.b_shape, self.b_dtype = b
        self.bias_ptr = bias_ptr
        self.out_ptr = out_ptr
        self.out_dtype = out_dtype
        self.tile = tile
        self.epilogues = epilogues
        self.depth = depth
        self.alloc = alloc
        self.free = free

    @property
    def n_tiles(self) -> int:
        return math.ceil(self.a_shape[0] / self.tile)

    def _read(self, addr: int, shape: tuple[int, ...], dtype: str) -> tuple[simpy.Event, int]:
        nbytes = math.prod(shape) * to_numpy(dtype).itemsize
        buffer = self.alloc(nbytes)
        cmd = self.issue("composite.load", addr, nbytes, shape, dtype, "memory", "dma_read")
        return self.pe.read(cmd, -1, addr, shape, dtype, nbytes), buffer

    def _load_tile(self, j: int) -> tuple[simpy.Event, int]:
        m, k = self.a_shape
        rows = min(self.tile, m - j * self.tile)
        addr = self.a_ptr + j * self.tile * k * to_numpy(self.a_dtype).itemsize
        return self._read(addr, (rows, k), self.a_dtype)

    def run(self) -> Generator[simpy.Event, Any, None]:
        """The SimPy process: completes when the last tile has landed in HBM."""
        pe = self.pe
        n = self.n_tiles
        b_event, b_buffer = self._read(self.b_ptr, self.b_shape, self.b_dtype)
        bias_event = bias_buffer = None
        if self.bias_ptr is not None:
            bias_event, bias_buffer = self._read(self.bias_ptr, (self.b_shape[1],), "f32")
        in_flight = [self._load_tile(j) for j in range(min(self.depth, n))]
        next_load = len(in_flight)
        b = (yield b_event).astype(np.float32, copy=False)
        epilogues = self.epilogues
        if bias_event is not None:
            bias = yield bias_event
            epilogues = [Epilogue("bias", bias) if e.op == "bias" else e for e in epilogues]
        stores: list[simpy.Event] = []
        for j in range(n):
            event, a_buffer = in_flight.pop(0)
            a = yield event
            # The tile has arrived: its slot goes to the tile `depth` ahead.
            if next_load < n:
                in_flight.append(self._load_tile(next_load))
                next_load += 1
            out = a.astype(np.float32, copy=False) @ b
            cmd = self.issue("composite.gemm", -1, out.nbytes, out.shape, "f32", "compute", "gemm")
            yield pe.compute(pe.gemm, cmd, pe.gemm_cycles(a.shape[0] * a.shape[1] * b.shape[1]))
            self.free(a_buffer)
            for epilogue in epilogues:
                out = epilogue.apply(out)
                cmd = self.issue(
                    f"composite.{epilogue.op}",
                    -1,
                    out.nbytes,
                    out.shape,
                    name_of(out.dtype),
                    "compute",
                    "math",
                )
                yield pe.compute(pe.math, cmd, pe.math_cycles(out.size))
            out = np.ascontiguousarray(out.astype(self.out_dtype, copy=False))
            addr = self.out_ptr + j * self.tile * out.shape[1] * self.out_dtype.itemsize
            cmd = self.issue(
                "composite.store",
                addr,
                out.nbytes,
                out.shape,
                name_of(out.dtype),
                "memory",
                "dma_write",
            )
            stores.append(pe.write(cmd, -1, addr, out))
        self.free(b_buffer)
        if bias_buffer is not None:
            self.free(bias_buffer)
        for store in stores:
            if not store.processed:
                yield store
