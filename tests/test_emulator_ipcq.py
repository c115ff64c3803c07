"""IPCQ between neighbouring PEs: exact timing, FIFO matching, directions.

On a 1x2 mesh with CFG a 256-byte message holds its link 8 cycles and
arrives 50 cycles after release; each send or recv_async costs 4 issue
cycles before it reaches the link or posts its receive.
"""

from __future__ import annotations

import numpy as np
import pytest

from emulator import EmulatorError, HardwareConfig, MemoryRecorder, run_kernel
from emulator.trace.schema import Kind

CFG = HardwareConfig(
    mesh_rows=1,
    mesh_cols=2,
    issue_cycles=4,
    ipcq_bytes_per_cycle=32,
    ipcq_latency=50,
)
A = np.arange(128, dtype=np.float16)  # 256 bytes
B = -np.arange(128, dtype=np.float16)


def run(kernel, config=CFG, grid=(2,)):
    rec = MemoryRecorder()
    result = run_kernel(kernel, (), grid, None, config, recorder=rec)
    return result, rec


def log(rec):
    """Every event but op-log and scratch bookkeeping, channels by name, locations dropped."""
    names = {c["id"]: c["name"] for c in rec.header["channels"]}
    out = []
    for kind, time, pe, *f in rec.events:
        if kind in (Kind.CHAN_REQUEST, Kind.CHAN_GRANT, Kind.CHAN_RELEASE):
            out.append((kind.name, time, pe, names[f[0]], f[1]))
        elif kind is Kind.ISSUE:
            out.append((kind.name, time, pe, f[1], f[0], f[2]))  # op, cmd, future
        elif kind in (Kind.COMPLETE, Kind.IPCQ_SEND, Kind.IPCQ_RECV, Kind.WAIT_END):
            out.append((kind.name, time, pe, *f))
        elif kind is Kind.WAIT_BEGIN:
            out.append((kind.name, time, pe, f[0]))
        elif kind is Kind.KERNEL_END:
            out.append((kind.name, time, pe))
    return out


def per_pe(rec, pe):
    return [e for e in log(rec) if e[2] == pe]


def test_send_and_recv_async_between_neighbours_exact_timing():
    got = {}

    def kernel(tl):
        if tl.program_id(0) == 0:
            tl.send("right", A)
        else:
            f = tl.recv_async("left", (128,), "f16")
            got["x"] = np.asarray(tl.wait(f))

    result, rec = run(kernel)
    assert per_pe(rec, 0) == [
        ("ISSUE", 0, 0, "send", 0, 0),
        ("CHAN_REQUEST", 4, 0, "pe0.ipcq.right", 0),
        ("CHAN_GRANT", 4, 0, "pe0.ipcq.right", 0),
        ("IPCQ_SEND", 4, 0, 0, 1, 256),  # cmd 0 to PE 1, 256 bytes
        ("CHAN_RELEASE", 12, 0, "pe0.ipcq.right", 0),
        ("COMPLETE", 62, 0, 0, 0),
        ("KERNEL_END", 62, 0),  # a kernel's end waits for its sends to land
    ]
    assert per_pe(rec, 1) == [
        ("ISSUE", 0, 1, "recv_async", 1, 1),
        ("WAIT_BEGIN", 4, 1, 1),
        ("IPCQ_RECV", 62, 1, 0, 0, 1),  # sender's cmd 0 from PE 0 into future 1
        ("COMPLETE", 62, 1, 1, 1),
        ("WAIT_END", 62, 1, 1, 58),
        ("KERNEL_END", 62, 1),
    ]
    np.testing.assert_array_equal(got["x"], A)
    assert result.busy_cycles["pe0.ipcq.right"] == 8
    assert result.busy_cycles["pe0.ipcq.left"] == 0
    assert (result.metrics["ipcq_send_count"], result.metrics["ipcq_recv_count"]) == (1, 1)
    assert result.pe_end_times == {0: 62, 1: 62}


