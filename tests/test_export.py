"""Chrome/Perfetto export: every scenario, a truncated and a failed run pass the importer's rules;
the lanes, slices, futures, flows, counters and instants carry the trace's numbers."""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest
from chrome_trace_validator import problems

from emulator import HardwareConfig
from emulator.errors import DeadlockError, KernelError
from emulator.kernel.runner import run_kernel
from emulator.memory import Memory
from emulator.scenarios import SCENARIOS, decode_blocking, ring_attention
from emulator.trace.schema import Kind
from kbdebug.analysis import Analysis
from kbdebug.cli import main
from kbdebug.export import chrome
from kbdebug.export.chrome import export_chrome, write_chrome
from kbdebug.replay import Replay

PAIR = HardwareConfig(mesh_rows=1, mesh_cols=2)


def exported(replay: Replay, tmp_path, name: str = "out.json") -> dict:
    path = tmp_path / name
    write_chrome(replay, path)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def of_phase(doc: dict, *phases: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] in phases]


def recorded(scenario, path) -> Replay:
    scenario.run(trace=path)
    return Replay.open(path)


@pytest.fixture(scope="module")
def blocking(tmp_path_factory) -> tuple[Replay, dict]:
    """decode_blocking, 4 tiles: its replay and its export."""
    root = tmp_path_factory.mktemp("blocking")
    replay = recorded(decode_blocking(n_tiles=4), root / "b.kbt")
    return replay, exported(replay, root)


@pytest.fixture(scope="module")
def ring(tmp_path_factory) -> tuple[Replay, dict]:
    """ring_attention on 4 PEs, links slow enough that some receives stall and some do not."""
    root = tmp_path_factory.mktemp("ring")
    replay = recorded(ring_attention(config=HardwareConfig(ipcq_bytes_per_cycle=8)), root / "r.kbt")
    return replay, exported(replay, root)


# --- the importer's rules -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_builtin_scenario_exports_json_the_importers_accept(name, tmp_path):
    replay = recorded(SCENARIOS[name](), tmp_path / f"{name}.kbt")
    doc = exported(replay, tmp_path)
    assert problems(doc) == []
    assert of_phase(doc, "X"), "no slices"


