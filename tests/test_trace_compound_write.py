"""Compound records as the emulator and TraceWriter write them: the same events, fewer records.

Every trace here is decoded by a reference decoder of this file's own (msgpack over
the bytes, dt resolved, compounds expanded by ``schema.expand``, string and loc ids
mapped back), not by the project's reader, and compared event for event with what
a MemoryRecorder got in the same run, with the same run written one record per
event, and with the bundled traces. (Those were re-recorded in format 1.2 in commit
be3bbc4; each decodes, by this decoder, to exactly the events and footer of its 1.1
recording at be3bbc4~1, the header differing only in its version.)
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from trace_synth import make_header

from emulator import run_kernel
from emulator.config import HardwareConfig
from emulator.recorder import MemoryRecorder, NullRecorder, TeeRecorder
from emulator.scenarios import SCENARIOS
from emulator.trace import wire
from emulator.trace.reader import read_trace
from emulator.trace.schema import COMPOUNDS, FIELDS, Kind, SourceLoc, expand
from emulator.trace.writer import TraceWriter

BUNDLED = Path(__file__).resolve().parents[1] / "traces"
OK_FOOTER = {"status": "ok", "end_time": 100, "error": None, "error_loc": None}
LOC = SourceLoc("k.py", 3, "kernel")


def decode(data: bytes) -> tuple[list[tuple[Any, ...]], dict[str, Any], Counter]:
    """(events as MemoryRecorder keeps them, footer, record codes) of a .kbt file."""
    strings: list[str] = []
    locs: list[SourceLoc] = []
    events: list[tuple[Any, ...]] = []
    codes: Counter = Counter()
    footer: dict[str, Any] = {}
    time = 0
    unpacker = msgpack.Unpacker(io.BytesIO(data), raw=False, strict_map_key=False)
    next(unpacker)  # the header
    for record in unpacker:
        if isinstance(record, dict):
            footer = record
            continue
        code = record[0]
        if code == wire.DEFINE_STRING:
            strings.append(record[1])
        elif code == wire.DEFINE_LOC:
            locs.append(SourceLoc(record[1], record[2], record[3]))
        elif code == wire.DEFINE_LOC_CALLER:
            locs[record[1]] = locs[record[1]]._replace(caller=locs[record[2]])
        elif code not in wire.DEFINITION_CODES:  # sources, digests (1.5): not events
            codes[code] += 1
            time += record[1]
            if code in COMPOUNDS:
                parts = expand(code, time, record[2], record[3:])
            else:
                parts = [(code, time, record[2], *record[3:])]
            for kind, at, pe, *fields in parts:
                kind = Kind(kind)
                values = []
                for (_, tag), value in zip(FIELDS[kind], fields, strict=True):
                    if tag == "str":
                        value = strings[value]
                    elif tag == "loc":
                        value = None if value == -1 else locs[value]
                    elif tag == "shape":
                        value = tuple(value)
                    values.append(value)
                events.append((kind, at, pe, *values))
    return events, footer, codes


def small(name: str) -> dict[str, Any]:
    """Parameters that keep scenario ``name`` at a few hundred commands."""
    return {"n_tiles": 4} if name.startswith(("decode", "flawed", "prefill")) else {}


# (label, scenario, its parameters): every scenario at its bundled trace's parameters,
# then configurations that take the rarer paths (a free DMA channel granted right at
# issue, releases with no latency before completion, a message delivered at release).
CASES = [(name, name, {}) for name in sorted(SCENARIOS)] + [
    (
        "decode_prefetch, no issue cost, no HBM latency",
        "decode_prefetch",
        {"config": HardwareConfig(issue_cycles=0, hbm_latency=0), "n_tiles": 4},
    ),
    (
        "ring_attention, no IPCQ or HBM latency",
        "ring_attention",
        {"config": HardwareConfig(ipcq_latency=0, hbm_latency=0, issue_cycles=0)},
    ),
    (
        "gemm_composite, two read channels",
        "gemm_composite",
        {"config": HardwareConfig(dma_read_channels=2, issue_cycles=0), "m": 512},
    ),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Each case run twice: written with compounds (and kept by a MemoryRecorder in the
    same run), and written one record per event."""
    tmp = tmp_path_factory.mktemp("compound")
    out = {}
    for i, (label, name, params) in enumerate(CASES):
        kept = MemoryRecorder()
        writer = TraceWriter(tmp / f"{i}.kbt", compound=True)
        SCENARIOS[name](**params).run(recorder=TeeRecorder(writer, kept))
        plain = TraceWriter(tmp / f"{i}.plain.kbt", compound=False)
        SCENARIOS[name](**params).run(recorder=plain)
        out[label] = {
            "name": name,
            "kept": kept.events,
            "written": writer.events,
            "compound": (tmp / f"{i}.kbt").read_bytes(),
            "plain": (tmp / f"{i}.plain.kbt").read_bytes(),
        }
    return out


