"""HBM bandwidth shared by groups of PEs (hbm_stack_pes): exact timing, the trace, the cost.

On CFG a DMA transfer of 4096 bytes holds its channel 86 cycles on its own
(4096 / 48, rounded up) and takes a 64-cycle slot of its stack (4096 / 64);
it completes 10 cycles after its release; each DMA command costs its kernel
4 issue cycles before it is requested. The two PEs share one stack.
"""

from __future__ import annotations

import math

import msgpack
import numpy as np
import pytest

from emulator import HardwareConfig, Memory, MemoryRecorder, run_kernel
from emulator.recorder import NullRecorder
from emulator.scenarios import prefill
from emulator.trace import TraceFormatError
from emulator.trace.reader import read_trace, read_trace_tables
from emulator.trace.schema import Kind

CFG = HardwareConfig(
    mesh_rows=1,
    mesh_cols=2,
    hbm_bytes_per_cycle=48,
    hbm_latency=10,
    issue_cycles=4,
    hbm_stack_pes=2,
    hbm_stack_bytes_per_cycle=64,
)
TILE = (32, 64)  # f16: 4096 bytes
NBYTES = 4096
OWN = math.ceil(NBYTES / CFG.hbm_bytes_per_cycle)  # 86
SLOT = NBYTES // CFG.hbm_stack_bytes_per_cycle  # 64
ISSUE, LATENCY = CFG.issue_cycles, CFG.hbm_latency
LOGGED = (Kind.CHAN_GRANT, Kind.CHAN_RELEASE, Kind.COMPLETE, Kind.HBM_SHARE)


def log(rec):
    """Grants, releases, completions and shares: (kind, time, pe, fields after the channel)."""
    out = []
    for kind, time, pe, *f in rec.events:
        if kind in (Kind.CHAN_GRANT, Kind.CHAN_RELEASE):
            out.append((kind.name, time, pe, f[1]))
        elif kind in (Kind.COMPLETE, Kind.HBM_SHARE):
            out.append((kind.name, time, pe, *f))
    return out


def two_loads_and_a_store(tl, ptr):
    """PE 0 loads two tiles back to back; PE 1 stores one, all from cycle 0."""
    if tl.program_id(0) == 0:
        first = tl.load_async(ptr, TILE, "f16")
        second = tl.load_async(ptr + NBYTES, TILE, "f16")
        tl.wait(first)
        tl.wait(second)
    else:
        tl.wait(tl.store(ptr + 2 * NBYTES, np.ones(TILE, np.float16)))


def run(config=CFG, recorder=None):
    memory = Memory(1 << 16)
    ptr = memory.alloc(3 * NBYTES)
    rec = recorder if recorder is not None else MemoryRecorder()
    result = run_kernel(two_loads_and_a_store, (ptr,), (2,), memory, config, recorder=rec)
    return result, rec


def test_transfers_of_two_pes_take_turns_on_their_stack_in_grant_order():
    result, rec = run()
    # PE 0's first load (cmd 0) and PE 1's store (cmd 1, issued at cycle 0 too) are
    # granted at cycle 4, PE 0's first: it gets the stack at once; the store waits for its
    # slot, and holds its channel until that slot ends (4 + 64 + 64), longer than its own
    # 86 cycles. PE 0's second load (cmd 2, issued at 4), queued on its channel, is
    # granted at its release (4 + 86) and waits for the stack until the store's slot ends.
    first_release = 4 + OWN
    store_release = 4 + SLOT + SLOT
    second_wait = store_release - first_release
    second_release = first_release + max(OWN, second_wait + SLOT)
    assert log(rec) == [
        ("CHAN_GRANT", ISSUE, 0, 0),
        ("HBM_SHARE", ISSUE, 0, 0, 0, 0, SLOT),
        ("CHAN_GRANT", ISSUE, 1, 1),
        ("HBM_SHARE", ISSUE, 1, 1, 0, SLOT, SLOT),
        ("CHAN_RELEASE", first_release, 0, 0),
        ("CHAN_GRANT", first_release, 0, 2),
        ("HBM_SHARE", first_release, 0, 2, 0, second_wait, SLOT),
        ("COMPLETE", first_release + LATENCY, 0, 0, 0),
        ("CHAN_RELEASE", store_release, 1, 1),
        ("COMPLETE", store_release + LATENCY, 1, 1, 1),
        ("CHAN_RELEASE", second_release, 0, 2),
        ("COMPLETE", second_release + LATENCY, 0, 2, 2),
    ]
    assert (first_release, store_release, second_release) == (90, 132, 196)
    assert result.pe_end_times == {0: second_release + LATENCY, 1: store_release + LATENCY}
    assert result.busy_cycles["pe1.dma_write0"] == store_release - ISSUE


