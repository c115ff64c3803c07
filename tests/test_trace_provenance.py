"""Format 1.6: each store and send records the command that produced its tensor."""

from __future__ import annotations

import io

import numpy as np
import pytest

from emulator import HardwareConfig, Memory
from emulator.kernel.runner import run_kernel
from emulator.trace.reader import read_trace
from emulator.trace.schema import Kind

CFG = HardwareConfig(mesh_rows=1, mesh_cols=2)


def mixed(tl, x_ptr, out_ptr):
    """Stores and sends of a compute's result, a view of one, a loaded tile, a view of
    it, a host array and a received tile."""
    pe = tl.program_id(0)
    if pe == 1:
        got = tl.wait(tl.recv_async("left", (4, 8), "f32"))
        tl.wait(tl.store(out_ptr, got))
        return
    x = tl.load(x_ptr, (4, 8), "f32")
    y = tl.exp(x)
    tl.dot(x, tl.trans(x))  # an unrelated compute between the producer and its uses
    tl.wait(tl.send("right", y))
    tl.wait(tl.store(out_ptr, y[1:3]))
    tl.wait(tl.store(out_ptr, tl.trans(x)))
    tl.wait(tl.store(out_ptr, np.ones((4, 8), np.float32)))


@pytest.fixture(scope="module")
def trace():
    memory = Memory(1 << 16)
    x_ptr = memory.put(np.arange(32, dtype=np.float32).reshape(4, 8), name="X")
    out = io.BytesIO()
    run_kernel(mixed, (x_ptr, memory.alloc(256)), (2,), memory, CFG, trace=out)
    return read_trace(out.getvalue())


def issued(trace) -> dict[int, str]:
    """Per command id, its op."""
    return {e[3]: trace.strings[e[4]] for e in trace.events if e[0] == Kind.ISSUE}


def test_a_run_records_the_producer_of_each_store_and_send(trace):
    assert trace.version == (1, 6) and trace.header["provenance"] is True
    ops = issued(trace)
    records = sorted((e[2], e[3], e[4]) for e in trace.events if e[0] == Kind.PROVENANCE)
    made = [(ops[cmd], ops[by] if by >= 0 else "none") for _, cmd, by in records]
    assert made == [
        ("send", "exp"),  # the exp, not the dot issued after it
        ("store", "exp"),  # a view keeps its base's producer
        ("store", "load"),  # a loaded tile (a view of it): its load
        ("store", "none"),  # a host array: no command made it
        ("store", "recv_async"),  # a received tile: its receive
    ]


def test_a_provenance_record_follows_its_commands_issue_and_reads_in_its_cycle(trace):
    events = trace.events
    for i, e in enumerate(events):
        if e[0] != Kind.PROVENANCE:
            continue
        j = i - 1
        while events[j][0] == Kind.READS:
            assert events[j][3] == e[3]
            j -= 1
        assert events[j][0] == Kind.OP_LOG  # the compound 18 of the ISSUE: ISSUE, OP_LOG
        j -= 1
        assert events[j][0] == Kind.ISSUE and events[j][3] == e[3]
        assert events[j][1:3] == e[1:3]  # same cycle, same PE


def test_no_provenance_without_it_and_the_trace_is_what_1_5_wrote():
    memory = Memory(1 << 16)
    x_ptr = memory.put(np.zeros((4, 8), np.float32), name="X")
    out = io.BytesIO()
    run_kernel(mixed, (x_ptr, memory.alloc(256)), (2,), memory, CFG, trace=out, provenance=False)
    trace = read_trace(out.getvalue())
    assert trace.version == (1, 5) and "provenance" not in trace.header
    assert not any(e[0] == Kind.PROVENANCE for e in trace.events)