@pytest.mark.parametrize("label", [case[0] for case in CASES])
def test_a_trace_with_compounds_decodes_to_every_event_the_run_emitted(runs, label):
    run = runs[label]
    events, footer, codes = decode(run["compound"])
    assert events == run["kept"]
    assert footer["events"] == len(events) == run["written"]
    # Compounds were written, so the file has fewer records than events.
    assert sum(codes[c] for c in COMPOUNDS) > 0
    assert sum(codes.values()) < len(events)


@pytest.mark.parametrize("label", [case[0] for case in CASES])
def test_written_without_compounds_the_same_run_gives_the_same_events(runs, label):
    run = runs[label]
    events, footer, codes = decode(run["plain"])
    assert not set(codes) & set(COMPOUNDS)
    assert events == decode(run["compound"])[0]
    assert footer["events"] == len(events)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_bundled_trace_holds_the_events_the_scenario_writes_today(runs, name):
    """The events of a bundled trace (order, cycles, fields) must not move, whichever
    records carry them. A trace recorded before format 1.3 has no READS: today's run
    holds exactly its events once its READS are left out (they only add)."""
    data = (BUNDLED / f"{name}.kbt").read_bytes()
    bundled, _, _ = decode(data)
    today = decode(runs[name]["compound"])[0]
    version = tuple(next(msgpack.Unpacker(io.BytesIO(data), strict_map_key=False))["version"])
    if version < (1, 3):
        assert any(event[0] == Kind.READS for event in today) or name == "gemm_composite"
        today = [event for event in today if event[0] != Kind.READS]
    if version < (1, 6):  # nor PROVENANCE (1.6), which only adds too
        today = [event for event in today if event[0] != Kind.PROVENANCE]
    assert today == bundled


def test_the_project_reader_reads_compounds_as_their_events(runs):
    run = runs["decode_prefetch"]
    assert read_trace(run["compound"]).events == read_trace(run["plain"]).events


def test_the_decode_kernel_writes_under_half_as_many_records_as_events(runs):
    events, _, codes = decode(runs["decode_prefetch"]["compound"])
    assert sum(codes.values()) < 0.45 * len(events)
    assert len(runs["decode_prefetch"]["compound"]) < 0.9 * len(runs["decode_prefetch"]["plain"])


# Recorders other than the writer see the events, not the compounds.


class EmitOnly:
    """A recorder written against the protocol's four methods only."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def begin(self, header: dict[str, Any]) -> None:
        pass

    def add_source(self, file: str, text: str) -> None:
        pass

    def emit(self, kind: Kind, time: int, pe: int, *fields: Any) -> None:
        self.events.append((kind, time, pe, *fields))

    def end(self, footer: dict[str, Any]) -> None:
        pass


class Counting(NullRecorder):
    def __init__(self) -> None:
        self.events = 0

    def emit(self, kind, time, pe, *fields) -> None:
        self.events += 1


def test_a_recorder_without_emit_compound_gets_each_event_through_emit(runs):
    recorder = EmitOnly()
    SCENARIOS["ring_attention"]().run(recorder=recorder)
    assert recorder.events == runs["ring_attention"]["kept"]


def test_a_null_recorder_subclass_counts_every_event(runs):
    counter = Counting()
    SCENARIOS["gemm_composite"]().run(recorder=counter)
    assert counter.events == len(runs["gemm_composite"]["kept"])


def test_a_compute_command_on_a_busy_engine_is_issued_requested_then_granted(tmp_path):
    """The engine is held (by a command the test puts on it) when tl.dot issues: its
    ISSUE, OP_LOG and CHAN_REQUEST come at once, its grant at the other's release."""

    def kernel(tl):
        a = tl.zeros((16, 16))
        tl._pe.gemm.submit(10_000, 50)  # holds the GEMM engine for 50 cycles
        tl.dot(a, a)

    kept = MemoryRecorder()
    path = tmp_path / "busy.kbt"
    writer = TraceWriter(path)
    run_kernel(kernel, recorder=TeeRecorder(writer, kept), config=HardwareConfig())
    events, _, codes = decode(path.read_bytes())
    assert events == kept.events
    dot = next(e for e in events if e[0] == Kind.ISSUE and e[4] == "dot")
    cmd, start = dot[3], dot[1]
    channel_steps = (Kind.CHAN_REQUEST, Kind.CHAN_GRANT, Kind.CHAN_RELEASE)
    log = [
        (e[0], e[1])
        for e in events
        if (e[0] in channel_steps and e[4] == cmd) or (e[0] == Kind.COMPLETE and e[3] == cmd)
    ]
    # The dot holds the engine 16 cycles (16 * 16 * 16 MACs at 256 per cycle).
    assert log == [
        (Kind.CHAN_REQUEST, start),
        (Kind.CHAN_GRANT, start + 50),
        (Kind.CHAN_RELEASE, start + 66),
        (Kind.COMPLETE, start + 66),
    ]
    assert codes[20] == 1  # ISSUE + OP_LOG + CHAN_REQUEST