def test_a_stack_as_fast_as_its_pes_together_changes_no_time():
    """Two PEs' channels move 96 bytes a cycle at most: on a 96-byte stack a transfer may
    wait for its slot (43 cycles), but the slot ends by the time its channel would free."""
    _, alone = run(CFG.replace(hbm_stack_pes=0))
    _, shared = run(CFG.replace(hbm_stack_bytes_per_cycle=2 * CFG.hbm_bytes_per_cycle))
    without_shares = [e for e in shared.events if e[0] is not Kind.HBM_SHARE]
    assert without_shares == alone.events
    stalls = [e[5] for e in shared.events if e[0] is Kind.HBM_SHARE]
    assert stalls == [0, math.ceil(NBYTES / 96), 0]


def test_stacks_group_consecutive_pes_and_each_has_its_own_bandwidth():
    config = HardwareConfig(mesh_rows=2, mesh_cols=3, hbm_stack_pes=4)
    assert config.hbm_stacks == [[0, 1, 2, 3], [4, 5]]
    assert HardwareConfig(mesh_rows=2, mesh_cols=2).hbm_stacks == []
    # On stacks of one PE each, the two PEs do not wait for each other.
    _, rec = run(CFG.replace(hbm_stack_pes=1))
    shares = [(e[2], e[4], e[5]) for e in rec.events if e[0] is Kind.HBM_SHARE]
    assert shares == [(0, 0, 0), (1, 1, 0), (0, 0, 0)]  # (pe, stack, stalled)


def test_sharing_off_writes_the_header_and_version_it_did_before(tmp_path):
    path = tmp_path / "off.kbt"
    memory = Memory(1 << 16)
    ptr = memory.alloc(3 * NBYTES)
    off = CFG.replace(hbm_stack_pes=0)
    run_kernel(
        two_loads_and_a_store, (ptr,), (2,), memory, off, trace=path, digests=False,
        provenance=False,
    )  # fmt: skip
    trace = read_trace(path)
    assert trace.version == (1, 3)
    assert "hbm_stacks" not in trace.header
    assert not set(HardwareConfig.HBM_SHARING_FIELDS) & set(trace.header["config"])
    # Read back, the fields of sharing (off) take their defaults.
    assert HardwareConfig.from_dict(trace.header["config"]) == off.replace(
        hbm_stack_bytes_per_cycle=HardwareConfig().hbm_stack_bytes_per_cycle
    )


def test_a_shared_run_is_a_1_4_trace_that_both_reader_paths_read(tmp_path):
    path = tmp_path / "shared.kbt"
    memory = Memory(1 << 16)
    ptr = memory.alloc(3 * NBYTES)
    rec = MemoryRecorder()
    run_kernel(
        two_loads_and_a_store,
        (ptr,),
        (2,),
        memory,
        CFG,
        recorder=rec,
        trace=path,
        digests=False,
        provenance=False,
    )
    trace = read_trace(path)
    assert trace.version == (1, 4)
    assert trace.header["hbm_stacks"] == [[0, 1]]
    assert HardwareConfig.from_dict(trace.header["config"]) == CFG
    shares = [e for e in trace.iter_decoded() if e[0] == Kind.HBM_SHARE]
    assert shares == [e for e in rec.events if e[0] is Kind.HBM_SHARE]
    batches = []
    tables = read_trace_tables(path, batches.append)
    assert tables.version == (1, 4) and tables.footer == trace.footer
    rows = [rows for batch in batches for kind, (_, rows) in batch.tables.items() if kind == 26]
    assert np.concatenate(rows).tolist() == [list(e) for e in shares]


