"""How a hazard names its bytes: a slice of a named tensor when the trace's header lists
the tensors (format 1.5 ``tensors``), else the address range.

The header is untrusted: an entry that is not a well-formed tensor is skipped, and the
name is returned as it is (callers escape it before a terminal).
"""

from __future__ import annotations

from typing import Any

#: Element sizes of the dtypes a named tensor may have.
_ITEMSIZES = {"f16": 2, "f32": 4, "f64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "u8": 1}
#: Longest tensor name shown.
MAX_NAME = 64


def byte_range_text(header: dict[str, Any], lo: int, hi: int) -> str:
    """``out[64:128]`` (rows of a named tensor holding [lo, hi)), ``out.flat[10:20]``
    (elements when not whole rows), or ``0x1000..0x1800 (2,048 bytes)``."""
    address = f"{lo:#x}..{hi:#x} ({hi - lo:,} bytes)"
    tensors = header.get("tensors") if isinstance(header, dict) else None
    if not isinstance(tensors, list):
        return address
    for entry in tensors:
        tensor = _tensor(entry)
        if tensor is None:
            continue
        name, addr, shape, itemsize = tensor
        size = itemsize
        for dim in shape:
            size *= dim
        if not addr <= lo < hi <= addr + size:
            continue
        start, stop = lo - addr, hi - addr
        row = size // shape[0] if shape and shape[0] else 0
        if len(shape) > 1 and row and start % row == 0 and stop % row == 0:
            return f"{name}[{start // row}:{stop // row}]"
        if start % itemsize == 0 and stop % itemsize == 0:
            if len(shape) == 1:
                return f"{name}[{start // itemsize}:{stop // itemsize}]"
            return f"{name}.flat[{start // itemsize}:{stop // itemsize}]"
        return f"{name} {address}"
    return address


def _tensor(entry: Any) -> tuple[str, int, tuple[int, ...], int] | None:
    """(name, address, shape, item size) of a row-major header tensor, None otherwise."""
    if not isinstance(entry, dict):
        return None
    name, addr, shape = entry.get("name"), entry.get("addr"), entry.get("shape")
    itemsize = _ITEMSIZES.get(entry.get("dtype"))  # type: ignore[arg-type]
    if not isinstance(name, str) or type(addr) is not int or itemsize is None:
        return None
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return None
    strides = entry.get("strides")
    step, expected = itemsize, []
    for dim in reversed(shape):
        expected.append(step)
        step *= max(dim, 1)
    if strides is not None and list(strides) != list(reversed(expected)):
        return None
    return name[:MAX_NAME], addr, tuple(shape), itemsize
