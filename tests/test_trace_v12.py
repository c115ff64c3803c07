"""Format 1.2: compound records read as exactly the events they stand for, by both paths."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import msgpack
import pytest
from _shared_fuzz import cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_trace_tables import outcome, same_as_read_trace
from trace_synth import footer_record, header_record, pack_objects

from emulator.trace import TraceFormatError, parser, wire
from emulator.trace.reader import read_trace, read_trace_tables
from emulator.trace.schema import COMPOUNDS, FIELDS, Kind, SourceLoc, expand

# Copies of the bundled traces as they were in format 1.3, before digests and provenance.
TRACES = Path(__file__).resolve().parent / "data" / "old_traces"
_EVENT_CODES = {int(kind) for kind in FIELDS}
_LONGEST_FIRST = sorted(COMPOUNDS.items(), key=lambda item: -len(item[1]))


def unpack_all(data: bytes) -> list:
    return list(msgpack.Unpacker(io.BytesIO(data), raw=False, strict_map_key=False))


def compact(data: bytes, version: tuple[int, int] = (1, 2)) -> bytes:
    """The trace ``data`` (format 1.1) as a 1.2 writer would write it: each run of
    events that a compound stands for (the longest first) as that compound, the
    definitions met between its events moved before it (they define ids its events use)."""
    header, *records = unpack_all(data)
    header["version"] = list(version)
    out = [header]
    i = 0
    while i < len(records):
        record = records[i]
        if not (isinstance(record, list) and record[0] in _EVENT_CODES):
            out.append(record)
            i += 1
            continue
        for code, kinds in _LONGEST_FIRST:
            events, definitions, j = [], [], i
            while len(events) < len(kinds) and j < len(records):
                following = records[j]
                if isinstance(following, list) and following[0] in _EVENT_CODES:
                    events.append(following)
                elif isinstance(following, list) and events:
                    definitions.append(following)
                else:
                    break
                j += 1
            same_cycle = all(e[2] == record[2] and e[1] == 0 for e in events[1:])
            if [e[0] for e in events] == list(kinds) and same_cycle:
                out.extend(definitions)
                out.append([code, record[1], record[2], *(f for e in events for f in e[3:])])
                i = j
                break
        else:
            out.append(record)
            i += 1
    return b"".join(msgpack.packb(o) for o in out)


def expand_file(data: bytes) -> bytes:
    """The 1.2 trace ``data`` as a 1.1 writer wrote it: each compound as its events
    (schema.expand, the reference decoding), the first with its dt, the others 0."""
    header, *records = unpack_all(data)
    header["version"] = [1, 1]
    out = [header]
    for record in records:
        if isinstance(record, list) and record[0] in COMPOUNDS:
            events = expand(record[0], record[1], record[2], record[3:])
            out.extend([events[0], *([kind, 0, *rest] for kind, _, *rest in events[1:])])
        else:
            out.append(record)
    return b"".join(msgpack.packb(o) for o in out)


def without_reads(data: bytes) -> bytes:
    """The 1.3 trace ``data`` as a 1.2 writer wrote the same run: without its READS
    (their dt carried to the next event, the footer's count less theirs)."""
    header, *records = unpack_all(data)
    header["version"] = [1, 2]
    out, carried, dropped = [header], 0, 0
    for record in records:
        if isinstance(record, list) and record[0] == Kind.READS:
            carried += record[1]
            dropped += 1
            continue
        if isinstance(record, list) and (record[0] in _EVENT_CODES or record[0] in COMPOUNDS):
            record = [record[0], record[1] + carried, *record[2:]]
            carried = 0
        elif isinstance(record, dict):
            record = {**record, "events": record["events"] - dropped}
        out.append(record)
    return b"".join(msgpack.packb(o) for o in out)


def compounds_in(data: bytes) -> list[tuple[int, int, int]]:
    """``(code, start, end)`` of each compound record of ``data``, by byte offsets."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    found, start = [], 0
    for obj in unpacker:
        end = unpacker.tell()
        if isinstance(obj, list) and obj[0] in COMPOUNDS:
            found.append((obj[0], start, end))
        start = end
    return found


@pytest.fixture(scope="module")
def pairs() -> dict[str, tuple[bytes, bytes]]:
    """Every bundled trace in 1.1 and in 1.2 as compact() makes it (a bundled trace
    recorded in 1.2 is expanded to 1.1 first, and must read as that does; one recorded
    in 1.3 is first made the 1.2 file of its run, without its READS)."""
    out = {}
    for path in sorted(TRACES.glob("*.kbt")):
        bundled = path.read_bytes()
        version = read_trace(bundled).version
        if version >= (1, 3):
            bundled = without_reads(bundled)
            assert read_trace(bundled).events == [
                e for e in read_trace(path.read_bytes()).events if e[0] != Kind.READS
            ]
        if version == (1, 1):
            old = bundled
        else:
            old = expand_file(bundled)
            same_trace(old, bundled)
        out[path.name] = (old, compact(old))
    return out


def same_trace(old: bytes, new: bytes) -> None:
    """``new`` reads, by both paths, as ``old`` does but for its version."""
    for read in (read_trace, read_trace_tables):
        before, after = outcome(read, old), outcome(read, new)
        assert before[0] == after[0] == "trace"
        assert after[2] == (1, 2) and after[1].pop("version") == [1, 2]
        before[1].pop("version")
        assert before[:2] + before[3:] == after[:2] + after[3:]


def test_every_compound_occurs_in_the_bundled_traces(pairs):
    counts = Counter(code for _, new in pairs.values() for code, _, _ in compounds_in(new))
    assert set(counts) == set(COMPOUNDS)
    # Compounds take the place of most records: the files shrink.
    old_size = sum(len(old) for old, _ in pairs.values())
    assert sum(len(new) for _, new in pairs.values()) < 0.9 * old_size


def test_compound_records_read_as_the_events_they_stand_for(pairs):
    for old, new in pairs.values():
        same_trace(old, new)
        trace = read_trace(new)
        assert list(trace.iter_decoded()) == list(read_trace(old).iter_decoded())
        assert trace.footer["events"] == len(trace.events)


def test_the_bulk_path_reads_every_compound_itself(pairs, monkeypatch):
    # Compounds of 16 items or more have an array16 header: the scan must read them
    # (handing them to the exact path, one record at a time, would be 5 times slower).
    exact: list[int] = []
    hand = parser.Parser.hand_records_as_tables

    def counted(self, records):
        exact.append(len(records))
        return hand(self, records)

    monkeypatch.setattr(parser.Parser, "hand_records_as_tables", counted)
    for _, new in pairs.values():
        batches = []
        trace = read_trace_tables(new, batches.append)
        assert sum(map(len, batches)) == trace.footer["events"] > 0
    assert sum(exact) == 0


@pytest.mark.parametrize("block", [64, 333, 2048])
def test_blocks_cut_inside_compounds_read_the_same(pairs, monkeypatch, block):
    monkeypatch.setattr(parser, "CHUNK_BYTES", block)
    monkeypatch.setattr(parser, "BULK_BYTES", block)
    monkeypatch.setattr(parser, "MIN_BULK_BYTES", min(block, parser.MIN_BULK_BYTES))
    for name in ("decode_prefetch.kbt", "gemm_pipeline.kbt", "ring_attention.kbt"):
        old, new = pairs[name]
        same_trace(old, new)


def test_a_file_cut_inside_a_compound_ends_before_it(pairs):
    old, new = pairs["gemm_pipeline.kbt"]
    full = read_trace(old).events
    seen = set()
    for code, start, end in compounds_in(new):
        if code in seen:
            continue
        seen.add(code)
        for cut in (start + 1, (start + end) // 2, end - 1):
            for read in (read_trace, read_trace_tables):
                result = outcome(read, new[:cut])
                assert result[0] == "trace" and result[7] is True  # truncated
                assert result[8] == start  # truncated_at: where the whole records end
                events = result[9]
                assert events == full[: len(events)]
            assert outcome(read_trace_tables, new[:cut]) == outcome(read_trace, new[:cut])
        # The events before the compound are all there: the cut lost exactly its own.
        cut_events = outcome(read_trace, new[:start])[9]
        assert len(outcome(read_trace, new[:end])[9]) == len(cut_events) + len(COMPOUNDS[code])
    assert seen == {18, 19, 21, 22, 23, 24}


def v12(*records, events: int | None = None, version=(1, 2)) -> bytes:
    """A 1.2 file of ``records`` (strings "load", "dma" and loc 0 defined first)."""
    count = events if events is not None else 0
    return pack_objects(
        header_record(version=list(version)),
        [0, "load"],
        [0, "dma"],
        [100, "k.py", 3, "k"],
        *records,
        footer_record(count, end_time=100),
    )


LOC = SourceLoc("k.py", 3, "k")
# An ISSUE of a load, logged, its buffer allocated (21); released and completed (22);
# a wait on it that did not stall (24). Channel 0 is PE 0's DMA read channel.
LOAD = [21, 5, 0, 0, 0, 0, 4096, 64, [8, 8], 0, False, 0, 1, 0, 0, 64, 64]
DONE = [22, 7, 0, 0, 0, 0, 0]
WAITED = [24, 1, 0, 0, 0, 0, 0]


def error_of(data: bytes) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as caught:
        read_trace(data)
    same_as_read_trace(data)  # the bulk path fails alike, with the same offset and index
    return caught.value


def test_a_forged_1_2_file_expands_each_compound_in_place():
    data = v12([Kind.KERNEL_END, 0, 1], LOAD, DONE, WAITED, events=8)
    trace = read_trace(data)
    assert [tuple(e[:3]) for e in trace.events] == [
        (Kind.KERNEL_END, 0, 1),
        (Kind.ISSUE, 5, 0),
        (Kind.OP_LOG, 5, 0),
        (Kind.SCRATCH_ALLOC, 5, 0),
        (Kind.CHAN_RELEASE, 12, 0),
        (Kind.COMPLETE, 12, 0),
        (Kind.WAIT_BEGIN, 13, 0),
        (Kind.WAIT_END, 13, 0),
    ]
    assert trace.decode(1)[3:] == (0, "load", 0, 4096, 64, (8, 8), "load", False, LOC)
    assert trace.decode(2)[3:] == ("dma", "load")
    assert trace.decode(3)[3:] == (0, 64, 64)
    same_as_read_trace(data)


def test_a_compound_with_a_field_missing_is_named_with_its_first_event():
    data = v12([Kind.KERNEL_END, 0, 1], LOAD, DONE[:-1], events=6)
    error = error_of(data)
    assert error.event_index == 4  # KERNEL_END, then the load's three events
    assert "compound record 22 (CHAN_RELEASE+COMPLETE) has 3 fields, expected 4" in str(error)
    assert error.offset == compounds_in(data)[1][1]


@pytest.mark.parametrize(
    ("at", "value", "says"),
    [
        (12, "dma", "OP_LOG category is str 'dma', expected int"),  # a string, not its id
        (12, 5, "OP_LOG category is string id 5, not defined yet (2 defined)"),
        (10, 1, "ISSUE blocking is int 1, expected bool"),
        (8, [8, -8], "ISSUE shape list [8, -8] is not a list of non-negative int64s"),
        (15, -64, "SCRATCH_ALLOC nbytes -64 is negative"),
        (2, 4, "pe 4 is outside the mesh of 4 PEs"),
    ],
)
def test_a_wrong_component_field_is_named_with_its_kind(at, value, says):
    load = list(LOAD)
    load[at] = value
    error = error_of(v12(DONE, load, events=5))
    assert says in str(error) and "compound record 21" in str(error)
    assert error.event_index == 2


def test_a_channel_outside_the_table_in_a_later_component_is_refused():
    granted = [19, 1, 0, 0, 0, -1, -1, 0, [], 0, False, 0, 1, 0, 3, 0, 20, 0]
    error = error_of(v12(granted, events=4))
    assert "CHAN_GRANT channel 20 is not in the header's 20 channels" in str(error)
    assert error.event_index == 0


def test_the_footer_counts_events_not_records():
    error = error_of(v12(LOAD, DONE, events=2))
    assert "footer says 2 events, the trace has 5" in str(error)
    read_trace(v12(LOAD, DONE, events=5))


@pytest.mark.parametrize("version", [(1, 0), (1, 1)])
def test_compound_codes_are_unknown_in_an_older_file(version):
    error = error_of(v12(LOAD, events=3, version=version))
    assert "unknown record kind 21" in str(error)


def test_a_newer_minor_file_expands_compounds_and_skips_codes_it_adds():
    data = v12(LOAD, [30, 2, 0, "new"], DONE, events=6, version=(1, 7))
    trace = read_trace(data)
    assert [e[0] for e in trace.events] == [4, 11, 12, 7, 8]
    assert trace.events[-1][1] == 14
    # A compound takes no extra fields, even from a newer minor: they would shift.
    error = error_of(v12(LOAD, [*DONE, 9], events=6, version=(1, 7)))
    assert "compound record 22 (CHAN_RELEASE+COMPLETE) has 5 fields, expected 4" in str(error)


def test_the_writer_writes_the_version_the_reader_reads():
    assert wire.FORMAT_VERSION >= (1, 2)


def wide_int(marker: int, value: int) -> bytes:
    """``value`` written with msgpack int marker ``marker`` (0xCC..0xD3), wider than needed."""
    size = (1, 2, 4, 8)[(marker - 0xCC) % 4]
    return bytes([marker]) + value.to_bytes(size, "big", signed=marker >= 0xD0)


@pytest.mark.parametrize("marker", range(0xCC, 0xD4))
def test_ints_of_every_width_read_alike_by_both_paths(marker):
    size = (1, 2, 4, 8)[(marker - 0xCC) % 4]
    top = 2 ** (8 * size - (1 if marker >= 0xD0 else 0)) - 1
    values = sorted({0, 1, 127, min(top, 2**63 - 1)})
    # SCRATCH_ALLOC [12, dt, pe, buffer, nbytes, in_use], in_use written with the marker.
    events = [b"\x96\x0c\x00\x00\x01\x02" + wide_int(marker, v) for v in values]
    data = v12(events=len(values))
    head, footer = data[: data.rindex(b"\x85")], data[data.rindex(b"\x85") :]
    data = head + b"".join(events) + footer
    trace = read_trace(data)
    assert [e[5] for e in trace.events] == values
    same_as_read_trace(data)
    if marker == 0xCF:  # a uint64 past the int64 range
        error = error_of(head + events[0][:-9] + wide_int(0xCF, 2**63) + footer)
        assert "exceeds the int64 range" in str(error)


@pytest.mark.parametrize("marker", range(0xD0, 0xD4))
def test_negative_ints_of_every_width_read_alike_by_both_paths(marker):
    # COMPLETE [8, dt, pe, cmd, future]: future -1 (none), written with the marker.
    event = b"\x95\x08\x00\x00\x01" + wide_int(marker, -1)
    data = v12(events=1)
    at = data.rindex(b"\x85")
    data = data[:at] + event + data[at:]
    assert read_trace(data).events == [[Kind.COMPLETE, 0, 0, 1, -1]]
    same_as_read_trace(data)


def _fuzz_base() -> bytes:
    bundled = (TRACES / "gemm_pipeline.kbt").read_bytes()
    if read_trace(bundled).version >= (1, 3):
        bundled = without_reads(bundled)
    old = bundled if read_trace(bundled).version == (1, 1) else expand_file(bundled)
    base = compact(old)
    assert not read_trace(base).truncated  # a whole, valid 1.2 trace
    return base


FUZZ_BASE = _fuzz_base()
_mutation = st.tuples(
    st.sampled_from(["flip", "insert", "delete", "code"]),
    st.integers(0, len(FUZZ_BASE) - 1),
    st.integers(0, 255),
)


@settings(max_examples=cases(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mutations=st.lists(_mutation, min_size=1, max_size=3),
    cut=st.integers(0, len(FUZZ_BASE)),
    block=st.sampled_from([64, 2048, 1 << 16]),
)
def test_a_corrupted_1_2_trace_reads_alike_by_both_paths(mutations, cut, block):
    data = bytearray(FUZZ_BASE[:cut] if cut else FUZZ_BASE)
    for op, position, value in mutations:
        position = min(position, len(data))
        if op == "flip" and position < len(data):
            data[position] ^= value or 1
        elif op == "code" and position < len(data):
            data[position] = 18 + value % 8  # a compound's code, or 25 (unknown)
        elif op == "insert":
            data[position:position] = bytes([value])
        elif position < len(data):
            del data[position]
    saved = parser.CHUNK_BYTES, parser.BULK_BYTES
    parser.CHUNK_BYTES = parser.BULK_BYTES = block
    try:
        same_as_read_trace(bytes(data))
    finally:
        parser.CHUNK_BYTES, parser.BULK_BYTES = saved
