"""Format 1.3's READS events: which loaded or received data each command consumes.

The emulator records a READS (cmd, future) right after a compute, store or send's ISSUE
for each operand in a load's or receive's scratch buffer, views (``x[...]``,
``tl.trans(x)``) included, computed tensors not; the writer writes them as plain event
records, both reader paths read them alike, a file of an older version holding code 25
is refused, and the replay index puts them in its ``kind``, ``cmd`` and ``fut`` columns.
"""

from __future__ import annotations

import io
import os

import msgpack
import numpy as np
import pytest
from test_trace_tables import outcome
from trace_synth import every_kind_events, footer_record, header_record, pack_objects, record_run

from emulator import HardwareConfig, Memory, MemoryRecorder, run_kernel
from emulator.kernel.tl import TL
from emulator.recorder import TeeRecorder
from emulator.scenarios import SCENARIOS
from emulator.trace import bulk, parser, wire
from emulator.trace.reader import read_trace, read_trace_tables
from emulator.trace.schema import COMPOUNDS, FIELDS, KIND_SINCE, Kind, event_codes
from emulator.trace.writer import TraceWriter
from kbdebug.replay import Replay
from kbdebug.replay import cache as index_cache
from kbdebug.replay.tables import NONE

CFG = HardwareConfig(hbm_bytes_per_cycle=64, hbm_latency=100, issue_cycles=4)
MESH = HardwareConfig(mesh_rows=1, mesh_cols=2, issue_cycles=4, hbm_latency=100)
TILE = (8, 8)  # f16: 128 bytes


def reads_of(events) -> list[tuple[int, int, int, int]]:
    """(pe, time, cmd, future) of each READS."""
    return [(e[2], e[1], e[3], e[4]) for e in events if e[0] == Kind.READS]


def issued(events, op: str) -> list[int]:
    """The command ids of the ISSUEs of ``op``, in order."""
    return [e[3] for e in events if e[0] == Kind.ISSUE and e[4] == op]


def futures_of(events, op: str) -> list[int]:
    return [e[5] for e in events if e[0] == Kind.ISSUE and e[4] == op]


# What may come between a command's ISSUE and its READS: the rest of the ISSUE's own
# record (a compound: OP_LOG, CHAN_REQUEST, CHAN_GRANT) and the command's other READS.
BETWEEN = {Kind.OP_LOG, Kind.CHAN_REQUEST, Kind.CHAN_GRANT, Kind.READS}


def assert_right_after_issues(events) -> None:
    """Each READS follows its command's ISSUE at once (but for BETWEEN), on its PE, in
    its cycle."""
    issue_at = {}
    for i, e in enumerate(events):
        if e[0] == Kind.ISSUE:
            issue_at[e[3]] = i
        elif e[0] == Kind.READS:
            j = issue_at[e[3]]
            assert events[j][1:3] == e[1:3], (events[j], e)
            assert all(events[k][0] in BETWEEN for k in range(j + 1, i)), (events[j:i], e)


def traced(kernel, args=(), grid=(1,), config=CFG) -> list[tuple]:
    """The events of a run whose HBM holds f16 ones at 0..1023 (no log or division of 0)."""
    memory = Memory()
    memory.write(0, np.ones(512, np.float16))
    rec = MemoryRecorder()
    run_kernel(kernel, args, grid, memory, config, recorder=rec)
    assert_right_after_issues(rec.events)
    return rec.events


# --- provenance -------------------------------------------------------------------------


def test_views_keep_the_scratch_buffer_and_computed_tensors_have_none():
    seen = {}

    def kernel(tl):
        x = tl.wait(tl.load_async(0, TILE, "f16"))
        seen["x"] = x.buffer
        seen["trans"] = tl.trans(x).buffer
        seen["index"] = x[0].buffer
        seen["trans of index"] = tl.trans(x[1:3]).buffer
        seen["index of trans"] = tl.trans(x)[:, 2].buffer
        seen["computed"] = (x * 2).buffer
        seen["trans of computed"] = tl.trans(x * 2).buffer
        seen["trans of array"] = tl.trans(np.ones((2, 3), np.float32)).buffer

    traced(kernel)
    assert seen["x"] is not None and seen["x"].fid >= 0  # filled by the load
    for name in ("trans", "index", "trans of index", "index of trans"):
        assert seen[name] is seen["x"], name
    for name in ("computed", "trans of computed", "trans of array"):
        assert seen[name] is None, name


