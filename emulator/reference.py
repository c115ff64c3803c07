"""Scenario inputs drawn block by block from a seed, and numpy references computed block by block.

A long run's K/V can be most of the machine's memory: nothing here holds a
whole input or a float64 copy of one. An input is its seed and shape; its
blocks are drawn again, identically, whenever they are needed.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from emulator.dtypes import to_numpy
from emulator.memory import Memory

#: Elements drawn per block (a few MB, reused from block to block: fresh arrays of tens of
#: MB each cost page faults that dominate the drawing itself).
BLOCK_ELEMENTS = 1 << 20
#: Multiply-adds per product in the attention reference (see attention_reference).
SINGLE_THREAD_MACS = 1 << 17
#: Distinct values an input takes: one per random byte.
LEVELS = 256


@functools.cache
def normal_levels(dtype: str) -> np.ndarray:
    """The LEVELS quantiles of the standard normal at (i + 1/2) / LEVELS, in ``dtype``.

    A random byte picks one: inputs drawn this way are standard normal up to a
    quantisation finer than f16 resolves near zero, and six times faster to
    draw than numpy's normals, so building a long run's K/V stays well under
    the time its emulation takes. statistics.NormalDist is pure Python floats:
    the same table everywhere.
    """
    normal = statistics.NormalDist()
    quantiles = [normal.inv_cdf((i + 0.5) / LEVELS) for i in range(LEVELS)]
    return np.array(quantiles, dtype=to_numpy(dtype))


@dataclass(frozen=True)
class RandomInput:
    """A standard-normal array of ``shape`` and ``dtype`` defined by its seed, drawn in row blocks.

    Each element is a level of ``normal_levels`` picked by one byte of the
    seed's generator, in row-major order, ``block_rows`` rows (a multiple of
    ``row_multiple``) at a time. Nothing but the seed is kept: every reader
    draws the blocks again and gets the same values.
    """

    seed: np.random.SeedSequence
    shape: tuple[int, ...]
    dtype: str = "f16"
    row_multiple: int = 1

    @property
    def block_rows(self) -> int:
        row = math.prod(self.shape[1:])
        rows = max(BLOCK_ELEMENTS // max(row, 1), 1)
        return max(rows // self.row_multiple, 1) * self.row_multiple

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * to_numpy(self.dtype).itemsize

    def _levels(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, one level index per element of the block) for each block in order."""
        bits = np.random.default_rng(self.seed).bit_generator
        row = math.prod(self.shape[1:])
        step = self.block_rows
        for start in range(0, self.shape[0], step):
            count = min(step, self.shape[0] - start) * row
            yield start, bits.random_raw(-(-count // 8)).view(np.uint8)[:count]

    def blocks(self, as_dtype: type = np.float32) -> Iterator[np.ndarray]:
        """Consecutive row blocks of the array as ``as_dtype`` (float32 holds f16 exactly).

        Each block is a view of one buffer the next block overwrites: use it, or
        copy it, before asking for the next.
        """
        table = normal_levels(self.dtype).astype(as_dtype)
        buffer = np.empty(min(self.block_rows, self.shape[0]) * math.prod(self.shape[1:]), as_dtype)
        for _, levels in self._levels():
            block = buffer[: len(levels)]
            # The indices are bytes, always inside the table: "wrap" skips the bounds check.
            np.take(table, levels, out=block, mode="wrap")
            yield block.reshape(-1, *self.shape[1:])

    def whole(self) -> np.ndarray:
        """The whole array in its dtype (for the small ones: a query block, a bias)."""
        whole = np.empty(self.shape, to_numpy(self.dtype))
        self._fill(whole)
        return whole

    def store(self, memory: Memory, name: str | None = None) -> int:
        """Write the array into fresh HBM block by block, with no copy of it; return its
        address. ``name`` (say ``"K"``) names it in the trace (see Memory.name)."""
        addr = memory.alloc(self.nbytes)
        self._fill(memory.view(addr, self.shape, self.dtype))
        if name is not None:
            memory.name(name, addr, self.shape, self.dtype)
        return addr

    def _fill(self, target: np.ndarray) -> None:
        table = normal_levels(self.dtype)
        flat = target.reshape(-1)  # a view: target is contiguous
        row = math.prod(self.shape[1:])
        for start, levels in self._levels():
            np.take(table, levels, out=flat[start * row : start * row + len(levels)], mode="wrap")


def random_inputs(
    seed: int, *shapes: tuple[int, ...], dtypes: Iterable[str] | None = None
) -> list[RandomInput]:
    """One independent RandomInput per shape, all from ``seed``."""
    children = np.random.SeedSequence(seed).spawn(len(shapes))
    kinds = list(dtypes) if dtypes is not None else ["f16"] * len(shapes)
    pairs = zip(children, shapes, kinds, strict=True)
    return [RandomInput(child, tuple(shape), kind) for child, shape, kind in pairs]


def attention_reference(
    q: np.ndarray, k_blocks: Iterable[np.ndarray], v_blocks: Iterable[np.ndarray]
) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v over K/V given as matching row blocks.

    The online softmax (running max, running sum, rescaled accumulator) keeps
    one block's scores at a time, whatever the K/V length. Each block's
    products are float32 (f16 inputs are exact in it); the running state is
    float64, so error does not grow with the number of blocks.
    """
    q32 = q.astype(np.float32)
    rows, head_dim = q.shape
    scale = np.float32(1.0 / math.sqrt(head_dim))
    m = np.full(rows, -np.inf)
    total = np.zeros(rows)
    acc = np.zeros((rows, head_dim))
    # Products small enough (rows x step x head_dim <= 2^17 multiply-adds) that OpenBLAS runs
    # them on one thread: on a busy machine its threads wait on each other, and thin
    # products like these ran 4x slower threaded than not. At least 64 K/V rows a step,
    # so many query rows do not make a Python loop per row.
    step = max(SINGLE_THREAD_MACS // max(rows * head_dim, 1), 64)
    for k_block, v_block in zip(k_blocks, v_blocks, strict=True):
        for start in range(0, len(k_block), step):
            k = k_block[start : start + step].astype(np.float32, copy=False)
            v = v_block[start : start + step].astype(np.float32, copy=False)
            s = (q32 @ k.T) * scale
            m_new = np.maximum(m, s.max(axis=1))
            p = np.exp(s - m_new[:, None].astype(np.float32))
            alpha = np.exp(m - m_new)
            total = total * alpha + p.sum(axis=1, dtype=np.float64)
            acc = acc * alpha[:, None] + p @ v
            m = m_new
    return acc / total[:, None]


def close(name: str, got: np.ndarray, want: np.ndarray, *, rtol: float, atol: float) -> None:
    """AssertionError naming ``name`` and the largest error unless ``got`` is close to ``want``."""
    if not np.allclose(got.astype(np.float64), want, rtol=rtol, atol=atol):
        err = np.abs(got.astype(np.float64) - want).max()
        raise AssertionError(
            f"{name}: output differs from the numpy reference (max error {err:.4g})"
        )


#: How far a stored block may be from its reference and still count as right.
BLOCK_RTOL = 2e-2
BLOCK_ATOL = 2e-2

#: A block of an output tensor: per dimension, ``(start, stop)`` of its indices.
Bounds = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class BlockReference:
    """What one stored block of an output should hold, for ``Scenario(reference=...)``.

    ``reads`` lists the input slices the reference computed the block from, as the
    debugger names them (``"K[128:192, :]"``): a failed check then says which load
    took another slice (``waited K[192:256, :] where the reference used K[128:192, :]``).
    """

    want: np.ndarray
    reads: tuple[str, ...] = ()
    rtol: float = BLOCK_RTOL
    atol: float = BLOCK_ATOL


def whole_reference(
    outputs: dict[str, np.ndarray], *, rtol: float = BLOCK_RTOL, atol: float = BLOCK_ATOL
):
    """A ``Scenario(reference=...)`` cut from whole expected outputs, by tensor name:
    ``reference(name, bounds)`` is that block of ``outputs[name]`` (None for a tensor
    it does not know)."""

    def reference(name: str, bounds: Bounds) -> BlockReference | None:
        whole = outputs.get(name)
        if whole is None or len(bounds) != whole.ndim:
            return None
        block = whole[tuple(slice(start, stop) for start, stop in bounds)]
        return BlockReference(block, rtol=rtol, atol=atol)

    return reference