def test_truncated_trace_exports_json_the_importers_accept(tmp_path):
    path = tmp_path / "full.kbt"
    decode_blocking(n_tiles=8).run(trace=path)
    data = path.read_bytes()
    cut = tmp_path / "cut.kbt"
    cut.write_bytes(data[: len(data) * 6 // 10])
    replay = Replay.open(cut)
    assert replay.status == "truncated"
    doc = exported(replay, tmp_path)
    assert problems(doc) == []
    (marker,) = [e for e in of_phase(doc, "i") if e["name"] == "trace cut off"]
    assert marker["s"] == "g"
    (kernel,) = [e for e in of_phase(doc, "X") if e["cat"] == "kernel"]
    assert kernel["args"]["status"] == "cut off"
    assert kernel["args"]["end_cycle"] == replay.end_time


def kernel_that_raises(tl):
    f = tl.load_async(0, (64, 64), "f16")
    g = tl.load_async(8192, (64, 64), "f16")
    tl.wait(f)
    if tl.program_id(0) == 1:
        raise ValueError("bad tile")
    tl.wait(g)


def kernel_that_deadlocks(tl):
    tl.wait(tl.recv_async("right", (4,), "f16"))


@pytest.mark.parametrize(
    ("kernel", "error", "status", "instant"),
    [
        (kernel_that_raises, KernelError, "error", "kernel error"),
        (kernel_that_deadlocks, DeadlockError, "deadlock", "deadlock"),
    ],
)
def test_failed_run_exports_json_the_importers_accept(kernel, error, status, instant, tmp_path):
    path = tmp_path / "failed.kbt"
    with pytest.raises(error):
        run_kernel(kernel, (), (2,), Memory(1 << 16), PAIR, trace=path)
    replay = Replay.open(path)
    assert replay.status == status
    doc = exported(replay, tmp_path)
    assert problems(doc) == []
    marks = [e for e in of_phase(doc, "i") if e["name"] == instant]
    assert marks and all(m["s"] == "t" and m["cat"] == "error" for m in marks)


# --- the mapping ------------------------------------------------------------------------


def test_each_pe_is_a_process_with_its_lanes_named_and_in_order(ring):
    replay, doc = ring
    meta = of_phase(doc, "M")
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert processes == {pe + 1: f"PE {pe}" for pe in range(4)}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    order = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in meta
             if e["name"] == "thread_sort_index"}  # fmt: skip
    lanes = [names[key] for key in sorted((k for k in names if k[0] == 2), key=order.get)]
    assert lanes == [
        "kernel ring_attention", "dma_read0", "dma_write0", "gemm", "math",
        "ipcq.left", "ipcq.right",
    ]  # fmt: skip
    tids = [tid for _, tid in names]
    assert len(set(tids)) == len(tids), "tids are unique across the file"


def test_occupancy_slices_run_from_grant_to_release_named_by_op(blocking):
    replay, doc = blocking
    k, c = replay.index.commands, replay.index.columns
    slices = [e for e in of_phase(doc, "X") if e["cat"] not in ("kernel", "stall")]
    assert len(slices) == int((k.grant >= 0).sum())
    for e in slices:
        cmd = e["args"]["cmd"]
        grant, release = int(c.time[k.grant[cmd]]), int(c.time[k.release[cmd]])
        assert (e["ts"], e["dur"]) == pytest.approx((grant / 1000, (release - grant) / 1000))
        assert e["name"] == replay.index.string(int(k.op[cmd]))
        assert e["args"]["bytes"] == int(k.nbytes[cmd])
        assert e["args"]["source"] == str(replay.index.loc(int(k.loc[cmd])))


def test_stall_slices_cover_each_wait_that_stalled_on_the_kernel_lane(ring):
    replay, doc = ring
    f, c = replay.index.futures, replay.index.columns
    stalled = {int(i) for i in range(len(f.stall)) if f.stall[i] > 0}
    waited = {int(i) for i in range(len(f.stall)) if f.wait_end[i] >= 0}
    assert stalled and waited - stalled, "the ring has waits that stall and waits that do not"
    stalls = [e for e in of_phase(doc, "X") if e["cat"] == "stall"]
    assert {e["args"]["future"] for e in stalls} == stalled
    kernel_lanes = {(e["pid"], e["tid"]) for e in of_phase(doc, "X") if e["cat"] == "kernel"}
    for e in stalls:
        fut = e["args"]["future"]
        begin, end = int(c.time[f.wait_begin[fut]]), int(c.time[f.wait_end[fut]])
        assert (e["ts"], e["dur"]) == pytest.approx((begin / 1000, (end - begin) / 1000))
        assert e["args"]["stalled_cycles"] == int(f.stall[fut])
        assert (e["pid"], e["tid"]) in kernel_lanes


def test_each_future_is_one_async_slice_from_issue_to_resolution(ring):
    replay, doc = ring
    f, k, c = replay.index.futures, replay.index.commands, replay.index.columns
    begins = {e["id2"]["local"]: e for e in of_phase(doc, "b")}
    ends = {e["id2"]["local"]: e for e in of_phase(doc, "e")}
    futures = [int(i) for i in range(len(f.cmd)) if f.cmd[i] >= 0]
    assert sorted(begins) == sorted(ends) == futures
    for fut in futures:
        cmd = int(f.cmd[fut])
        resolved = f.wait_end[fut] if f.wait_end[fut] >= 0 else k.complete[cmd]
        assert begins[fut]["ts"] == pytest.approx(c.time[k.issue[cmd]] / 1000)
        assert ends[fut]["ts"] == pytest.approx(c.time[resolved] / 1000)
        assert begins[fut]["pid"] == int(k.pe[cmd]) + 1


def test_flows_join_each_transfer_to_the_wait_it_stalled_and_skip_fast_paths(ring):
    replay, doc = ring
    f = replay.index.futures
    starts = {e["id"]: e for e in of_phase(doc, "s")}
    finishes = {e["id"]: e for e in of_phase(doc, "f")}
    stalled = {int(i) for i in range(len(f.stall)) if f.stall[i] > 0}
    assert set(starts) == set(finishes) == stalled
    # A received block's flow starts on the sender's link lane, on another PE.
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in of_phase(doc, "M")
             if e["name"] == "thread_name"}  # fmt: skip
    received = [fid for fid in stalled if lanes[(starts[fid]["pid"], starts[fid]["tid"])]
                == "ipcq.right"]  # fmt: skip
    assert received
    assert all(starts[fid]["pid"] != finishes[fid]["pid"] for fid in received)
    assert all(e["bp"] == "e" for e in finishes.values())


