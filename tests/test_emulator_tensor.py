"""TensorHandle: arithmetic (with broadcasting), indexing and .to(dtype), and what each costs.

With CFG the MATH engine does 16 elements per cycle, so an op over a (4, 8)
result takes 2 cycles.
"""

from __future__ import annotations

import numpy as np
import pytest

from emulator import (
    DtypeError,
    HardwareConfig,
    Memory,
    ShapeError,
    TensorHandle,
    run_kernel,
)

CFG = HardwareConfig(
    hbm_bytes_per_cycle=64, hbm_latency=100, issue_cycles=4, math_elems_per_cycle=16
)
X = np.arange(32, dtype=np.float32).reshape(4, 8)
ROW = np.linspace(1, 2, 8, dtype=np.float32)
COL = np.array([1, 2, 3, 4], dtype=np.float32)


def run(kernel, *args, memory=None):
    return run_kernel(kernel, args, 1, memory or Memory(1 << 16), CFG)


def math_ops(result):
    return [op for op in result.op_log if (op.category, op.op) == ("compute", "math")]


def test_each_arithmetic_op_is_one_math_op_with_numpy_broadcasting():
    got = {}

    def kernel(tl):
        x = tl.zeros((4, 8)) + X  # 2 math ops (zeros, add)
        r = tl.zeros((8,)) + ROW  # 2
        c = tl.zeros((4,)) + COL  # 2
        got["add"] = np.asarray(x + r)  # (4, 8) + (8,)
        got["sub"] = np.asarray(x - c[:, None])  # (4, 8) - (4, 1)
        got["mul"] = np.asarray(x * r[None, :])
        got["div"] = np.asarray(x / c[:, None])
        got["neg"] = np.asarray(-x)

    result = run(kernel)
    np.testing.assert_array_equal(got["add"], X + ROW)
    np.testing.assert_array_equal(got["sub"], X - COL[:, None])
    np.testing.assert_array_equal(got["mul"], X * ROW)
    np.testing.assert_array_equal(got["div"], X / COL[:, None])
    np.testing.assert_array_equal(got["neg"], -X)
    assert len(math_ops(result)) == 6 + 5
    assert result.metrics["math_count"] == 11
    assert len(result.op_log) == 11


def test_python_scalars_on_either_side_are_one_math_op_each():
    got = {}

    def kernel(tl):
        x = tl.zeros((4, 8)) + X
        got["values"] = [np.asarray(v) for v in (2 * x, x * 2, 1 - x, x - 1, 1 + x, 8 / (x + 1))]
        got["types"] = {type(v) for v in (2 * x, 1.5 + x)}

    result = run(kernel)
    values = got["values"]
    for got_v, want in zip(values, (2 * X, X * 2, 1 - X, X - 1, 1 + X, 8 / (X + 1)), strict=True):
        np.testing.assert_allclose(got_v, want)
    assert got["types"] == {TensorHandle}
    # zeros, add, then 6 + 1 (the x + 1) + 2 (for the types).
    assert len(math_ops(result)) == 2 + 7 + 2


def test_numpy_scalars_and_arrays_on_the_left_still_go_through_math():
    got = {}

    def kernel(tl):
        x = tl.zeros((4, 8)) + X
        got["scaled"] = np.float32(0.5) * x
        got["shifted"] = ROW + x
        got["values"] = np.asarray(got["scaled"]), np.asarray(got["shifted"])

    result = run(kernel)
    assert isinstance(got["scaled"], TensorHandle)
    assert isinstance(got["shifted"], TensorHandle)
    np.testing.assert_array_equal(got["values"][0], 0.5 * X)
    np.testing.assert_array_equal(got["values"][1], ROW + X)
    assert len(math_ops(result)) == 2 + 2


def test_arithmetic_takes_result_elements_over_math_rate():
    def kernel(tl):
        x = tl.zeros((4, 8))  # 32 elements: 2 cycles
        r = tl.zeros((8,))  # 8 elements: 1 cycle
        x + r  # broadcast result has 32 elements: 2 cycles

    result = run(kernel)
    assert result.end_time == 5
    assert result.busy_cycles["pe0.math"] == 5


def test_indexing_is_free():
    got = {}

    def kernel(tl):
        x = tl.zeros((4, 8)) + X
        got["views"] = [np.asarray(v) for v in (x[:, None], x[None, :], x[0], x[1:3, ::2])]

    result = run(kernel)
    assert len(result.op_log) == 2
    assert result.end_time == 4
    shapes = [v.shape for v in got["views"]]
    assert shapes == [(4, 1, 8), (1, 4, 8), (8,), (2, 4)]
    np.testing.assert_array_equal(got["views"][3], X[1:3, ::2])


def test_index_of_a_loaded_tile_shares_its_scratch_buffer():
    mem = Memory(1 << 16)
    ptr = mem.put(X)
    got = {}

    def kernel(tl, p):
        x = tl.load(p, (4, 8), "f32")
        got["same"] = x[:, None].buffer is x.buffer

    run(kernel, ptr, memory=mem)
    assert got["same"]


def test_to_converts_dtype_and_is_one_math_op():
    got = {}

    def kernel(tl):
        x = tl.zeros((4, 8)) + X
        h = x.to("f16")
        got["h"] = (h.dtype, np.asarray(h).dtype, np.asarray(h))
        got["i"] = np.asarray(x.to("i32"))

    result = run(kernel)
    dtype, np_dtype, values = got["h"]
    assert (dtype, np_dtype) == ("f16", np.float16)
    np.testing.assert_array_equal(values, X.astype(np.float16))
    assert got["i"].dtype == np.int32
    assert [op.op for op in result.op_log] == ["math"] * 4
    assert result.end_time == 4 * 2


def test_to_unknown_dtype_names_it():
    def kernel(tl):
        x = tl.zeros((4, 8))
        x.to("f17")

    with pytest.raises(DtypeError, match="'f17'"):
        run(kernel)


def test_operands_that_do_not_broadcast_raise_shape_error_naming_both():
    def kernel(tl):
        x = tl.zeros((4, 8))
        x + tl.zeros((3,))

    with pytest.raises(ShapeError, match=r"\(4, 8\) and \(3,\)"):
        run(kernel)


@pytest.mark.parametrize("layout", ["c", "f", "strided"])
def test_dot_widens_every_f16_value_to_the_bits_astype_gives(layout):
    # tl.dot widens f16 tiles by a lookup table: every bit pattern (NaNs, infinities,
    # subnormals, -0) must come out as numpy's own cast, in the same memory order.
    from emulator.dtypes import as_f32

    tile = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(256, 256)
    x = {"c": tile, "f": tile.T, "strided": tile[::2, ::3]}[layout]
    got, want = as_f32(x), x.astype(np.float32)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert got.strides == want.strides
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
