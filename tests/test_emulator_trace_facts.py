"""Two facts the trace carries for the analysis (format 1.1): the kernel line that called a
helper (SourceLoc.caller) and the kernel's host reads of tensor values (HOST_READ).

Kernels mark lines with ``# <- name`` comments; ``line`` finds them in this file.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from emulator import HardwareConfig, Memory, RecycledBufferError, run_kernel
from emulator.trace.reader import read_trace
from emulator.trace.schema import Kind, SourceLoc
from kbdebug.replay import Replay

FILE = "tests/test_emulator_trace_facts.py"
CFG = HardwareConfig(hbm_bytes_per_cycle=64, hbm_latency=100, issue_cycles=4)


def line(name: str) -> int:
    """The line of this file marked ``# <- name``."""
    with open(__file__) as f:
        (found,) = [i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# <- {name}")]
    return found


def at(name: str, function: str, caller: SourceLoc | None = None) -> SourceLoc:
    return SourceLoc(FILE, line(name), function, caller)


def issues(events) -> list[tuple[str, SourceLoc]]:
    return [(e[4], e[-1]) for e in events if e[0] == Kind.ISSUE]


# --- callers ------------------------------------------------------------------------------


def load_tile(tl, ptr):
    return tl.load(ptr, (8, 8), "f16")  # <- helper load


def load_pair(tl, ptr):
    a = load_tile(tl, ptr)  # <- nested call
    return a + tl.load(ptr + 128, (8, 8), "f16")  # <- pair load


def helped(tl, ptr):
    a = load_tile(tl, ptr)  # <- first site
    b = load_tile(tl, ptr + 128)  # <- second site
    c = load_pair(tl, ptr)  # <- third site
    for _ in range(2):
        load_tile(tl, ptr)  # <- loop site
    tl.store(ptr + 4096, a + b + c)  # <- direct


def test_a_tl_call_in_a_helper_records_the_kernel_line_that_called_it(tmp_path):
    path = tmp_path / "helped.kbt"
    result = run_kernel(helped, (0,), config=CFG, trace=path, keep_events=True)
    first, second = at("first site", "helped"), at("second site", "helped")
    third, loop = at("third site", "helped"), at("loop site", "helped")
    expected = [
        ("load", at("helper load", "load_tile", first)),
        ("load", at("helper load", "load_tile", second)),
        ("load", at("helper load", "load_tile", third)),  # nested: still the kernel's line
        ("load", at("pair load", "load_pair", third)),
        ("add", at("pair load", "load_pair", third)),
        ("load", at("helper load", "load_tile", loop)),
        ("load", at("helper load", "load_tile", loop)),
        ("add", at("direct", "helped")),
        ("add", at("direct", "helped")),
        ("store", at("direct", "helped")),
    ]
    assert issues(result.events) == expected
    assert str(expected[0][1]) == f"{FILE}:{line('helper load')}"
    # Both reader paths give the same locs: read_trace and Replay.open's read_trace_tables.
    trace = read_trace(path)
    assert issues(trace.iter_decoded()) == expected
    index = Replay.open(path).index
    locs = [index.loc(int(i)) for i in index.commands.loc]
    assert [loc for loc in locs if loc.function != "helped" or loc.caller] == [
        loc for _, loc in expected if loc.caller
    ]
    # One helper line called from three kernel lines: three locs, interned once each.
    helper_locs = [loc for loc in trace.locs if loc.line == line("helper load")]
    assert [loc.caller.line for loc in helper_locs] == [
        line("first site"),
        line("second site"),
        line("third site"),
        line("loop site"),
    ]


def test_a_kernel_without_helpers_records_no_callers():
    def flat(tl, ptr):
        x = tl.load(ptr, (8, 8), "f16")
        tl.store(ptr + 4096, tl.exp(x))

    result = run_kernel(flat, (0,), config=CFG, keep_events=True)
    assert all(loc.caller is None for _, loc in issues(result.events))


# --- host reads ---------------------------------------------------------------------------

PAGE = 8 * 8 * 2


def paged(tl, pt_ptr, k_ptr, n_pages):
    f_pt = tl.load_async(pt_ptr, (n_pages,), "i32")
    pt = tl.wait(f_pt)
    acc = tl.zeros((8, 8))
    for j in range(n_pages):
        with tl.scope():
            page = int(pt.data[j])  # <- page table read
            k = tl.wait(tl.load_async(k_ptr + page * PAGE, (8, 8), "f16"))  # <- dependent
            acc = acc + k
    return acc


def paged_memory(n_pages: int) -> Memory:
    memory = Memory()
    memory.write(0, np.arange(n_pages, dtype=np.int32)[::-1].copy())
    return memory


def test_a_page_table_read_is_recorded_before_the_load_that_depends_on_it(tmp_path):
    path = tmp_path / "paged.kbt"
    result = run_kernel(
        paged, (0, 4096, 3), config=CFG, memory=paged_memory(3), trace=path, keep_events=True
    )
    events = result.events
    table = next(e for e in events if e[0] == Kind.ISSUE and e[4] == "load_async")
    reads = [i for i, e in enumerate(events) if e[0] == Kind.HOST_READ]
    assert [events[i][3] for i in reads] == [table[5]]  # once, for the page table's future
    (read,) = reads
    dependent = next(
        i for i, e in enumerate(events) if e[0] == Kind.ISSUE and e[-1].line == line("dependent")
    )
    assert read < dependent
    wait_end = next(e for e in events if e[0] == Kind.WAIT_END and e[3] == table[5])
    # At the cycle of the read: after the page table's wait, before the dependent issue.
    assert wait_end[1] <= events[read][1] == events[dependent][1]
    assert [e[6] for e in events if e[0] == Kind.ISSUE and e[4] == "load_async"][1:] == [
        4096 + page * PAGE for page in (2, 1, 0)
    ]
    # Both reader paths keep it.
    assert [e for e in read_trace(path).iter_decoded() if e[0] == Kind.HOST_READ] == [events[read]]
    index = Replay.open(path).index
    c = index.columns
    assert c.fut[c.kind == Kind.HOST_READ].tolist() == [table[5]]


def test_internal_uses_of_tensor_values_record_no_host_read():
    def compute(tl, ptr):
        x = tl.wait(tl.load_async(ptr, (8, 8), "f16"))
        y = tl.exp(x) + x * 2.0
        z = tl.dot(y[:, :], tl.trans(x))
        s = tl.max(z, axis=1)[:, None] - z
        tl.store(ptr + 4096, s.to("f16"))

    result = run_kernel(compute, (0,), config=CFG, keep_events=True)
    assert not [e for e in result.events if e[0] == Kind.HOST_READ]


def test_a_computed_tensor_read_is_recorded_once_between_commands():
    def printing(tl, ptr):
        x = tl.load(ptr, (4,), "f32")
        y = tl.exp(x)
        seen = []
        for _ in range(5):
            seen.append(float(np.asarray(y).sum()))  # no command between: one HOST_READ
        seen.append(y.data)
        z = y + 1.0
        seen += [z.data, z.data]  # after a command: one more
        seen += [np.asarray(x), x.data]  # the loaded tile: its future, once

    result = run_kernel(printing, (0,), config=CFG, keep_events=True)
    reads = [e[3] for e in result.events if e[0] == Kind.HOST_READ]
    load = next(e for e in result.events if e[0] == Kind.ISSUE and e[4] == "load")
    assert reads == [-1, -1, load[5]]


def test_reads_after_the_kernel_ended_record_nothing():
    kept = {}

    def keep(tl, ptr):
        kept["x"] = tl.load(ptr, (4,), "f32")
        kept["y"] = tl.exp(kept["x"])

    result = run_kernel(keep, (0,), config=CFG, keep_events=True)
    assert kept["y"].data.shape == np.asarray(kept["y"]).shape == (4,)
    assert not [e for e in result.events if e[0] == Kind.HOST_READ]
    with pytest.raises(RecycledBufferError):  # its buffer was recycled at the kernel's end
        _ = kept["x"].data


def test_a_recycled_tensor_still_raises_on_internal_use():
    def recycled(tl, ptr):
        with tl.scope():
            x = tl.load(ptr, (4,), "f32")
        tl.exp(x)

    with pytest.raises(RecycledBufferError):
        run_kernel(recycled, (0,), config=CFG)


# --- replay, events view and export take HOST_READ in stride ------------------------------


def test_a_host_read_is_described_replayed_and_exported(tmp_path):
    from chrome_trace_validator import problems

    from kbdebug.export.chrome import write_chrome
    from kbdebug.ui.queries import event_text

    path = tmp_path / "paged.kbt"
    run_kernel(paged, (0, 4096, 3), config=CFG, memory=paged_memory(3), trace=path)
    replay = Replay.open(path)
    c = replay.index.columns
    (i,) = np.flatnonzero(c.kind == Kind.HOST_READ).tolist()
    assert event_text(replay, i) == "PE 0 host read of future 0"
    replay.seek(i + 1)
    assert replay.state.pes[0].status == "running"
    replay.seek(replay.n_events)
    write_chrome(replay, tmp_path / "paged.json")
    doc = json.loads((tmp_path / "paged.json").read_text())
    assert problems(doc) == []
    reads = [e for e in doc["traceEvents"] if e.get("name") == "host read"]
    assert [e["args"] for e in reads] == [{"future": 0}]