def test_ts_is_cycles_over_the_configured_clock(tmp_path):
    replay = recorded(decode_blocking(n_tiles=2, config=HardwareConfig(clock_mhz=1250.0)),
                      tmp_path / "clock.kbt")  # fmt: skip
    doc = exported(replay, tmp_path)
    assert doc["otherData"]["clock_mhz"] == 1250.0
    assert doc["displayTimeUnit"] == "ns"
    assert problems(doc) == []
    (kernel,) = [e for e in of_phase(doc, "X") if e["cat"] == "kernel"]
    assert kernel["dur"] == pytest.approx(round(replay.end_time * 1000 / 1250) / 1000)
    stall = next(e for e in of_phase(doc, "X") if e["cat"] == "stall")
    begin = replay.index.columns.time[replay.index.futures.wait_begin[stall["args"]["future"]]]
    assert stall["ts"] == pytest.approx(round(begin * 1000 / 1250) / 1000)


def test_scratch_counter_follows_bytes_in_use(blocking):
    replay, doc = blocking
    c = replay.index.columns
    scratch = (c.kind == Kind.SCRATCH_ALLOC) | (c.kind == Kind.SCRATCH_FREE)
    counters = of_phase(doc, "C")
    assert [e["args"]["bytes"] for e in counters] == c.val[scratch].tolist()
    assert {e["name"] for e in counters} == {"scratch"}


def test_findings_are_instants_with_their_id_and_source_line(blocking):
    replay, doc = blocking
    marks = [e for e in of_phase(doc, "i") if e["cat"] == "finding"]
    assert [m["args"]["id"] for m in marks] == [f.id for f in Analysis(replay).findings]
    for mark, finding in zip(marks, Analysis(replay).findings, strict=True):
        assert mark["s"] == "p" and mark["pid"] == finding.pe + 1
        assert mark["name"] == f"{finding.rule} {finding.title}"


def test_metadata_names_the_clock_source_and_version(blocking):
    replay, doc = blocking
    other = doc["otherData"]
    assert other["clock_mhz"] == 1000.0 and other["source"] == replay.path
    assert other["kbdebug_version"]
    assert set(doc) == {"displayTimeUnit", "otherData", "traceEvents"}


def test_export_streams_in_batches_and_batch_size_does_not_change_it(blocking, monkeypatch):
    replay, doc = blocking

    class Writes(io.StringIO):
        sizes: list[int] = []

        def write(self, text: str) -> int:
            self.sizes.append(len(text))
            return super().write(text)

    monkeypatch.setattr(chrome, "BATCH", 16)
    out = Writes()
    export_chrome(replay, out)
    assert json.loads(out.getvalue()) == doc
    longest = max(len(line) for line in out.getvalue().splitlines())
    assert max(out.sizes) <= 16 * (longest + 2)


def test_phases_counted_by_the_export_match_the_file(blocking, tmp_path):
    replay, doc = blocking
    stats = write_chrome(replay, tmp_path / "x.json")
    counts = Counter(e["ph"] for e in doc["traceEvents"])
    assert stats.events == len(doc["traceEvents"])
    assert stats.phases["b/e"] == counts["b"] + counts["e"]
    assert stats.bytes == (tmp_path / "x.json").stat().st_size


# --- the command ------------------------------------------------------------------------


