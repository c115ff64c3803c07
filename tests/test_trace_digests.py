"""Format 1.5: digests of each tensor waited, stored or sent, and the header's named tensors."""

from __future__ import annotations

import io
import math
import zlib

import numpy as np
import pytest
from test_trace_tables import outcome
from trace_synth import footer_record, header_record, pack_objects

from emulator import HardwareConfig, Memory, run_kernel
from emulator.dtypes import KEPT_CONVERSIONS, as_f32, f32_kept
from emulator.trace import wire
from emulator.trace.digests import Digest, digest_of
from emulator.trace.reader import read_trace, read_trace_tables
from emulator.trace.writer import TraceWriter

CFG = HardwareConfig(mesh_rows=1, mesh_cols=2)
ROWS, COLS = 8, 16


def softmax_rows(tl, x_ptr, y_ptr):
    """A small kernel: two row blocks loaded async, a blocking load, a store, a send."""
    pid = tl.program_id(0)
    if pid == 0:
        first = tl.load_async(x_ptr, (ROWS // 2, COLS), "f32")
        second = tl.load_async(x_ptr + ROWS // 2 * COLS * 4, (ROWS // 2, COLS), "f32")
        a, b = tl.wait(first), tl.wait(second)
        e = tl.exp(a - tl.max(a, axis=1)[:, None])
        tl.wait(tl.store(y_ptr, e / tl.sum(e, axis=1)[:, None]))
        tl.wait(tl.send("right", b))
    else:
        tl.wait(tl.recv_async("left", (ROWS // 2, COLS), "f32"))


@pytest.fixture(scope="module")
def small_run():
    """(x, trace bytes) of softmax_rows on 2 PEs, x with a NaN and an Inf in its second half."""
    x = np.random.default_rng(3).standard_normal((ROWS, COLS)).astype(np.float32)
    x[5, 2], x[6, 7] = np.nan, -np.inf
    memory = Memory(1 << 16)
    x_ptr = memory.put(x, name="X")
    y_ptr = memory.put(np.zeros((ROWS // 2, COLS), np.float32))
    out = io.BytesIO()
    run_kernel(softmax_rows, (x_ptr, y_ptr), (2,), memory, CFG, recorder=TraceWriter(out))
    return x, out.getvalue()


def expected(future: int, array: np.ndarray) -> Digest:
    finite = array[~np.isnan(array)]
    return Digest(
        future,
        float(finite.min()),
        float(finite.max()),
        float(finite.astype(np.float64).mean()),
        int(np.isnan(array).sum()),
        int(np.isinf(array).sum()),
        zlib.crc32(np.ascontiguousarray(array).tobytes()),
    )


def close(got: Digest, want: Digest) -> None:
    assert got._replace(mean=0.0) == want._replace(mean=0.0)
    assert math.isclose(got.mean, want.mean, rel_tol=1e-6) or got.mean == want.mean


def test_digests_of_loads_stores_sends_and_receives_match_numpy(small_run):
    x, data = small_run
    trace = read_trace(data)
    assert trace.version == (1, 6)  # with provenance; digests are 1.5
    ops = {e[5]: trace.strings[e[4]] for e in trace.events if e[0] == 4}  # future -> op
    # A digest for each tensor waited, stored or sent; none for computed ones.
    assert sorted(ops[f] for f in trace.digests) == [
        "load_async", "load_async", "recv_async", "send", "store"
    ]  # fmt: skip
    top, bottom = x[: ROWS // 2], x[ROWS // 2 :]
    by_op = {}
    for future, digest in trace.digests.items():
        by_op.setdefault(ops[future], []).append((future, digest))
    (f0, d0), (f1, d1) = sorted(by_op["load_async"])
    close(d0, expected(f0, top))
    close(d1, expected(f1, bottom))
    assert (d1.nan, d1.inf) == (1, 1)
    # What was sent is what was received, byte for byte.
    ((fs, sent),), ((_, received),) = by_op["send"], by_op["recv_async"]
    close(sent, expected(fs, bottom))
    assert sent[1:] == received[1:]
    e = np.exp(top - top.max(axis=1)[:, None])
    ((fstore, stored),) = by_op["store"]
    assert stored.crc32 == zlib.crc32((e / e.sum(axis=1)[:, None]).astype(np.float32).tobytes())


def test_both_read_paths_give_the_same_digests(small_run):
    _, data = small_run
    assert read_trace_tables(data, lambda _: None).digests == read_trace(data).digests
    assert outcome(read_trace, data) == outcome(read_trace_tables, data)


def test_named_tensors_are_in_the_header_with_defaults_for_unnamed(small_run):
    _, data = small_run
    tensors = read_trace(data).tensors
    assert [(t.name, t.shape, t.dtype, t.strides) for t in tensors] == [
        ("X", (ROWS, COLS), "f32", (COLS * 4, 4)),
        ("y", (ROWS // 2, COLS), "f32", (COLS * 4, 4)),  # the kernel's y_ptr
    ]


def test_a_run_without_digests_is_byte_identical_to_a_1_4_writers(small_run, monkeypatch):
    x, _ = small_run
    runs = []
    for digests in (False, False):
        memory = Memory(1 << 16)
        memory.put(x, name="X")
        out = io.BytesIO()
        run_kernel(
            softmax_rows, (0, 1024), (2,), memory, CFG, trace=out, digests=digests,
            provenance=False,
        )  # fmt: skip
        runs.append(out.getvalue())
    assert runs[0] == runs[1]
    trace = read_trace(runs[0])
    assert trace.version == (1, 3) and trace.digests == {} and trace.tensors == []


def test_digest_of_empty_and_integer_tensors():
    empty = digest_of(3, np.zeros((0, 4), np.float16))
    assert empty.future == 3 and math.isnan(empty.min) and empty.crc32 == 0
    ints = digest_of(1, np.array([[-7, 2], [9, 0]], np.int32))
    assert (ints.min, ints.max, ints.mean, ints.nan, ints.inf) == (-7.0, 9.0, 1.0, 0, 0)
    halves = digest_of(2, np.array([1.5, -2.0, np.nan], np.float16))
    assert (halves.min, halves.max, halves.mean, halves.nan) == (-2.0, 1.5, -0.25, 1)


HEADER_15 = {"version": [1, 5], "tensors": []}
GOOD = list(Digest(0, 1.0, 2.0, 1.5, 0, 0, 7).record())


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ([103, 0, 1, 2], "a digest is [103, future, min, max, mean, nan, inf, crc32], all ints"),
        ([103, 0, 1, 2, 3, 0, 0, "x"], "a digest is [103"),
        ([103, -1, 1, 2, 3, 0, 0, 0], "digest of future -1: not a future id"),
        ([103, 0, 1, 2, 3, -1, 0, 0], "NaN and Inf counts must be >= 0"),
        ([103, 0, 1, 2, 3, 0, 0, 1 << 32], "crc32 4294967296 is not a 32-bit value"),
        ([103, 0, 1 << 63, 2, 3, 0, 0, 0], "min, max and mean must be binary64 bits in an int64"),
    ],
)
def test_a_bad_digest_is_refused_on_both_paths(record, problem):
    data = pack_objects(header_record(**HEADER_15), record, footer_record(0))
    results = {outcome(read, data)[:3] for read in (read_trace, read_trace_tables)}
    assert len(results) == 1
    ((what, message, offset),) = results
    assert what == "error", message
    assert problem is None or problem in message
    assert "\n" not in message


def test_a_digest_twice_is_refused():
    data = pack_objects(header_record(**HEADER_15), GOOD, GOOD, footer_record(0))
    assert "digest of future 0 written twice" in outcome(read_trace, data)[1]


def test_a_digest_in_a_file_older_than_1_5_is_an_unknown_record():
    data = pack_objects(header_record(version=[1, 4]), GOOD, footer_record(0))
    message = outcome(read_trace, data)[1]
    assert "unknown record kind 103 (a digest, a definition record of format 1.5" in message
    assert outcome(read_trace_tables, data)[:3] == outcome(read_trace, data)[:3]


@pytest.mark.parametrize(
    ("tensors", "problem"),
    [
        ({"K": 1}, "header tensors must be an array of maps"),
        ([{"name": "K"}], "header tensor 0 must be a map of name, addr, shape, dtype and strides"),
        ([{"name": "", "addr": 0, "shape": [], "dtype": "f16", "strides": []}], "name must be"),
        ([{"name": "K\x1b[2J", "addr": 0, "shape": [1], "dtype": "f16", "strides": [2]}],
         "control characters"),
        ([{"name": "K", "addr": -4, "shape": [1], "dtype": "f16", "strides": [2]}], "addr"),
        ([{"name": "K", "addr": 0, "shape": [1], "dtype": "bf16", "strides": [2]}], "dtype"),
        ([{"name": "K", "addr": 0, "shape": [4, 8], "dtype": "f16", "strides": [2, 8]}],
         "row-major byte strides"),
        ([{"name": "K", "addr": 0, "shape": [1 << 62, 8], "dtype": "f16", "strides": [16, 2]}],
         "ends past the int64 range"),
        ([{"name": "K", "addr": 0, "shape": [1], "dtype": "f16", "strides": [2]}] * 2,
         "header tensor 1 repeats a name"),
    ],
)  # fmt: skip
def test_a_bad_tensor_table_is_refused_in_one_line(tensors, problem):
    data = pack_objects(header_record(version=[1, 5], tensors=tensors), footer_record(0))
    what, message, offset, _ = outcome(read_trace, data)
    assert what == "error" and problem in message and offset == 0, message
    assert "\x1b" not in message and "\n" not in message


def test_a_newer_reader_label_and_an_older_writer_drop_digests(small_run, monkeypatch):
    x, _ = small_run
    monkeypatch.setattr(wire, "FORMAT_VERSION", (1, 4))
    memory = Memory(1 << 16)
    x_ptr = memory.put(x, name="X")
    out = io.BytesIO()
    run_kernel(softmax_rows, (x_ptr, 1024), (2,), memory, CFG, recorder=TraceWriter(out))
    trace = read_trace(out.getvalue())
    assert trace.version == (1, 4) and trace.digests == {}


def reference_digest(future: int, array: np.ndarray) -> Digest:
    """What a digest says, computed plainly: NaNs left out, the sum in f32 for f16 data."""
    values = array.astype(np.float32) if array.dtype == np.float16 else array
    nan = np.isnan(values) if values.dtype.kind == "f" else np.zeros(values.shape, bool)
    kept = values[~nan]
    crc = zlib.crc32(np.ascontiguousarray(array).tobytes())
    if kept.size == 0:
        return Digest(future, math.nan, math.nan, math.nan, int(nan.sum()), 0, crc)
    with np.errstate(over="ignore", invalid="ignore"):
        mean = float(kept.sum()) / kept.size
    inf = int(np.isinf(kept).sum()) if kept.dtype.kind == "f" else 0
    return Digest(future, float(kept.min()), float(kept.max()), mean, int(nan.sum()), inf, crc)


def assert_same_digest(got: Digest, want: Digest, case: str) -> None:
    """Equal field by field (NaN equal to NaN), the mean to f32 rounding."""

    def fields(d: Digest) -> tuple:
        return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in d)

    assert fields(got._replace(mean=0.0)) == fields(want._replace(mean=0.0)), case
    if math.isfinite(want.mean):
        assert math.isclose(got.mean, want.mean, rel_tol=1e-6, abs_tol=1e-9), case
    else:
        assert fields(got)[3] == fields(want)[3], case


@pytest.mark.parametrize("dtype", ["f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1"])
def test_digest_of_every_dtype_matches_numpy_and_never_warns(dtype):
    rng = np.random.default_rng(7)
    whole = (rng.standard_normal((12, 10)) * 50).clip(-120, 120).astype(dtype)
    cases = {
        "tile": whole,
        "column block (not contiguous)": whole[:, 2:5],
        "transposed": whole.T,
        "one element": whole[:1, :1],
        "empty": whole[:0],
    }
    if dtype.startswith("f"):
        specials = whole.copy()
        specials[1, 1], specials[5, 0] = np.nan, np.nan
        specials[2, 3], specials[4, 4] = np.inf, -np.inf
        cases |= {
            "NaN and Inf": specials,
            "Inf, no NaN": np.where(whole > 60, np.inf, whole).astype(dtype),
            "all NaN": np.full((3, 4), np.nan, dtype),
            "+Inf and -Inf only": np.array([np.inf, -np.inf], dtype),
        }
    for case, array in cases.items():
        with np.errstate(all="raise"):  # no data makes a digest set off a numpy warning
            got = digest_of(9, array)
        assert_same_digest(got, reference_digest(9, array), case)


def test_a_finite_tile_whose_sum_overflows_has_an_infinite_mean_and_no_warning():
    big = float(np.float32(3e37))
    with np.errstate(all="raise"):
        got = digest_of(1, np.full((64, 64), big, np.float32))
    assert (got.min, got.max, got.mean, got.nan, got.inf) == (big, big, math.inf, 0, 0)


def test_a_digest_from_kept_f32_values_is_the_f16_tiles_digest():
    tile = np.random.default_rng(1).standard_normal((64, 128)).astype(np.float16)
    assert digest_of(4, tile, tile.astype(np.float32)) == digest_of(4, tile)
    tile[3, 3] = np.nan
    assert digest_of(4, tile, tile.astype(np.float32)) == digest_of(4, tile)


def test_a_tile_multiplied_every_step_stays_converted_while_streamed_tiles_pass():
    q = np.ones((8, 16), np.float16)
    q_values = f32_kept(q)
    streamed = []
    for step in range(3 * KEPT_CONVERSIONS):
        streamed.append(np.full((16, 16), step, np.float16))
        f32_kept(streamed[-1])  # the step's K tile, converted at its wait
        assert as_f32(q) is q_values, step  # tl.dot(q, ...): no conversion again
    assert as_f32(streamed[0]) is not as_f32(streamed[0])  # long gone: converted anew


def test_a_tile_written_after_a_host_read_is_multiplied_as_written(tmp_path):
    """The f32 conversion kept from a tile's wait (for its digest) is dropped once kernel
    code holds the array: a write through ``.data`` reaches the next tl.dot."""
    from emulator import run_kernel
    from emulator.memory import Memory

    got = {}

    def kernel(tl, ptr):
        x = tl.wait(tl.load_async(ptr, (8, 8), "f16"))
        x.data[:] = 2  # a host read, then a write into the tile's own array
        got["dot"] = tl.dot(x, tl.trans(x)).data

    memory = Memory(1 << 16)
    ptr = memory.put(np.ones((8, 8), np.float16))
    run_kernel(kernel, (ptr,), (1,), memory, trace=tmp_path / "t.kbt")
    assert (got["dot"] == 32).all()  # 8 products of 2 * 2, not of 1 * 1


@pytest.mark.parametrize("poison", [None, np.nan, np.inf, -np.inf, 60000.0])
def test_the_f16_fast_path_writes_the_general_paths_record(poison):
    from emulator.trace.digests import digest_record, f16_digest_record

    tile = np.random.default_rng(2).standard_normal((64, 128)).astype(np.float16)
    if poison is not None:
        tile[5, 7] = poison
    f32 = tile.astype(np.float32)
    assert f16_digest_record(7, tile, f32) == digest_record(7, tile)
    empty = np.zeros((0, 128), np.float16)
    assert f16_digest_record(8, empty, empty.astype(np.float32)) == digest_record(8, empty)
