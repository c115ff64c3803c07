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
