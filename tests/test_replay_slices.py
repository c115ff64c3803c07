"""Byte ranges named as tensor slices (kbdebug.replay.slices), else by their address."""

from __future__ import annotations

import math

import pytest

from emulator.trace.digests import TensorDef, row_major_strides
from kbdebug.replay.slices import Tensors


def tensor(name: str, addr: int, shape: tuple[int, ...], dtype: str = "f16") -> TensorDef:
    itemsize = {"f16": 2, "f32": 4}[dtype]
    return TensorDef(name, addr, shape, dtype, row_major_strides(shape, itemsize))


K = tensor("K", 0x40000, (512, 128))  # 256 bytes a row
A = tensor("A_tiles", 0, (8, 2, 64, 64))  # tile-major: 8,192 bytes a tile
C = tensor("C", 0x80000, (4, 6), "f32")
TENSORS = Tensors([K, A, C])


@pytest.mark.parametrize(
    ("addr", "nbytes", "shown"),
    [
        (0x40000 + 128 * 256, 64 * 256, "K[128:192, :]"),  # a tile of rows
        (0x40000, 512 * 256, "K[:, :]"),  # the whole tensor
        (0x40000 + 3 * 256, 256, "K[3, :]"),  # one row
        (0x40000 + 3 * 256 + 64 * 2, 64 * 2, "K[3, 64:128]"),  # part of a row
        (0x40000 + 3 * 256 + 5 * 2, 2, "K[3, 5]"),  # one element
        ((1 * 2 + 0) * 8192, 8192, "A_tiles[1, 0, :, :]"),  # one tile of a 4-d layout
        (2 * 16384, 2 * 16384, "A_tiles[2:4, :, :, :]"),
        (0x80000 + 4 * 6, 4 * 6 * 3, "C[1:4, :]"),
    ],
)
def test_a_rectangular_range_is_named_as_its_slice(addr, nbytes, shown):
    assert TENSORS.where(addr, nbytes) == shown
    found = TENSORS.slice_of(addr, nbytes)
    assert found is not None and str(found) == shown
    itemsize = 4 if found.tensor.dtype == "f32" else 2
    assert math.prod(found.shape) * itemsize == nbytes


@pytest.mark.parametrize(
    ("addr", "nbytes", "why"),
    [
        (0x40000 + 3 * 256 + 64 * 2, 256, "rows that wrap: the end of row 3 and the start of 4"),
        (0x40000 + 1, 256, "not on an element boundary"),
        (0x40000 + 511 * 256, 512, "past the tensor's end"),
        (0x40000 - 256, 512, "starting before the tensor"),
        (0x60000, 256, "in no tensor"),
        (0x40000, 0, "no bytes"),
        (-1, 256, "no address (a send)"),
        (8192 + 4096, 8192, "half of one tile and half of the next"),
        (0x80000 + 4, 4 * 6, "a row's worth, shifted by one element"),
    ],
)
def test_a_range_that_is_no_slice_is_shown_by_its_address(addr, nbytes, why):
    assert TENSORS.slice_of(addr, nbytes) is None, why
    shown = TENSORS.where(addr, nbytes)
    assert shown == ("" if addr < 0 else f"{addr:#x} + {nbytes:,} bytes")


def test_a_trace_without_tensors_shows_addresses():
    assert Tensors([]).where(0x40000, 8192) == "0x40000 + 8,192 bytes"


def test_the_innermost_of_nested_tensors_names_the_range():
    rows = tensor("K_block", 0x40000 + 64 * 256, (64, 128))
    tensors = Tensors([K, rows])
    assert tensors.where(0x40000 + 64 * 256, 16 * 256) == "K_block[0:16, :]"
    assert tensors.where(0x40000, 16 * 256) == "K[0:16, :]"


def test_a_header_of_many_tensors_is_searched_in_bounded_time():
    many = Tensors([tensor(f"t{i}", i * 64, (32,)) for i in range(65536)])
    assert many.where(65535 * 64 + 8, 16) == "t65535[4:12]"
    # 32,768 tensors nested at one base: only the 64 nearest (innermost) are looked at,
    # and none of them holds byte 60,000: it is shown by its address.
    nested = Tensors([tensor(f"n{i}", 0, (32768 - i,)) for i in range(32768)])
    assert nested.where(60000, 2) == "0xea60 + 2 bytes"
    assert nested.where(100, 2) == "n32717[50]"  # the innermost that holds it