def test_messages_are_matched_first_in_first_out_whatever_the_wait_order():
    got = {}

    def kernel(tl):
        if tl.program_id(0) == 0:
            tl.send("right", A)
            tl.send("right", B)
        else:
            first = tl.recv_async("left", (128,), "f16")
            second = tl.recv_async("left", (128,), "f16")
            got["second"] = np.asarray(tl.wait(second))
            got["first"] = np.asarray(tl.wait(first))

    result, rec = run(kernel)
    np.testing.assert_array_equal(got["first"], A)
    np.testing.assert_array_equal(got["second"], B)
    # The second message queues for the link (8 -> granted at 12) and arrives
    # 8 cycles after the first: the link's latency is pipelined.
    link = [e for e in per_pe(rec, 0) if e[0].startswith("CHAN_")]
    assert link == [
        ("CHAN_REQUEST", 4, 0, "pe0.ipcq.right", 0),
        ("CHAN_GRANT", 4, 0, "pe0.ipcq.right", 0),
        ("CHAN_REQUEST", 8, 0, "pe0.ipcq.right", 2),
        ("CHAN_RELEASE", 12, 0, "pe0.ipcq.right", 0),
        ("CHAN_GRANT", 12, 0, "pe0.ipcq.right", 2),
        ("CHAN_RELEASE", 20, 0, "pe0.ipcq.right", 2),
    ]
    assert [e for e in per_pe(rec, 1) if e[0] in ("IPCQ_RECV", "WAIT_END")] == [
        ("IPCQ_RECV", 62, 1, 0, 0, 1),  # first message -> first receive
        ("IPCQ_RECV", 70, 1, 2, 0, 3),
        ("WAIT_END", 70, 1, 3, 62),
        ("WAIT_END", 70, 1, 1, 0),
    ]


def test_message_that_arrives_before_its_receive_waits_in_the_inbox():
    got = {}

    def kernel(tl):
        if tl.program_id(0) == 0:
            tl.send("right", A)
        else:
            tl.exp(np.zeros(128 * 100, np.float32))  # 0 -> 100; the message arrives at 62
            f = tl.recv_async("left", (128,), "f16")  # posted at 104
            got["x"] = np.asarray(tl.wait(f))

    _, rec = run(kernel)
    assert [e for e in per_pe(rec, 1) if e[0] != "CHAN_REQUEST"][-6:] == [
        ("ISSUE", 100, 1, "recv_async", 2, 1),
        ("IPCQ_RECV", 104, 1, 0, 0, 1),
        ("COMPLETE", 104, 1, 2, 1),
        ("WAIT_BEGIN", 104, 1, 1),
        ("WAIT_END", 104, 1, 1, 0),
        ("KERNEL_END", 104, 1),
    ]
    np.testing.assert_array_equal(got["x"], A)


def test_neighbours_exchange_in_both_directions_at_once():
    got = {}

    def kernel(tl):
        pid = tl.program_id(0)
        f = tl.recv_async("left", (128,), "f16")
        tl.send("right", A if pid == 0 else B)
        got[pid] = np.asarray(tl.wait(f))

    result, rec = run(kernel)
    np.testing.assert_array_equal(got[0], B)
    np.testing.assert_array_equal(got[1], A)
    # Both sends are granted at 8, after the receive's and the send's issue cycles.
    grants = [(e[1], e[3]) for e in log(rec) if e[0] == "CHAN_GRANT"]
    assert grants == [(8, "pe0.ipcq.right"), (8, "pe1.ipcq.right")]
    assert result.pe_end_times == {0: 66, 1: 66}


def test_send_copies_its_data_at_issue():
    got = {}

    def kernel(tl):
        if tl.program_id(0) == 0:
            data = A.copy()
            tl.send("right", data)
            data[:] = 0
        else:
            got["x"] = np.asarray(tl.wait(tl.recv_async("left", (128,), "f16")))

    run(kernel)
    np.testing.assert_array_equal(got["x"], A)


def test_unknown_direction_raises_naming_it():
    def kernel(tl):
        tl.recv_async("north", (4,), "f16")

    with pytest.raises(EmulatorError, match="unknown IPCQ direction 'north'") as info:
        run(kernel)
    assert info.value.pe == 0


def test_direction_without_a_neighbour_raises():
    def kernel(tl):
        tl.send("up", A)  # a 1x2 mesh is one row thick

    with pytest.raises(EmulatorError) as info:
        run(kernel)
    assert "PE 0 has no neighbour up: the mesh is 1x2: one PE thick, no link up even wrapped" in (
        str(info.value)
    )


def test_edges_have_no_neighbour_without_wrap():
    def kernel(tl):
        if tl.program_id(0) == 1:
            tl.send("right", A)

    with pytest.raises(EmulatorError) as info:
        run(kernel, config=CFG.replace(mesh_wrap=False))
    assert info.value.pe == 1
    assert "PE 1 has no neighbour right: PE 1 is at row 0, column 1 of a 1x2 mesh" in str(
        info.value
    )