def test_a_transposed_view_of_a_recycled_buffer_is_refused_as_before():
    from emulator import RecycledBufferError

    def kernel(tl):
        with tl.scope():
            x = tl.load(0, TILE, "f16")
        tl.exp(tl.trans(x))

    with pytest.raises(RecycledBufferError):
        traced(kernel)


# Each op on a loaded tile x (and numbers, arrays or computed tensors beside it): the op's
# name in its ISSUE, and how it is called.
OPS = {
    "dot": ("dot", lambda tl, x: tl.dot(x, tl.trans(x))),  # x twice: one READS
    "exp": ("exp", lambda tl, x: tl.exp(x)),
    "log": ("log", lambda tl, x: tl.log(x)),
    "maximum": ("maximum", lambda tl, x: tl.maximum(x, 0.0)),
    "maximum, x second": ("maximum", lambda tl, x: tl.maximum(np.float32(0), x)),
    "max": ("max", lambda tl, x: tl.max(x, axis=1)),
    "sum": ("sum", lambda tl, x: tl.sum(x)),
    "add": ("add", lambda tl, x: x + 1.0),
    "radd": ("add", lambda tl, x: 1.0 + x),
    "sub": ("sub", lambda tl, x: x - np.ones(TILE, np.float16)),
    "rsub": ("sub", lambda tl, x: 1 - x),
    "mul": ("mul", lambda tl, x: x * x),  # the same operand twice: one READS
    "rmul": ("mul", lambda tl, x: 2 * x),
    "div": ("div", lambda tl, x: x / 3),
    "rdiv": ("div", lambda tl, x: 3 / x),
    "neg": ("neg", lambda tl, x: -x),
    "to": ("cast", lambda tl, x: x.to("f32")),
    "view operand": ("add", lambda tl, x: x[0] + x[:, 1]),  # two views of one buffer: one
    "store": ("store", lambda tl, x: tl.store(4096, x)),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_each_command_reads_its_loaded_operand_once(name):
    op, call = OPS[name]

    def kernel(tl):
        x = tl.load(0, TILE, "f16")
        call(tl, x)

    events = traced(kernel)
    (load_future,) = futures_of(events, "load")
    (cmd,) = issued(events, op)
    issue_time = next(e[1] for e in events if e[0] == Kind.ISSUE and e[3] == cmd)
    assert reads_of(events) == [(0, issue_time, cmd, load_future)]


def test_computed_tensors_and_fills_read_nothing():
    def kernel(tl):
        x = tl.load(0, TILE, "f16")
        y = tl.exp(x)  # reads x
        z = tl.zeros(TILE) + tl.full(TILE, 2.0)  # no operand in a buffer
        w = y * z  # computed from x, not x: not transitive
        tl.store(4096, tl.trans(w))
        tl.store(8192, np.ones(4, np.float32))

    events = traced(kernel)
    (exp,) = issued(events, "exp")
    assert [r[2] for r in reads_of(events)] == [exp]


def test_two_futures_read_by_one_command_in_operand_order():
    def kernel(tl):
        fa = tl.load_async(0, TILE, "f16")
        fb = tl.load_async(128, TILE, "f16")
        b, a = tl.wait(fb), tl.wait(fa)
        tl.dot(b, tl.trans(a))
        tl.maximum(a, b)

    events = traced(kernel)
    fa, fb = futures_of(events, "load_async")
    (dot,), (maximum,) = issued(events, "dot"), issued(events, "maximum")
    assert [(r[2], r[3]) for r in reads_of(events)] == [
        (dot, fb),
        (dot, fa),
        (maximum, fa),
        (maximum, fb),
    ]


def test_send_reads_its_tensor_and_a_received_tile_is_read_as_its_receive():
    def kernel(tl):
        if tl.program_id(0) == 0:
            x = tl.load(0, TILE, "f16")
            tl.wait(tl.send("right", tl.trans(x)))
            tl.send("right", np.ones(4, np.float16))  # an array: reads nothing
        else:
            r = tl.wait(tl.recv_async("left", TILE, "f16"))
            tl.recv_async("left", (4,), "f16")
            tl.store(4096, r[0] * 2)

    events = traced(kernel, grid=(2,), config=MESH)
    (load,) = futures_of(events, "load")
    first_send = issued(events, "send")[0]
    recv = futures_of(events, "recv_async")[0]
    (mul,) = issued(events, "mul")
    at = {e[3]: e[1] for e in events if e[0] == Kind.ISSUE}
    assert reads_of(events) == [(0, at[first_send], first_send, load), (1, at[mul], mul, recv)]


def small(tl, ptr):
    fa = tl.load_async(ptr, TILE, "f16")  # cmd 0, future 0
    fb = tl.load_async(ptr + 128, TILE, "f16")  # cmd 1, future 1
    a = tl.wait(fa)
    b = tl.wait(fb)
    s = tl.dot(a, tl.trans(b))  # cmd 2: reads 0 and 1 (b through its transpose)
    e = tl.exp(s)  # cmd 3: computed, reads nothing
    m = a * a  # cmd 4: reads 0 once
    n = e + b[0]  # cmd 5: reads 1 through a view
    tl.store(ptr + 4096, m + n)  # cmd 6 (add), cmd 7 (store, future 2): nothing
    tl.store(ptr + 8192, a[1:3])  # cmd 8, future 3: reads 0


def test_a_small_kernel_records_exactly_these_reads():
    events = traced(small, (0,))
    got = [(e[0], e[1], e[3], e[4]) for e in events if e[0] == Kind.READS]
    # Loads of 128 bytes at 64 bytes a cycle: 2 cycles on the channel, 100 of latency,
    # after 4 issue cycles. fa's channel from 4 to 6, landed at 106; fb's from 8 to 10,
    # landed at 110. The dot (512 MACs at 256 a cycle) from 110 to 112, the exp (64
    # elements, 1 cycle) at 112, the mul at 113, the adds at 114 and 115, and the stores,
    # which cost 4 issue cycles each, at 116 and 120.
    assert got == [
        (Kind.READS, 110, 2, 0),
        (Kind.READS, 110, 2, 1),
        (Kind.READS, 113, 4, 0),
        (Kind.READS, 114, 5, 1),
        (Kind.READS, 120, 8, 0),
    ]
    issues = {e[3]: (e[1], e[4], e[5]) for e in events if e[0] == Kind.ISSUE}
    assert issues[2][:2] == (110, "dot") and issues[5][:2] == (114, "add")
    assert issues[7] == (116, "store", 2) and issues[8] == (120, "store", 3)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_reads_follow_their_commands_issue_record_in_every_scenario(name):
    """A READS is on its command's PE at its ISSUE's cycle, and only the events of the
    ISSUE's own record (OP_LOG, CHAN_REQUEST, CHAN_GRANT) and the command's other READS
    come between; it names a load's or a receive's future, issued before."""
    rec = MemoryRecorder()
    SCENARIOS[name]().run(recorder=rec)
    events = rec.events
    assert_right_after_issues(events)
    ops = {e[3]: e[4] for e in events if e[0] == Kind.ISSUE}
    buffered = {
        e[5]: e[1]
        for e in events
        if e[0] == Kind.ISSUE and e[4] in ("load", "load_async", "recv_async")
    }
    pairs = set()
    for e in events:
        if e[0] != Kind.READS:
            continue
        cmd, future = e[3], e[4]
        assert ops[cmd] not in ("load", "load_async", "recv_async", "composite")
        assert future in buffered and buffered[future] <= e[1]
        assert (cmd, future) not in pairs
        pairs.add((cmd, future))
    assert bool(pairs) == (name != "gemm_composite")


def test_a_command_queued_on_a_busy_engine_reads_after_its_issue_record():
    def kernel(tl):
        x = tl.load(0, TILE, "f16")
        tl._pe.math.submit(tl._launch.next_cmd(), 50)  # the engine busy for 50 cycles
        tl.exp(x)

    events = traced(kernel)
    (exp,) = issued(events, "exp")
    i = next(i for i, e in enumerate(events) if e[0] == Kind.ISSUE and e[3] == exp)
    assert [e[0] for e in events[i : i + 4]] == [
        Kind.ISSUE,
        Kind.OP_LOG,
        Kind.CHAN_REQUEST,
        Kind.READS,
    ]
    assert events[i + 3][1:] == (events[i][1], 0, exp, futures_of(events, "load")[0])


def test_untraced_runs_do_not_look_for_reads(monkeypatch):
    def refuse(*args):
        raise AssertionError("READS looked up without a trace")

    monkeypatch.setattr(TL, "_reads", refuse)
    for name in ("decode_prefetch", "ring_attention"):
        SCENARIOS[name]().run()
    run_kernel(small, (0,), config=CFG)


# --- the file ---------------------------------------------------------------------------


def written(events) -> bytes:
    out = io.BytesIO()
    record_run(TraceWriter(out), events)
    return out.getvalue()


def test_schema_reads_since_1_3_code_25_field_cmd_and_future():
    assert int(Kind.READS) == 25 and 25 not in COMPOUNDS
    assert FIELDS[Kind.READS] == (("cmd", "int"), ("future", "int"))
    assert KIND_SINCE[Kind.READS] == (1, 3) and wire.FORMAT_VERSION >= (1, 3)
    assert 25 in event_codes((1, 3)) and 25 not in event_codes((1, 2))
    assert set(COMPOUNDS) <= event_codes((1, 2)) and not set(COMPOUNDS) & event_codes((1, 1))


def test_reads_are_written_as_plain_event_records(tmp_path):
    path = tmp_path / "small.kbt"
    run_kernel(small, (0,), config=CFG, trace=path, digests=False, provenance=False)
    records = [r for r in msgpack.Unpacker(open(path, "rb"), strict_map_key=False)]
    assert records[0]["version"] == [1, 3]
    reads = [r for r in records if isinstance(r, list) and r[0] == 25]
    # [25, dt, pe, cmd, future]: each follows its command's ISSUE in the same cycle.
    assert reads == [[25, 0, 0, 2, 0], [25, 0, 0, 2, 1], [25, 0, 0, 4, 0], [25, 0, 0, 5, 1]] + [
        [25, 0, 0, 8, 0]
    ]
    assert [r[2:] for r in reads_of(read_trace(path).iter_decoded())] == [
        (2, 0),
        (2, 1),
        (4, 0),
        (5, 1),
        (8, 0),
    ]


@pytest.fixture(params=[64, 2048, 1 << 16])
def chunk(request, monkeypatch):
    monkeypatch.setattr(parser, "CHUNK_BYTES", request.param)
    monkeypatch.setattr(parser, "BULK_BYTES", request.param)
    return request.param


@pytest.fixture(scope="module")
def runs_1_3(tmp_path_factory) -> dict[str, bytes]:
    """A 1.3 trace of each scenario, recorded once for every chunk size."""
    out = {}
    for name in ("prefill", "ring_attention", "decode_prefetch"):
        path = tmp_path_factory.mktemp("runs") / f"{name}.kbt"
        SCENARIOS[name](**({"n_tiles": 8} if name != "ring_attention" else {})).run(trace=path)
        out[name] = path.read_bytes()
    return out


@pytest.mark.parametrize("name", ["prefill", "ring_attention", "decode_prefetch"])
def test_both_reader_paths_read_a_1_3_run_alike(name, chunk, runs_1_3):
    data = runs_1_3[name]
    exact = outcome(read_trace, data)
    assert exact == outcome(read_trace_tables, data)
    assert exact[0] == "trace" and any(e[0] == Kind.READS for e in exact[-1])
    # Cut short anywhere (at some 12 offsets, inside records or between), alike too; in
    # 64-byte chunks (a read per record) at 4 of them: test_trace_tables cuts a trace at
    # every byte in 64-byte chunks.
    cuts = 4 if chunk == 64 else 12
    for cut in range(len(data) // 2, len(data), len(data) // (2 * cuts) + 1):
        assert outcome(read_trace_tables, data[:cut]) == outcome(read_trace, data[:cut])


READS_RECORD = [Kind.READS, 0, 0, 0, 0]


@pytest.mark.parametrize("version", [(1, 0), (1, 1), (1, 2)])
def test_code_25_in_an_older_file_is_refused_with_one_clear_error(version):
    good = [[Kind.KERNEL_START, 0, 0, 0, -1], [Kind.ISSUE, 0, 0, 0, 0, 0, 0, 2, [1], 0, True, -1]]
    head = [header_record(version=list(version)), [0, "k"]]
    data = pack_objects(*head, *good, READS_RECORD, footer_record(3))
    results = {outcome(read, data) for read in (read_trace, read_trace_tables)}
    assert len(results) == 1
    ((what, message, offset, index),) = results
    assert what == "error"
    older = ".".join(map(str, version))
    why = f"(READS, an event kind of format 1.3 and later; this file is {older})"
    assert f"unknown record kind 25 {why}" in message
    assert offset == len(pack_objects(*head, *good)) and index is None
    # The same file as 1.3 is a valid trace.
    data = pack_objects(
        header_record(version=[1, 3]), *head[1:], *good, READS_RECORD, footer_record(3)
    )
    assert outcome(read_trace, data)[-1][-1] == READS_RECORD


@pytest.mark.parametrize(
    "record, problem",
    [
        ([Kind.READS, 0, 0, 0], "READS has 1 fields, expected 2"),
        ([Kind.READS, 0, 0, 0, 0, 0], "READS has 3 fields, expected 2"),
        ([Kind.READS, 0, 0, 0, -1], "READS future -1 is negative (no such id)"),
        ([Kind.READS, 0, 0, -1, 0], "READS cmd -1 is negative (no such id)"),
        ([Kind.READS, 0, 0, 0, 10**9], "READS future 1000000000 is not a possible id"),
        ([Kind.READS, 0, 0, 0, "0"], "READS future is str '0', expected int"),
        ([Kind.READS, 0, 9, 0, 0], "READS pe 9 is outside the mesh of 4 PEs"),
        ([Kind.READS, -1, 0, 0, 0], "READS time goes back by 1 cycles"),
    ],
)
def test_a_bad_reads_record_is_refused_alike_on_both_paths(record, problem):
    data = pack_objects(header_record(version=[1, 3]), record, footer_record(1))
    results = {outcome(read, data) for read in (read_trace, read_trace_tables)}
    assert len(results) == 1
    ((what, message, offset, index),) = results
    assert what == "error" and problem in message, message
    assert offset == len(pack_objects(header_record(version=[1, 3])))


def test_a_newer_minor_file_keeps_reads_and_skips_what_it_adds():
    data = pack_objects(
        header_record(version=[1, 7]),
        READS_RECORD,
        [28, 3, 0, "a later kind"],
        [Kind.READS, 0, 1, 0, 0, "a later field"],
        footer_record(3, end_time=3),
    )
    trace = read_trace(data)
    assert trace.events == [READS_RECORD, [Kind.READS, 3, 1, 0, 0]]


def test_bundled_traces_of_older_versions_still_read_on_both_paths():
    here = os.path.dirname(__file__)
    roots = [os.path.join(here, "..", "traces"), os.path.join(here, "data", "old_traces")]
    paths = sorted(os.path.join(r, n) for r in roots for n in os.listdir(r) if n.endswith(".kbt"))
    assert paths
    for name in paths:
        data = open(name, "rb").read()
        exact = outcome(read_trace, data)
        assert exact[0] == "trace" and exact == outcome(read_trace_tables, data), name
        version = exact[2]
        assert (1, 0) <= version <= wire.FORMAT_VERSION
        if version < (1, 3):
            assert all(e[0] != Kind.READS for e in exact[-1]), name


class WithoutReads(TraceWriter):
    """A writer as an older version's wrote: no READS (the caller sets the version)."""

    def emit(self, kind, *args):
        if kind != Kind.READS:
            super().emit(kind, *args)


@pytest.mark.parametrize("version", [(1, 1), (1, 2)])
@pytest.mark.parametrize("name", ["prefill", "ring_attention"])
def test_a_run_written_as_an_older_version_reads_as_that_run_without_its_reads(
    name, version, monkeypatch
):
    """A 1.1 (no compounds) or 1.2 file of today's run, as an older writer wrote it, reads
    on both paths as the 1.3 file of the same run does, but for its READS."""
    rec, new = MemoryRecorder(), io.BytesIO()
    SCENARIOS[name]().run(recorder=TeeRecorder(TraceWriter(new), rec))
    with monkeypatch.context() as patch:
        patch.setattr(wire, "FORMAT_VERSION", version)
        out = io.BytesIO()
        SCENARIOS[name]().run(recorder=WithoutReads(out, compound=version >= (1, 2)))
    old = out.getvalue()
    exact = outcome(read_trace, old)
    assert exact == outcome(read_trace_tables, old)
    assert exact[2] == version
    events = read_trace(new.getvalue()).events
    # (and its PROVENANCE, format 1.6, which a writer older than 1.6 is not given)
    assert exact[-1] == [e for e in events if e[0] not in (Kind.READS, Kind.PROVENANCE)]
    assert len(exact[-1]) < len(events) == len(rec.events)


def test_the_fast_path_reads_the_reads_of_a_1_3_run_itself(tmp_path, monkeypatch):
    """No READS goes the exact path's way (which would give the same events, slower)."""
    path = tmp_path / "run.kbt"
    SCENARIOS["prefill"](n_tiles=16).run(trace=path)
    by_exact_path = []
    real = parser.Parser.hand_records_as_tables

    def spy(self, records):
        by_exact_path.extend(record[0] for record in records)
        real(self, records)

    monkeypatch.setattr(parser.Parser, "hand_records_as_tables", spy)
    batches = []
    read_trace_tables(path, batches.append)
    assert sum((tables.kinds == Kind.READS).sum() for tables in batches) > 0
    assert Kind.READS not in by_exact_path


def test_the_scan_takes_code_25_as_an_event_from_1_3_only():
    block = msgpack.packb(READS_RECORD)
    assert bulk.scan_block(block, bulk.event_mask(event_codes((1, 3)))).kinds.tolist() == [25]
    scan = bulk.scan_block(block, bulk.event_mask(event_codes((1, 2))))
    assert scan.unusual and scan.stop == 0


# --- the replay index -------------------------------------------------------------------


@pytest.fixture
def small_trace(tmp_path, monkeypatch):
    monkeypatch.setenv("KBDEBUG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(index_cache, "save_in_background", index_cache.save)
    path = tmp_path / "small.kbt"
    rec = MemoryRecorder()
    run_kernel(small, (0,), config=CFG, trace=path, recorder=rec)
    return path, rec.events


def test_the_index_holds_reads_in_its_kind_cmd_and_fut_columns(small_trace):
    path, events = small_trace
    replay = Replay.open(path, cache=False)
    c = replay.index.columns
    rows = np.flatnonzero(c.kind == Kind.READS)
    assert [(int(c.time[i]), int(c.pe[i]), int(c.cmd[i]), int(c.fut[i])) for i in rows] == [
        (e[1], e[2], e[3], e[4]) for e in events if e[0] == Kind.READS
    ]
    assert rows.tolist() == [i for i, e in enumerate(events) if e[0] == Kind.READS]
    for column in (c.chan, c.loc, c.op, c.aux, c.val, c.nbytes):
        assert (column[rows] == NONE).all()
    assert replay.describe(int(rows[0])) == f"#{rows[0]} t=110 PE0 reads cmd 2 future 0"
    # The commands and futures tables are those of the run without its READS.
    k = replay.index.commands
    assert k.issue[2] >= 0 and replay.index.futures.cmd[0] == 0


def test_the_index_cache_keeps_reads_and_is_keyed_by_the_format_version(small_trace):
    path, _ = small_trace
    first = Replay.open(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        key, _ = index_cache.trace_key(fd)
    finally:
        os.close(fd)
    assert "kbt {}.{}".format(*wire.FORMAT_VERSION) in key
    again = Replay.open(path)
    for name in ("kind", "time", "pe", "cmd", "fut"):
        assert np.array_equal(
            getattr(first.index.columns, name), getattr(again.index.columns, name)
        )
    assert (again.index.columns.kind == Kind.READS).sum() == 5


def test_synthetic_every_kind_run_round_trips_its_reads():
    data = written(every_kind_events())
    trace = read_trace(data)
    assert [e for e in trace.iter_decoded() if e[0] == Kind.READS] == [
        e for e in every_kind_events() if e[0] == Kind.READS
    ]
