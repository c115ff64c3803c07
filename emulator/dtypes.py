"""The dtype names kernels use ("f16", "f32", ...) and their numpy equivalents."""

from __future__ import annotations

import numpy as np

from emulator.errors import DtypeError

NUMPY_DTYPES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
}
_NAMES = {v: k for k, v in NUMPY_DTYPES.items()}


def to_numpy(name: str) -> np.dtype:
    """The numpy dtype of a dtype name; DtypeError naming the known ones otherwise."""
    try:
        return NUMPY_DTYPES[name]
    except (KeyError, TypeError):
        known = ", ".join(NUMPY_DTYPES)
        raise DtypeError(f"unknown dtype {name!r} (known: {known})") from None


def name_of(dtype: np.dtype) -> str:
    """The dtype name of a numpy dtype; DtypeError if the emulator has none."""
    try:
        return _NAMES[dtype]
    except (KeyError, TypeError):
        pass
    try:
        return _NAMES[np.dtype(dtype)]
    except KeyError:
        raise DtypeError(f"numpy dtype {np.dtype(dtype)} has no emulator equivalent") from None


# Every f16 bit pattern's f32 value, by numpy's own cast: a lookup gives the very values
# astype does (NaN payloads included), in about half its time (numpy has no vector f16
# cast on the CPUs measured), and tl.dot converts every f16 tile it multiplies.
_F16_TO_F32 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


# The f32 values of f16 tiles converted for their digest at their wait (see f32_kept), by
# id of the array owning the tile's values: tl.dot converts the same tiles next and takes
# them from here. Entries hold their array (so its id is not reused while it is kept) and
# are few (a tile is multiplied soon after its wait; the least recently used goes first);
# one is dropped when kernel code gets hold of the array itself (a host read, which could
# write to it: see forget_f32).
_KEPT: dict[int, tuple[np.ndarray, np.ndarray]] = {}
KEPT_CONVERSIONS = 4


def f32_kept(array: np.ndarray) -> np.ndarray:
    """The f32 values of the C-contiguous f16 ``array`` that owns its data, kept for
    ``as_f32`` to return again (for it or its transpose) until ``forget_f32``."""
    # Taken flat and reshaped: numpy's take over a flat index is twice as fast.
    flat = _F16_TO_F32.take(array.view(np.uint16).reshape(-1), mode="clip")
    values = flat.reshape(array.shape)
    if len(_KEPT) >= KEPT_CONVERSIONS:
        del _KEPT[next(iter(_KEPT))]
    _KEPT[id(array)] = (array, values)
    return values


def forget_f32(array: np.ndarray) -> None:
    """Drop the kept f32 values of ``array`` (or of the array it is a view of)."""
    if _KEPT:
        owner = array if array.base is None else array.base
        kept = _KEPT.get(id(owner))
        if kept is not None and kept[0] is owner:
            del _KEPT[id(owner)]


def as_f32(array: np.ndarray) -> np.ndarray:
    """``array.astype(float32, copy=False)``, in the same memory order, faster for f16."""
    if array.dtype != _F16:
        return array.astype(_F32, copy=False)
    if _KEPT:
        owner = array if array.base is None else array.base
        kept = _KEPT.get(id(owner))
        if kept is not None and kept[0] is owner:
            # Used again, so dropped last: a tile every step multiplies (a decode's q, a
            # GEMM's B) stays converted while the streamed tiles come and go.
            _KEPT[id(owner)] = _KEPT.pop(id(owner))
            if array is owner:
                return kept[1]
            if array.shape == owner.shape[::-1] and array.strides == owner.strides[::-1]:
                return kept[1].T  # the transpose (tl.trans(k)), as the take below gives
    # mode="clip": every uint16 is in the table, so no index needs checking.
    if array.flags.c_contiguous:
        return _F16_TO_F32.take(array.view(np.uint16), mode="clip")
    if array.flags.f_contiguous:  # a transposed tile: the result is transposed alike
        return _F16_TO_F32.take(array.T.view(np.uint16), mode="clip").T
    return array.astype(_F32)
