"""Parquet tables: every column of every table read back with pyarrow equals the replay's and
the analysis's own figures; existing tables are never replaced without --force."""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
import pytest

from emulator.scenarios import decode_blocking
from emulator.trace.schema import Kind
from kbdebug.analysis import Analysis
from kbdebug.analysis.summary import stall_by_line
from kbdebug.cli import main
from kbdebug.export.parquet import INSTALL_HINT, TABLES, export_parquet
from kbdebug.replay import Replay
from kbdebug.replay.values import Values

pq = pytest.importorskip("pyarrow.parquet", reason="needs the parquet extra")
pc = pytest.importorskip("pyarrow.compute", reason="needs the parquet extra")


@pytest.fixture(scope="module")
def blocking(tmp_path_factory):
    """decode_blocking, 4 tiles (it has findings and named tensors), and its tables."""
    root = tmp_path_factory.mktemp("blocking")
    decode_blocking(n_tiles=4).run(trace=root / "b.kbt")
    replay = Replay.open(root / "b.kbt")
    export_parquet(replay, root / "tables")
    tables = {name: pq.read_table(root / "tables" / f"{name}.parquet") for name in TABLES}
    return replay, {name: t.to_pydict() for name, t in tables.items()}, root


def none_if_negative(values) -> list:
    return [None if v < 0 else v for v in np.asarray(values).tolist()]


def test_events_hold_every_column_of_the_index(blocking):
    replay, tables, _ = blocking
    c, events = replay.index.columns, tables["events"]
    assert events["event"] == list(range(replay.n_events))
    assert events["kind"] == [Kind(k).name for k in c.kind.tolist()]
    assert events["time"] == c.time.tolist()
    assert events["pe"] == c.pe.tolist()
    for column, name in (("cmd", "cmd"), ("future", "fut"), ("channel", "chan"), ("loc", "loc"),
                         ("aux", "aux"), ("val", "val"), ("nbytes", "nbytes")):  # fmt: skip
        assert events[column] == none_if_negative(getattr(c, name)), column
    assert events["op"] == [None if op < 0 else replay.index.string(op) for op in c.op.tolist()]


def test_futures_hold_each_future_life_as_the_analysis_tells_it(blocking):
    replay, tables, _ = blocking
    rows = Analysis(replay).futures
    futures = tables["futures"]
    assert futures["future"] == [r.id for r in rows]
    expected = {
        "pe": [r.pe for r in rows],
        "op": [r.op for r in rows],
        "addr": [r.addr for r in rows],
        "nbytes": [r.nbytes for r in rows],
        "channel": [r.channel for r in rows],
        "issue": [r.issued for r in rows],
        "grant": [r.granted for r in rows],
        "complete": [r.done for r in rows],
        "wait": [r.waited for r in rows],
        "resolved": [r.resolved for r in rows],
        "stall": [r.stall for r in rows],
        "file": [r.loc.file if r.loc else None for r in rows],
        "line": [r.loc.line if r.loc else None for r in rows],
        "wait_file": [r.wait_loc.file if r.wait_loc else None for r in rows],
        "wait_line": [r.wait_loc.line if r.wait_loc else None for r in rows],
    }
    for column, values in expected.items():
        assert futures[column] == values, column
    k = replay.index.commands
    assert futures["cmd"] == replay.index.futures.cmd[futures["future"]].tolist()
    locs = replay.index.locs
    assert [locs[i] if i is not None else None for i in futures["loc"]] == [r.loc for r in rows]
    tensors = Values.of(replay).tensors
    assert len(tensors)  # the trace names its tensors: some futures are a slice of one
    slices = [tensors.slice_of(int(k.addr[c]), int(k.nbytes[c])) for c in futures["cmd"]]
    assert futures["tensor_slice"] == [None if s is None else str(s) for s in slices]
    assert any(s is not None and "[" in s for s in futures["tensor_slice"])
    assert any(s > 0 for s in futures["stall"])


def test_findings_and_pe_figures_are_the_analysis_own(blocking):
    replay, tables, _ = blocking
    analysis = Analysis(replay)
    findings = tables["findings"]
    assert findings["id"] and findings["id"] == [f.id for f in analysis.findings]
    for column in ("rule", "title", "pe", "start", "end", "saving", "share", "pe_saving",
                   "stall", "count", "message", "suggestion"):  # fmt: skip
        assert findings[column] == [getattr(f, column) for f in analysis.findings], column
    assert findings["line"] == [f.loc.line if f.loc else None for f in analysis.findings]
    assert findings["pes"] == [list(f.pes) or [f.pe] for f in analysis.findings]
    pes = tables["pes"]
    for column in ("pe", "start", "end", "achieved", "bound", "efficiency", "complete"):
        assert pes[column] == [getattr(b, column) for b in analysis.bounds], column
    assert sum(pes["stall"]) == sum(r.stall for r in analysis.futures if r.resolved is not None)
    assert sum(pes["futures"]) == len(analysis.futures)
    locations = tables["locations"]
    assert list(zip(locations["file"], locations["line"], locations["function"], strict=True)) == [
        (loc.file, loc.line, loc.function) for loc in replay.index.locs
    ]


def test_existing_tables_are_kept_unless_forced(blocking, capsys):
    _, _, root = blocking
    out = root / "again"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "futures.parquet").write_bytes(b"someone else's")
    trace = str(root / "b.kbt")
    assert main(["export", trace, "--parquet", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "futures.parquet exists" in err[0] and "--force" in err[0]
    assert sorted(p.name for p in out.iterdir()) == ["futures.parquet", "notes.txt"]
    assert main(["export", trace, "--parquet", str(out), "--force"]) == 0
    assert "wrote 5 Parquet tables" in capsys.readouterr().out
    assert pq.read_table(out / "futures.parquet").num_rows > 0
    assert (out / "notes.txt").read_text() == "mine"
    assert not [p for p in out.iterdir() if ".partial" in p.name]


def test_without_pyarrow_the_export_says_what_to_install(blocking, capsys, monkeypatch):
    _, _, root = blocking
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    out = root / "missing"
    assert main(["export", str(root / "b.kbt"), "--parquet", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and INSTALL_HINT in err[0]
    assert not out.exists()


def test_the_docs_longest_stalls_by_line_query_is_the_reports_stall_by_line(blocking):
    """docs/sql.md's query, run with pyarrow alone, gives what report counts per line."""
    replay, _, root = blocking
    futures = pq.read_table(root / "tables" / "futures.parquet")
    stalled = futures.filter(pc.greater(futures["stall"], 0))
    by_line = (
        stalled.group_by(["wait_file", "wait_line"])
        .aggregate([("stall", "count"), ("stall", "sum"), ("stall", "max")])
        .sort_by([("stall_sum", "descending")])
        .slice(0, 10)
        .to_pylist()
    )
    report: Counter = Counter()
    for row in stall_by_line(replay.index):
        if row.stall_cycles:
            report[(row.loc.file, row.loc.line)] += row.stall_cycles
    assert by_line
    assert {(r["wait_file"], r["wait_line"]): r["stall_sum"] for r in by_line} == dict(
        report.most_common(10)
    )


def test_a_file_for_dir_or_both_outputs_are_one_line(blocking, capsys):
    _, _, root = blocking
    trace = str(root / "b.kbt")
    (root / "plain").write_text("a file")
    assert main(["export", trace, "--parquet", str(root / "plain")]) == 2
    assert main(["export", trace, "--parquet", str(root / "t2"), "-o", "x.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert "plain: exists and is not a directory" in err[0]
    assert "not both" in err[1]
    assert (root / "plain").read_text() == "a file"
    assert not (root / "t2").exists()