def test_kbdebug_opens_a_shared_run(tmp_path):
    from kbdebug.replay import Replay

    path = tmp_path / "shared.kbt"
    memory = Memory(1 << 16)
    ptr = memory.alloc(3 * NBYTES)
    run_kernel(two_loads_and_a_store, (ptr,), (2,), memory, CFG, trace=path)
    replay = Replay.open(path)
    columns = replay.index.columns
    shares = columns.kind == Kind.HBM_SHARE
    # The command and its stall are in the cmd and val columns.
    assert columns.cmd[shares].tolist() == [0, 1, 2]
    # PE 0's second load waits from its grant (4 + OWN) to the store's slot's end.
    assert columns.val[shares].tolist() == [0, SLOT, (4 + 2 * SLOT) - (4 + OWN)]


@pytest.mark.parametrize("stacks", [[[0], [0]], [[0, 2]], [], [[]], [[0], [1], [1]], "0,1"])
def test_a_1_4_header_with_bad_hbm_stacks_is_refused(tmp_path, stacks):
    path = tmp_path / "shared.kbt"
    memory = Memory(1 << 16)
    ptr = memory.alloc(3 * NBYTES)
    run_kernel(two_loads_and_a_store, (ptr,), (2,), memory, CFG, trace=path)
    data = path.read_bytes()
    unpacker = msgpack.Unpacker(strict_map_key=False)
    unpacker.feed(data)
    header = next(unpacker)
    rest = data[unpacker.tell() :]
    header["hbm_stacks"] = stacks
    forged = msgpack.packb(header) + rest
    problem = "header hbm_stacks must be 1 to 2 non-empty lists of PEs of the mesh"
    with pytest.raises(TraceFormatError, match=problem):
        read_trace(forged)


class Shares(NullRecorder):
    """Sums the slots and stalls of HBM_SHARE events; keeps nothing else."""

    def __init__(self) -> None:
        self.held = self.stalled = self.count = 0

    def emit(self, kind, time, pe, *fields) -> None:
        if kind is Kind.HBM_SHARE:
            self.count += 1
            self.stalled += fields[2]
            self.held += fields[3]


def test_prefill_is_fine_on_one_pe_and_bound_by_its_shared_stack_on_64():
    """One stack of 192 bytes a cycle for all PEs: one PE (48 bytes a cycle) never waits
    for it; 64 PEs asking 64 x 48 take turns, and the run lasts every slot of the stack
    end to end (a bandwidth bound), over 4x as long as one PE's."""
    shared = HardwareConfig(hbm_stack_pes=64, hbm_stack_bytes_per_cycle=192)
    one_off = prefill(pes=1).run().end_time
    one = Shares()
    one_on = prefill(pes=1, config=shared).run(recorder=one)
    assert one_on.end_time == one_off and one.stalled == 0

    many_off = prefill(pes=64).run().end_time
    assert many_off == one_off  # nothing shared: 64 PEs run as fast as one
    many = Shares()
    scenario = prefill(pes=64, config=shared)
    result = scenario.run(recorder=many)
    scenario.check(scenario.memory)  # the same numbers, only later
    # Each PE reads Q once and 16 K and 16 V tiles of 64x64 f16, and writes its O block.
    per_pe = [32 * 64 * 2] + [64 * 64 * 2] * 32 + [32 * 64 * 2]
    assert many.count == 64 * len(per_pe)
    assert many.held == 64 * sum(math.ceil(n / 192) for n in per_pe)
    assert many.held <= result.end_time < 1.05 * many.held
    assert result.end_time > 4 * one_off
