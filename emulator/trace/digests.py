"""Tensor digests and named tensors (format 1.5): what a trace says about values and addresses.

A **digest** summarises one tensor a kernel received from ``tl.wait`` (a load or a
receive) or stored or sent: min, max, mean, the count of NaNs and of infinities, and
the CRC-32 of its bytes; its shape and dtype are those of its future's ISSUE. It is
written as a definition record ``[103, future, min, max, mean, nan, inf, crc32]``,
min, max and mean as the bits of an IEEE-754 binary64 in a signed int64 (so the
record is all ints, which the reader's fast path scans like any event). A **tensor**
is a named region of HBM, listed in the header's ``tensors``: ``{"name", "addr",
"shape", "dtype", "strides"}`` (strides in bytes, row-major). See traces/FORMAT.md.

Imported by the emulator (which computes digests) and by kbdebug.replay (which reads
them): numpy and the standard library only.
"""

from __future__ import annotations

import functools
import math
import struct
import zlib
from typing import Any, NamedTuple

import numpy as np

from emulator.trace import wire

#: Items of a digest record after its code: future, min, max, mean, nan, inf, crc32.
DIGEST_ITEMS = 7
#: Dimensions a named tensor may have.
MAX_TENSOR_DIMS = 8
#: UTF-8 bytes of a tensor's name.
MAX_TENSOR_NAME = 64
#: Element sizes of the dtype names a tensor or a digest may have.
ITEMSIZES = {"f16": 2, "f32": 4, "f64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "u8": 1}

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_F16 = np.dtype(np.float16)
_MIN, _MAX, _SUM = np.minimum.reduce, np.maximum.reduce, np.add.reduce
# Below this, |values| * their count, no sum of them overflows (half the dtype's largest
# finite value: room for the rounding of the partial sums).
_SAFE_SUM = {np.dtype(t): float(np.finfo(t).max) / 2 for t in (np.float32, np.float64)}
_SAFE_F32 = _SAFE_SUM[np.dtype(np.float32)]


@functools.cache
def _f16_to_f32() -> np.ndarray:
    """Every f16 bit pattern's f32 value: numpy has no vector f16 reduction, and a lookup
    then f32 reductions take a third of the time of reducing the f16 array itself."""
    return np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


class Digest(NamedTuple):
    """The summary of one tensor: its future, min, max, mean, NaN and Inf counts, CRC-32.

    min, max and mean are floats (NaN for an empty tensor, NaN when every element is
    NaN); min and max ignore NaNs.
    """

    future: int
    min: float
    max: float
    mean: float
    nan: int
    inf: int
    crc32: int

    def record(self) -> tuple[int, ...]:
        """The digest as its definition record (floats as their binary64 bits)."""
        lo, hi, mean = _AS_INT64S(_AS_DOUBLES(self.min, self.max, self.mean))
        return (wire.DEFINE_DIGEST, self.future, lo, hi, mean, self.nan, self.inf, self.crc32)

    @classmethod
    def from_record(cls, record: Any) -> Digest:
        """The digest of a definition record ``[103, ...]``; ValueError naming what is wrong."""
        problem = digest_problem(record)
        if problem is not None:
            raise ValueError(problem)
        future, lo, hi, mean, nan, inf, crc = record[1:]
        return cls(future, _float(lo), _float(hi), _float(mean), nan, inf, crc)


_DOUBLE, _INT64 = struct.Struct("<d"), struct.Struct("<q")
# Three doubles' bits as three int64s, in one pack and one unpack (a digest's three).
_AS_DOUBLES, _AS_INT64S = struct.Struct("<3d").pack, struct.Struct("<3q").unpack
_NAN_BITS = _INT64.unpack(_DOUBLE.pack(math.nan))[0]
_CODE = wire.DEFINE_DIGEST
_CRC32 = zlib.crc32


def _float(bits: int) -> float:
    return _DOUBLE.unpack(_INT64.pack(bits))[0]


def digest_problem(record: Any) -> str | None:
    """What is wrong with a digest record (see FORMAT.md, rule ``def.digest``), or None."""
    if (
        not isinstance(record, list | tuple)
        or len(record) != 1 + DIGEST_ITEMS
        or any(type(v) is not int for v in record)
    ):
        return "a digest is [103, future, min, max, mean, nan, inf, crc32], all ints"
    future, lo, hi, mean, nan, inf, crc = record[1:]
    if not 0 <= future <= _INT64_MAX:
        return f"digest of future {future}: not a future id"
    if not all(_INT64_MIN <= v <= _INT64_MAX for v in (lo, hi, mean)):
        return f"digest of future {future}: min, max and mean must be binary64 bits in an int64"
    if not (0 <= nan <= _INT64_MAX and 0 <= inf <= _INT64_MAX):
        return f"digest of future {future}: NaN and Inf counts must be >= 0"
    if not 0 <= crc < 2**32:
        return f"digest of future {future}: crc32 {crc} is not a 32-bit value"
    return None


def digest_of(future: int, array: np.ndarray, f32: np.ndarray | None = None) -> Digest:
    """The digest of ``array`` (any dtype the emulator has), for ``future``; ``f32``, if
    given, is the f32 values of an f16 ``array`` (computed once for a digest and a dot)."""
    return Digest.from_record(digest_record(future, array, f32))


def f16_digest_record(future: int, array: np.ndarray, f32: np.ndarray) -> tuple:
    """``digest_record(future, array, f32)`` of a C-contiguous f16 ``array`` and its f32
    values: the common case (every f16 tile a load or receive brings), with none of the
    checks the general case makes."""
    size = f32.size
    if not size:
        return digest_record(future, array, f32)
    lo, hi = float(_MIN(f32, None)), float(_MAX(f32, None))
    if -_SAFE_F32 < lo * size and hi * size < _SAFE_F32:
        bits = _AS_INT64S(_AS_DOUBLES(lo, hi, float(_SUM(f32, None)) / size))
        return (_CODE, future, *bits, 0, 0, _CRC32(array))
    return digest_record(future, array, f32)


def digest_record(future: int, array: np.ndarray, f32: np.ndarray | None = None) -> tuple:
    """``digest_of(future, array, f32).record()``, made without the Digest: what a
    TraceWriter writes at every wait, store and send."""
    # Taken at every wait, so the common case is a CRC and three reductions: no copy of
    # contiguous data (a reduction over all axes of a C-ordered array is one flat loop),
    # and no pass for NaNs or infinities, which only a non-finite min or max can hide
    # (NaN propagates through both).
    data = array if array.flags.c_contiguous else np.ascontiguousarray(array)
    crc = _CRC32(data)
    size = data.size
    if f32 is not None:
        values = f32
    else:
        dtype = data.dtype
        if dtype == _F16:
            values = _f16_to_f32().take(data.view(np.uint16).reshape(-1), mode="clip")
        elif dtype.kind != "f":
            if size == 0:
                return (_CODE, future, _NAN_BITS, _NAN_BITS, _NAN_BITS, 0, 0, crc)
            # sum() widens ints to 64 bits.
            lo, hi = float(_MIN(data, None)), float(_MAX(data, None))
            bits = _AS_INT64S(_AS_DOUBLES(lo, hi, float(data.sum()) / size))
            return (_CODE, future, *bits, 0, 0, crc)
        else:
            values = data
    if size == 0:
        return (_CODE, future, _NAN_BITS, _NAN_BITS, _NAN_BITS, 0, 0, crc)
    # min and max never warn, even of NaNs (numpy 2); a sum that may overflow would, and a
    # digest must not warn (NaN and Inf are counted here, not faults of ours).
    lo, hi = float(_MIN(values, None)), float(_MAX(values, None))
    safe = _SAFE_SUM[values.dtype]
    if -safe < lo * size and hi * size < safe:
        # Pairwise summation in the values' own dtype (f32 for f16 and f32 data): exact
        # enough for a mean, half the time of summing in f64, and the same on every
        # machine (a BLAS dot would be faster, but its rounding depends on the BLAS).
        # (Both bounds are false for a NaN or an infinity.)
        bits = _AS_INT64S(_AS_DOUBLES(lo, hi, float(_SUM(values, None)) / size))
        return (_CODE, future, *bits, 0, 0, crc)
    with np.errstate(invalid="ignore", over="ignore"):
        return _digest_counting(future, values, crc).record()


def _digest_counting(future: int, values: np.ndarray, crc: int) -> Digest:
    """The digest of float ``values`` that may hold NaNs and infinities: NaNs left out of
    min, max and mean, both counted."""
    nan_mask = np.isnan(values)
    nan = int(nan_mask.sum())
    inf = int(np.isinf(values).sum())
    finite = values[~nan_mask] if nan else values
    if finite.size == 0:
        return Digest(future, math.nan, math.nan, math.nan, nan, inf, crc)
    lo, hi, total = _MIN(finite, None), _MAX(finite, None), _SUM(finite, None)
    return Digest(future, float(lo), float(hi), float(total) / finite.size, nan, inf, crc)


class TensorDef(NamedTuple):
    """A named tensor in HBM, as the header's ``tensors`` lists it."""

    name: str
    addr: int
    shape: tuple[int, ...]
    dtype: str
    #: Bytes between consecutive elements of each dimension (row-major: C order).
    strides: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * ITEMSIZES[self.dtype]

    def header_entry(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "addr": self.addr,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "strides": list(self.strides),
        }


def row_major_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The byte strides of a C-ordered array of ``shape``."""
    strides, step = [], itemsize
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))


def read_tensors(value: Any) -> list[TensorDef]:
    """The header's ``tensors`` (rule ``header.tensors``); ValueError naming what is wrong."""
    if type(value) is not list:
        raise ValueError("header tensors must be an array of maps")
    tensors: list[TensorDef] = []
    names: set[str] = set()
    for i, entry in enumerate(value):
        problem = _tensor_problem(entry)
        if problem is None and entry["name"] in names:
            problem = "repeats a name"
        if problem is not None:
            raise ValueError(f"header tensor {i} {problem}")
        names.add(entry["name"])
        tensors.append(
            TensorDef(
                entry["name"],
                entry["addr"],
                tuple(entry["shape"]),
                entry["dtype"],
                tuple(entry["strides"]),
            )
        )
    return tensors


def _tensor_problem(entry: Any) -> str | None:
    if not isinstance(entry, dict) or set(entry) != {"name", "addr", "shape", "dtype", "strides"}:
        return "must be a map of name, addr, shape, dtype and strides"
    name, addr, shape, dtype = entry["name"], entry["addr"], entry["shape"], entry["dtype"]
    strides = entry["strides"]
    if not isinstance(name, str) or not name or len(name.encode("utf-8")) > MAX_TENSOR_NAME:
        return f"name must be a str of 1 to {MAX_TENSOR_NAME} bytes"
    if not name.isprintable():
        return "name has control characters"
    if type(addr) is not int or not 0 <= addr <= _INT64_MAX:
        return "addr must be an int >= 0"
    if dtype not in ITEMSIZES:
        return f"dtype must be one of {', '.join(ITEMSIZES)}"
    if (
        type(shape) is not list
        or len(shape) > MAX_TENSOR_DIMS
        or any(type(d) is not int or not 0 <= d <= _INT64_MAX for d in shape)
    ):
        return f"shape must be at most {MAX_TENSOR_DIMS} ints >= 0"
    if math.prod(shape) * ITEMSIZES[dtype] + addr > _INT64_MAX:
        return "ends past the int64 range"
    if type(strides) is not list or tuple(strides) != row_major_strides(
        tuple(shape), ITEMSIZES[dtype]
    ):
        return "strides must be the row-major byte strides of its shape"
    return None