def test_export_command_writes_next_to_the_trace_by_default(tmp_path, capsys):
    trace = tmp_path / "run.kbt"
    decode_blocking(n_tiles=2).run(trace=trace)
    assert main(["export", str(trace)]) == 0
    with open(tmp_path / "run.json", encoding="utf-8") as f:
        assert problems(json.load(f)) == []
    assert "run.json" in capsys.readouterr().out


def test_export_command_writes_to_output(tmp_path):
    trace = tmp_path / "run.kbt"
    decode_blocking(n_tiles=2).run(trace=trace)
    assert main(["export", str(trace), "-o", str(tmp_path / "elsewhere.json")]) == 0
    assert (tmp_path / "elsewhere.json").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such file"), (b"not a trace", "not a kbt trace"), (b"", "no header")],
)
def test_bad_trace_is_exit_2_with_one_line_and_no_traceback(tmp_path, capsys, content, message):
    trace = tmp_path / "bad.kbt"
    if content is not None:
        trace.write_bytes(content)
    assert main(["export", str(trace), "-o", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kbdebug export: ")
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "o.json").exists()


def test_unwritable_output_is_exit_2_and_leaves_nothing(tmp_path, capsys):
    trace = tmp_path / "run.kbt"
    decode_blocking(n_tiles=2).run(trace=trace)
    assert main(["export", str(trace), "-o", str(tmp_path / "no" / "dir.json")]) == 2
    assert capsys.readouterr().err.startswith("kbdebug export: cannot write")


# --- the validator catches what the importers reject -----------------------------------


def lanes(*threads: tuple[int, int]) -> list[dict]:
    out = []
    for pid, tid in threads:
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "process_name",
                    "args": {"name": f"p{pid}"}})  # fmt: skip
        out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                    "args": {"name": f"t{tid}"}})  # fmt: skip
    return out


def x(ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "pid": 1, "tid": tid, "ts": ts, "dur": dur, "name": "s"}


def doc_of(*events: dict) -> dict:
    return {"traceEvents": [*lanes((1, 1), (1, 2)), *events], "displayTimeUnit": "ns"}


def test_validator_accepts_nested_and_touching_slices():
    assert problems(doc_of(x(0, 10), x(2, 3), x(5, 5), x(10, 1), x(11, 0))) == []


@pytest.mark.parametrize(
    ("events", "complaint"),
    [
        ([x(0, 10), x(5, 10)], "without nesting"),
        ([x(0, -1)], "dur"),
        # Disjoint as written, overlapping once Perfetto rounds to nanoseconds.
        ([x(0.0006, 0.0016), x(0.0024, 1)], "ns overlaps"),
        ([{"ph": "X", "pid": 1, "tid": 9, "ts": 0, "dur": 1, "name": "s"}], "no thread_name"),
        ([{"ph": "b", "pid": 1, "tid": 1, "ts": 0, "name": "a", "cat": "c", "id": 1}],
         "1 b and 0 e"),
        ([{"ph": "b", "pid": 1, "tid": 1, "ts": 0, "name": "a", "cat": "c", "id": "0x1"}],
         "not an integer"),
        ([x(0, 10), x(20, 10, tid=2),
          {"ph": "s", "pid": 1, "tid": 1, "ts": 5, "name": "f", "cat": "c", "id": 1},
          {"ph": "f", "pid": 1, "tid": 2, "ts": 31, "name": "f", "cat": "c", "id": 1, "bp": "e"}],
         "not strictly inside"),
        ([x(0, 10), x(20, 10, tid=2),
          {"ph": "s", "pid": 1, "tid": 1, "ts": 5, "name": "f", "cat": "c", "id": 1},
          {"ph": "f", "pid": 1, "tid": 2, "ts": 25, "name": "f", "cat": "c", "id": 1}],
         "does not bind"),
        ([{"ph": "i", "pid": 1, "tid": 1, "ts": 0, "name": "n", "s": "x"}], "scope"),
        ([{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "name": "a\u0001"}], "control"),
        ([{"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "name": "a", "shape": [1]}], "array"),
    ],
)  # fmt: skip
def test_validator_rejects_what_the_importers_reject(events, complaint):
    found = problems(doc_of(*events))
    assert any(complaint in p for p in found), found
