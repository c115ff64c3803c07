"""Memory: the HBM as a numpy byte array with a bump allocator and bounds-checked access."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from emulator.dtypes import name_of, to_numpy
from emulator.errors import AddressError, DtypeError, ShapeError

ALIGN = 64
#: UTF-8 bytes of a tensor's name.
MAX_NAME_BYTES = 64


class NamedRegion(NamedTuple):
    """A tensor put in HBM: its name (None until the launch names it), address, shape, dtype."""

    name: str | None
    addr: int
    shape: tuple[int, ...]
    dtype: str


class Memory:
    """Byte-addressed HBM shared by every PE of a launch; reads return real bytes."""

    def __init__(self, size_bytes: int = 1 << 26):
        if not isinstance(size_bytes, int) or size_bytes <= 0:
            raise ValueError(f'"size_bytes" must be a positive integer, got {size_bytes!r}')
        #: The bytes themselves.
        self.data = np.zeros(size_bytes, dtype=np.uint8)
        #: Next free address of the bump allocator.
        self.next_free = 0
        #: The tensors put or named, in order (the trace's header lists them, so that a
        #: load shows as ``K[128:192, :]``); unnamed ones get a name at launch.
        self.tensors: list[NamedRegion] = []

    @property
    def size_bytes(self) -> int:
        return self.data.size

    def alloc(self, nbytes: int) -> int:
        """Reserve ``nbytes`` (aligned to 64) and return their address."""
        addr = self.next_free
        end = addr + max(int(nbytes), 1)
        if end > self.size_bytes:
            raise AddressError(
                f"out of HBM: {nbytes} bytes requested at {addr}, memory is {self.size_bytes} bytes"
            )
        self.next_free = -(-end // ALIGN) * ALIGN
        return addr

    def put(self, array: np.ndarray, name: str | None = None) -> int:
        """Copy ``array`` into fresh HBM and return its address; ``name`` (say ``"K"``)
        is how the debugger shows its slices (default: the kernel parameter given its
        address, else ``in0``, ``in1``...)."""
        array = np.ascontiguousarray(array)
        dtype = name_of(array.dtype)
        self._check_name(name)
        addr = self.alloc(array.nbytes)
        self.data[addr : addr + array.nbytes] = array.view(np.uint8).reshape(-1)
        self.tensors.append(NamedRegion(name, addr, tuple(array.shape), dtype))
        return addr

    def name(self, name: str, addr: int, shape: tuple[int, ...], dtype: str = "f16") -> None:
        """Name the row-major tensor of ``shape`` and ``dtype`` at ``addr`` (one ``alloc``
        made, or filled through ``view``), as ``put(..., name=)`` does."""
        if name is None:
            raise ValueError('"name" must be a str')
        self._check_name(name)
        np_dtype = to_numpy(dtype)
        shape = check_shape(shape)
        self.check(addr, math.prod(shape) * np_dtype.itemsize)
        self.tensors.append(NamedRegion(name, int(addr), shape, dtype))

    def _check_name(self, name: str | None) -> None:
        if name is None:
            return
        if (
            not isinstance(name, str)
            or not name
            or not name.isprintable()
            or len(name.encode("utf-8")) > MAX_NAME_BYTES
        ):
            raise ValueError(
                f'"name" must be a printable str of 1 to {MAX_NAME_BYTES} bytes, got {name!r:.80}'
            )
        if any(t.name == name for t in self.tensors):
            raise ValueError(f"a tensor is already named {name!r}")

    def check(self, addr: int, nbytes: int) -> None:
        """Raise AddressError unless [addr, addr + nbytes) lies inside the memory."""
        if not isinstance(addr, int | np.integer) or isinstance(addr, bool):
            raise AddressError(f"address must be an integer, got {addr!r}")
        if addr < 0 or addr + nbytes > self.size_bytes:
            raise AddressError(
                f"address range [{addr}, {addr + nbytes}) is outside HBM of {self.size_bytes} bytes"
            )

    def get(self, addr: int, shape: tuple[int, ...], dtype: str = "f16") -> np.ndarray:
        """A copy of the array of ``shape`` and ``dtype`` stored at ``addr``."""
        # Every load's data comes through here: inlined rather than a call to view().
        try:
            np_dtype = to_numpy(dtype)
        except DtypeError:
            np_dtype = _numpy_dtype(dtype)  # a check's np.float32 names its dtype too
        shape = check_shape(shape)
        nbytes = math.prod(shape) * np_dtype.itemsize
        self.check(addr, nbytes)
        return self.data[addr : addr + nbytes].view(np_dtype).reshape(shape).copy()

    def read(self, addr: int, nbytes: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A copy of the ``nbytes`` at ``addr`` as an array of ``shape`` and ``dtype``, all
        checked already (``check``, ``check_shape``) when the load was issued.

        Every DMA read's data comes through here when its channel is granted: checking
        again there cost as much as the copy.
        """
        return self.data[addr : addr + nbytes].view(dtype).reshape(shape).copy()

    def view(self, addr: int, shape: tuple[int, ...], dtype: str = "f16") -> np.ndarray:
        """The array of ``shape`` and ``dtype`` at ``addr`` as a view of the memory: writes land.

        Filling a large input block by block through it makes no copy of the whole.
        """
        np_dtype = to_numpy(dtype)
        shape = check_shape(shape)
        nbytes = math.prod(shape) * np_dtype.itemsize
        self.check(addr, nbytes)
        return self.data[addr : addr + nbytes].view(np_dtype).reshape(shape)

    def write(self, addr: int, array: np.ndarray) -> None:
        """Store ``array``'s bytes at ``addr``."""
        array = np.ascontiguousarray(array)
        self.check(addr, array.nbytes)
        self.data[addr : addr + array.nbytes] = array.view(np.uint8).reshape(-1)


def check_shape(shape: object) -> tuple[int, ...]:
    """A shape as a tuple of non-negative ints; ShapeError otherwise."""
    if isinstance(shape, int | np.integer) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(int(d) for d in shape)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ShapeError(f"shape must be a tuple of integers, got {shape!r}") from None
    if any(d < 0 for d in dims) or any(
        isinstance(d, bool) or not isinstance(d, int | np.integer)
        for d in shape  # type: ignore[union-attr]
    ):
        raise ShapeError(f"shape must be a tuple of non-negative integers, got {shape!r}")
    return dims


def _numpy_dtype(dtype) -> np.dtype:
    """``dtype`` given as numpy's (``np.float32``, ``np.dtype("f4")``) when the emulator
    has it; DtypeError naming the known names otherwise."""
    try:
        return to_numpy(name_of(np.dtype(dtype)))
    except (TypeError, ValueError):
        return to_numpy(dtype)  # raises DtypeError naming the known ones
