"""Tensor slices: an HBM byte range named as a slice of a named tensor, ``K[128:192, :]``.

Pure and Textual-free. A trace of format 1.5 lists its named tensors in the header
(``emulator.trace.digests.TensorDef``: base address, shape, dtype, row-major
strides); a load, store or future moves one contiguous byte range. That range is a
slice when it is a rectangular box of one tensor: whole trailing dimensions, a range
of one dimension, single indices before it. Anything else (between two tensors, past
one's end, not on an element boundary, rows that wrap) is shown by its address.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

from emulator.trace.digests import ITEMSIZES, TensorDef, read_tensors

#: Tensors starting at or before a range that the search for the one holding it looks at.
MAX_NESTED = 64


class TensorSlice(NamedTuple):
    """A box of a named tensor: per dimension, ``(start, stop)`` of its indices."""

    tensor: TensorDef
    bounds: tuple[tuple[int, int], ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(stop - start for start, stop in self.bounds)

    def __str__(self) -> str:
        parts = []
        for (start, stop), dim in zip(self.bounds, self.tensor.shape, strict=True):
            if start == 0 and stop == dim:
                parts.append(":")
            elif stop == start + 1:
                parts.append(str(start))
            else:
                parts.append(f"{start}:{stop}")
        return f"{self.tensor.name}[{', '.join(parts)}]" if parts else self.tensor.name


class Tensors:
    """The named tensors of a trace, found by address."""

    def __init__(self, tensors: Sequence[TensorDef]) -> None:
        # By base, the largest first: of tensors at one base, the innermost is nearest.
        self.tensors = sorted(tensors, key=lambda t: (t.addr, -t.nbytes))
        self._starts = [t.addr for t in self.tensors]
        # Per position, the furthest end of the tensors up to it: where no earlier tensor
        # reaches a range's end, the search for one holding it stops.
        self._reach = list(itertools.accumulate((t.addr + t.nbytes for t in self.tensors), max))

    def __len__(self) -> int:
        return len(self.tensors)

    def containing(self, addr: int, nbytes: int) -> TensorDef | None:
        """The tensor whose bytes hold all of ``[addr, addr + nbytes)``, if one does."""
        at = bisect.bisect_right(self._starts, addr) - 1
        # Tensors may overlap (one named inside another): the innermost that holds it,
        # among the MAX_NESTED that start nearest before it (a trace's header may list
        # 65,536 tensors: a lookup never walks them all).
        best = None
        stop = max(at - MAX_NESTED, -1)
        while at > stop and self._reach[at] >= addr + nbytes:
            tensor = self.tensors[at]
            if addr + nbytes <= tensor.addr + tensor.nbytes and (
                best is None or tensor.nbytes < best.nbytes
            ):
                best = tensor
            at -= 1
        return best

    def slice_of(self, addr: int, nbytes: int) -> TensorSlice | None:
        """The slice of a tensor that ``[addr, addr + nbytes)`` is exactly, or None."""
        if addr < 0 or nbytes <= 0:
            return None
        tensor = self.containing(addr, nbytes)
        if tensor is None:
            return None
        return box(tensor, addr - tensor.addr, nbytes)

    def where(self, addr: int, nbytes: int) -> str:
        """``K[128:192, :]``, or ``0x40000 + 8,192 bytes`` when no slice is that range."""
        found = self.slice_of(addr, nbytes)
        if found is not None:
            return str(found)
        return address_text(addr, nbytes)


def header_tensors(header: dict) -> Tensors | None:
    """The named tensors a trace's header lists (format 1.5), None when it names none."""
    listed = header.get("tensors")
    if not listed:
        return None
    try:
        return Tensors(read_tensors(listed))
    except ValueError:  # checked when the trace was read; a hand-made index may lack it
        return None


def address_text(addr: int, nbytes: int) -> str:
    """A byte range as the debugger showed it before tensors had names."""
    if addr < 0:
        return ""
    return f"{addr:#x} + {nbytes:,} bytes"


def box(tensor: TensorDef, offset: int, nbytes: int) -> TensorSlice | None:
    """The box of ``tensor`` (row-major) covering exactly the bytes ``[offset, offset +
    nbytes)`` of it, or None if those bytes are no box."""
    itemsize = ITEMSIZES[tensor.dtype]
    shape = tensor.shape
    if offset < 0 or offset % itemsize or nbytes % itemsize or not shape:
        return None
    first, count = offset // itemsize, nbytes // itemsize
    if count <= 0 or first + count > math.prod(shape):
        return None
    inner = math.prod(shape)
    for j, dim in enumerate(shape):
        inner //= dim if dim else 1
        # Dimensions after j whole, a range of dimension j, single indices before it.
        if inner == 0 or first % inner or count % inner:
            continue
        rows, row = count // inner, first // inner
        start = row % dim
        if start + rows > dim:
            continue
        outer = row // dim
        prefix = []
        for size in reversed(shape[:j]):
            outer, index = divmod(outer, size)
            prefix.append((index, index + 1))
        bounds = (*reversed(prefix), (start, start + rows), *((0, d) for d in shape[j + 1 :]))
        return TensorSlice(tensor, tuple(bounds))
    return None