# The writer's compound entry point.


def begun(**kwargs) -> tuple[TraceWriter, io.BytesIO]:
    out = io.BytesIO()
    writer = TraceWriter(out, **kwargs)
    writer.begin(make_header())
    return writer, out


ISSUE_FIELDS = (7, "dot", -1, -1, 512, (8, 16), "f32", True, LOC)


@pytest.mark.parametrize("compound", [True, False])
def test_emit_compound_writes_the_events_it_stands_for(compound):
    writer, out = begun(compound=compound)
    writer.emit(Kind.KERNEL_START, 0, 0, "kernel", LOC)
    writer.emit_compound(19, 4, 0, *ISSUE_FIELDS, "compute", "gemm", 3, 7, 3, 7)
    writer.emit_compound(22, 6, 0, 3, 7, 7, -1)
    writer.emit_compound(24, 6, 1, 2, None, 2, 0)
    writer.emit_compound(21, 9, 1, *ISSUE_FIELDS, "memory", "dma_read", 4, 512, 1024)
    assert writer.events == 12
    writer.end(OK_FOOTER)
    events, footer, codes = decode(out.getvalue())
    assert footer["events"] == 12
    assert [(e[0], e[1], e[2]) for e in events] == [
        (Kind.KERNEL_START, 0, 0),
        (Kind.ISSUE, 4, 0),
        (Kind.OP_LOG, 4, 0),
        (Kind.CHAN_REQUEST, 4, 0),
        (Kind.CHAN_GRANT, 4, 0),
        (Kind.CHAN_RELEASE, 6, 0),
        (Kind.COMPLETE, 6, 0),
        (Kind.WAIT_BEGIN, 6, 1),
        (Kind.WAIT_END, 6, 1),
        (Kind.ISSUE, 9, 1),
        (Kind.OP_LOG, 9, 1),
        (Kind.SCRATCH_ALLOC, 9, 1),
    ]
    assert events[1][3:] == ISSUE_FIELDS
    assert events[2][3:] == ("compute", "gemm")
    assert events[11][3:] == (4, 512, 1024)
    assert sum(codes.values()) == (5 if compound else 12)


def test_emit_compound_refuses_an_unknown_code():
    writer, _ = begun()
    with pytest.raises(ValueError, match="unknown compound code 17"):
        writer.emit_compound(17, 0, 0, 1)


@pytest.mark.parametrize("compound", [True, False])
def test_emit_compound_refuses_a_wrong_number_of_fields(compound):
    writer, _ = begun(compound=compound)
    with pytest.raises(ValueError, match=r"CHAN_RELEASE\+COMPLETE has 3 fields, expected 4"):
        writer.emit_compound(22, 0, 0, 1, 2, 3)


def test_emit_compound_refuses_time_going_backward():
    writer, _ = begun()
    writer.emit(Kind.KERNEL_END, 10, 0)
    with pytest.raises(ValueError, match=r"CHAN_RELEASE\+CHAN_GRANT at time 9 is before"):
        writer.emit_compound(23, 9, 0, 1, 2, 1, 3)


@pytest.mark.parametrize("compound", [True, False])
def test_emit_compound_after_end_is_refused(compound):
    writer, _ = begun(compound=compound)
    writer.end(OK_FOOTER)
    with pytest.raises(ValueError, match="emit_compound.. called on a trace writer that is closed"):
        writer.emit_compound(22, 200, 0, 1, 2, 2, -1)


def test_a_compound_msgpack_cannot_write_is_named_and_what_came_before_kept():
    writer, out = begun()
    writer.emit(Kind.KERNEL_END, 1, 0)
    with pytest.raises(TypeError, match=r"compound record \(CHAN_RELEASE\+COMPLETE\) .* cannot"):
        writer.emit_compound(22, 2, 0, 1, object(), 2, -1)
        writer.flush()
    writer.end({**OK_FOOTER, "status": "error", "error": "TypeError"})
    events, _, _ = decode(out.getvalue())
    assert events == [(Kind.KERNEL_END, 1, 0)]


def test_numpy_integers_in_a_compound_are_written_as_ints():
    writer, out = begun()
    writer.emit_compound(22, 3, 0, np.int64(1), np.int32(2), 2, -1)
    writer.end(OK_FOOTER)
    assert decode(out.getvalue())[0] == [
        (Kind.CHAN_RELEASE, 3, 0, 1, 2),
        (Kind.COMPLETE, 3, 0, 2, -1),
    ]


def test_the_writer_writes_compounds_by_default_from_format_1_2():
    assert TraceWriter(io.BytesIO()).compound is (wire.FORMAT_VERSION >= (1, 2))
