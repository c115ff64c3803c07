"""The bulk scan (emulator/trace/bulk.py, bulk_columns.py) finds what its reference version found.

The reference is the scan before its per-block speed work (tests/_bulk_reference.py):
find_records and scan_block must give equal Records and BlockScans on the bundled
traces, a recorded multi-PE run, generated streams of event and definition records
(wide ints of every width and sign, bools, compounds of 16 items or more, records of
the wrong shape, foreign tokens) cut anywhere, and bytes at random.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import _bulk_reference as reference
import msgpack
import numpy as np
import pytest
from _shared_fuzz import cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_synth import decode_like_events, record_run

from emulator.trace import bulk, wire
from emulator.trace.schema import COMPOUNDS, FIELDS
from emulator.trace.writer import TraceWriter

# The reference predates format 1.5's digest records: copies of the bundled traces of 1.3.
TRACES = sorted((Path(__file__).resolve().parent / "data" / "old_traces").glob("*.kbt"))


def fields_equal(a: object, b: object) -> bool:
    """Equal as scan results: arrays by value, containers and dataclasses field by field."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(fields_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(fields_equal(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "__dataclass_fields__"):
        return type(a).__name__ == type(b).__name__ and all(
            fields_equal(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__
        )
    return a == b


def assert_same_scan(block: bytes) -> None:
    """Both versions find the same records in ``block``, and scan them alike (with and
    without compound records)."""
    found, expected = bulk.find_records(block), reference.find_records(block)
    assert fields_equal(found, expected)
    assert found.stop == expected.stop
    for compounds in (False, True):
        # The reference knows every event kind of the schema, and compounds or not.
        codes = frozenset([*FIELDS, *(COMPOUNDS if compounds else ())])
        scan = bulk.scan_block(block, bulk.event_mask(codes))
        assert fields_equal(scan, reference.scan_block(block, compounds))


def record_starts(data: bytes) -> list[int]:
    """The offset of every top-level object of ``data``."""
    unpacker = msgpack.Unpacker(raw=True, strict_map_key=False)
    unpacker.feed(data)
    starts = []
    while True:
        starts.append(unpacker.tell())
        try:
            unpacker.skip()
        except msgpack.OutOfData:
            return starts[:-1]


def blocks_of(data: bytes, count: int, size: int, seed: int) -> list[bytes]:
    """``count`` blocks of up to ``size`` bytes from record starts of ``data`` chosen at
    random, each also cut short at a random byte, and from random offsets."""
    rng = random.Random(seed)
    starts = record_starts(data)
    chosen = []
    for start in rng.sample(starts, min(count, len(starts))):
        chosen.append(data[start : start + size])
        chosen.append(data[start : start + rng.randrange(1, size)])
        at = rng.randrange(len(data))
        chosen.append(data[at : at + size])
    return chosen


@pytest.fixture(scope="module")
def multi_pe_run() -> bytes:
    out = io.BytesIO()
    record_run(TraceWriter(out), decode_like_events(3000, n_pes=4))
    return out.getvalue()


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_bundled_trace_scans_alike(path):
    data = path.read_bytes()
    for block in blocks_of(data, 12, 4096, seed=len(data)):
        assert_same_scan(block)
    starts = record_starts(data)
    assert_same_scan(data[starts[1] :])  # the whole trace after its header, in one block


def test_multi_pe_run_scans_alike(multi_pe_run):
    for block in blocks_of(multi_pe_run, 20, 8192, seed=1):
        assert_same_scan(block)
    assert_same_scan(multi_pe_run[record_starts(multi_pe_run)[1] :])


def test_random_bytes_scan_alike():
    rng = random.Random(13)
    for size in (0, 1, 2, 9, 10, 100, 3000):
        for _ in range(20):
            assert_same_scan(rng.randbytes(size))
            # Bytes mostly of tokens the scan parses (wide-int markers, small ints, headers).
            alphabet = [*range(0xCC, 0xD4), 0xDC, 0x93, 0x95, 0x9C, 0x90, 0xC2, 0xC3, 1, 4, 0x7F]
            assert_same_scan(bytes(rng.choice(alphabet) for _ in range(size)))
            # Runs of whole tokens: arrays (array16s of 0 to 2 items too) and ints.
            pieces = [b"\xdc\x00\x00", b"\xdc\x00\x01", b"\xdc\x00\x02", b"\x90", b"\x92"]
            pieces += [b"\x01", b"\x05", b"\xcd\x01\x00", b"\xc3", b"\x94"]
            assert_same_scan(b"".join(rng.choice(pieces) for _ in range(size // 2)))


# Ints of every msgpack width and sign, and uint64s past the int64 range.
wide_ints = st.one_of(
    st.integers(-32, 127),
    st.integers(-(2**7), 2**8 - 1),
    st.integers(-(2**15), 2**16 - 1),
    st.integers(-(2**31), 2**32 - 1),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([2**63, 2**64 - 1, -(2**63), 2**31, -(2**31) - 1, 255, 256, -33]),
)
small_ints = st.integers(0, 40)
codes = st.sampled_from([int(kind) for kind in FIELDS] + list(COMPOUNDS))


@st.composite
def event_record(draw) -> list:
    """A record [code, dt, pe, *fields] of an event kind or a compound, its fields of the
    right types mostly (ints for strings and locs, as written), sometimes not."""
    code = draw(codes)
    kinds = COMPOUNDS.get(code, (code,))
    tags = [tag for kind in kinds for _, tag in FIELDS[kind]]
    ints = draw(st.sampled_from([small_ints, wide_ints]))
    record: list = [code, draw(ints), draw(small_ints)]
    for tag in tags:
        if tag == "shape":
            dims = draw(st.lists(small_ints, max_size=18))
            record.append(dims if draw(st.integers(0, 9)) else [draw(wide_ints), *dims])
        elif tag == "bool":
            record.append(draw(st.booleans()))
        else:
            record.append(draw(ints))
    mangle = draw(st.integers(0, 14))
    if mangle == 0 and len(record) > 3:
        record.pop(draw(st.integers(1, len(record) - 1)))  # an item missing
    elif mangle == 1:
        record.append(draw(wide_ints))  # one too many
    elif mangle == 2 and len(record) > 3:
        at = draw(st.integers(0, len(record) - 1))
        record[at] = draw(st.sampled_from([True, False, [1, 2], -1, 2**64 - 1, 300, "s"]))
    return record


definitions = st.one_of(
    st.tuples(st.just(wire.DEFINE_STRING), st.text(max_size=5)).map(list),
    st.tuples(st.just(wire.DEFINE_LOC), st.text(max_size=3), small_ints, st.text(max_size=3)).map(
        list
    ),
    st.tuples(st.just(wire.DEFINE_LOC_CALLER), small_ints, small_ints).map(list),
)
foreign = st.one_of(
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.dictionaries(small_ints, small_ints, max_size=2),
    st.none(),
)
records = st.lists(
    st.one_of(
        *[event_record()] * 8,
        definitions,
        foreign,
        wide_ints,
        st.booleans(),
        st.lists(wide_ints, max_size=20),
        st.lists(st.lists(small_ints, max_size=3), max_size=3),
    ),
    max_size=40,
)


@settings(max_examples=cases(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records, st.integers(0, 2**16))
def test_generated_records_scan_alike(objects, cut):
    data = b"".join(msgpack.packb(obj) for obj in objects)
    assert_same_scan(data)
    assert_same_scan(data[: cut % (len(data) + 1)])  # a tail cut short anywhere
    # From a few record starts: a scan stops at the first record it does not take.
    starts = record_starts(data)
    for start in starts[cut % 3 :: 3]:
        assert_same_scan(data[start:])


def test_edge_cases_scan_alike():
    event = msgpack.packb([8, 1, 0, 5, 6])  # a COMPLETE
    issue = msgpack.packb([4, 1, 0, 1, 2, 3, 4, 5, [2, 3], 6, True, 7])
    cases = [
        b"\xdc\x00\x00",  # an array16 of no items
        b"\xdc\x00\x00" + event,
        b"\xdc\x00\x03\x01\x02\x03" + event,
        msgpack.packb(list(range(300))) + event,  # an array16 count past one byte
        b"\xdc\x01",  # cut inside the count
        event + b"\xcf" + b"\xff" * 8 + event,  # a top-level uint64 past int64
        event + b"\x01\x02\x03" + event,  # top-level ints
        issue * 3 + b"\x90" + issue,  # an empty fixarray
        event[:-1] + b"\xd3",  # a wide int cut short at the end
        issue + msgpack.packb([4, 1, 0, 1, 2, 3, 4, 5, [2, -3], 6, True, 7]) + issue,
    ]
    # More shapes than the ones told apart one by one, of many lengths, a few repeated.
    shapes = [[d] * k for k in range(20) for d in (1, 2)] * 2
    many = b"".join(msgpack.packb([4, 1, 0, 1, 2, 3, 4, 5, s, 6, False, 7]) for s in shapes)
    for data in cases:
        for cut in range(len(data) + 1):
            assert_same_scan(data[:cut])
            assert_same_scan(data[cut:])
    for cut in range(0, len(many), 97):
        assert_same_scan(many[:cut])
        assert_same_scan(many[cut:])
