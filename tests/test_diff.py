"""kbdebug diff: the comparison model on hand-made numbers, then the command on real traces
(identical runs, blocking against depth-2 decode, the reverse, bad files)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from trace_synth import KERNEL_SOURCE, decode_like_events, make_header

from emulator.scenarios import decode_blocking, decode_prefetch
from emulator.trace.schema import SourceLoc
from emulator.trace.writer import TraceWriter
from kbdebug.analysis import Analysis
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.model import PEBound
from kbdebug.analysis.run_diff import HIGHER, LOWER, Change, compare
from kbdebug.analysis.summary import ChannelBusy, LineStall, Summary, summarize
from kbdebug.cli import main
from kbdebug.replay import Replay

KERNEL = "emulator/kernels/attention.py"


def summary(end: int = 1000, stall: int = 400, **changes) -> Summary:
    base = Summary(
        kernel="k",
        grid=(1,),
        n_pes=1,
        status="ok",
        error=None,
        error_loc=None,
        n_events=100,
        end_time=end,
        channels=[
            ChannelBusy(0, "pe0.dma_read0", "dma_read", 0, 500, 500 / end),
            ChannelBusy(1, "pe0.ipcq.left", "ipcq", 0, 0, 0.0),
        ],
        stall_cycles=stall,
        stall_by_line=[LineStall(SourceLoc(KERNEL, 46, "decode"), 4, stall)],
        counts={"dma_read_count": 8},
    )
    return replace(base, **changes)


def finding(rule: str, line: int) -> Finding:
    return Finding(
        id=f"{rule}:{KERNEL}:{line}",
        rule=rule,
        title="blocking-load",
        pe=0,
        start=0,
        end=10,
        events=(0,),
        loc=SourceLoc(KERNEL, line, "decode"),
        message="m",
        suggestion="s",
    )


# --- the model --------------------------------------------------------------------------


def test_change_gives_delta_percent_and_verdict():
    faster = Change("end cycle", 1000, 750, "cycles", LOWER)
    assert (faster.delta, faster.percent, faster.verdict) == (-250, -25.0, "better")
    worse = Change("efficiency", 0.5, 0.25, "ratio", HIGHER)
    assert (worse.delta, worse.percent, worse.verdict) == (-0.25, -50.0, "worse")
    assert Change("x", 0, 10, "cycles", LOWER).percent is None
    assert Change("x", 5, 5, "cycles", LOWER).verdict == "same"
    assert Change("x", 5, 6, "count").verdict == ""
    assert Change("x", None, 6, "count").delta is None


def test_identical_runs_have_no_change_and_no_regression():
    a = summary()
    diff = compare(a, a, [finding("KB101", 46)], [finding("KB101", 46)])
    assert all(c.delta == 0 for c in diff.headline + diff.busy)
    assert all(r.stall.delta == 0 for r in diff.stall_by_line)
    assert (diff.added, diff.removed, diff.kept) == ([], [], [f"KB101:{KERNEL}:46"])
    assert not diff.regression


def test_faster_run_that_drops_a_finding_is_no_regression():
    diff = compare(summary(), summary(end=600, stall=0), [finding("KB101", 46)], [])
    end = diff.headline[0]
    assert (end.name, end.a, end.b, end.delta) == ("end cycle", 1000, 600, -400)
    assert [f.id for f in diff.removed] == [f"KB101:{KERNEL}:46"]
    assert not diff.regression


def test_slower_run_or_new_finding_is_a_regression():
    slower = compare(summary(), summary(end=1100), [], [])
    assert slower.regressions == ["B ends 100 cycles later than A"]
    noisier = compare(summary(), summary(), [], [finding("KB102", 50)])
    assert noisier.regressions == ["B adds 1 finding"]
    assert [f.id for f in noisier.added] == [f"KB102:{KERNEL}:50"]


def test_a_faster_run_that_uncovers_a_smaller_finding_is_no_regression():
    """Fixing the main stall often makes a smaller one visible: B is faster, its new
    finding is listed as added, and --fail-on-regression does not fail it."""
    faster = compare(summary(), summary(end=700), [finding("KB101", 46)], [finding("KB102", 50)])
    assert [f.id for f in faster.added] == [f"KB102:{KERNEL}:50"]
    assert not faster.regression
    as_slow = compare(summary(), summary(end=1000), [finding("KB101", 46)], [finding("KB102", 50)])
    assert as_slow.regressions == ["B adds 1 finding"]


def test_findings_of_a_kernel_file_renamed_in_b_are_the_same_findings():
    """Before and after kept as two files (qk_buggy.py, qk_fixed.py): the LineMap pairs
    them, and a finding at the same call is kept, not removed and added."""

    class Renamed:
        renamed = {"qk_buggy.py": "qk_fixed.py"}

        def b_line(self, file, line):
            return (self.renamed.get(file, file), line)

        def a_line(self, file, line):
            return ({b: a for a, b in self.renamed.items()}.get(file, file), line)

    def at(file: str, rule: str = "KB101") -> Finding:
        ident = f"{rule}:{file}::decode::tl.load(q)#0@{file}::main::decode()#0"
        return replace(finding(rule, 46), id=ident)

    diff = compare(summary(), summary(), [at("qk_buggy.py")], [at("qk_fixed.py")], lines=Renamed())
    assert (diff.added, diff.removed) == ([], [])
    assert diff.kept == [at("qk_fixed.py").id]
    other = compare(summary(), summary(), [at("qk_buggy.py")], [at("qk_fixed.py", "KB102")])
    assert len(other.added) == len(other.removed) == 1


def test_stall_lines_match_by_file_and_line_not_function():
    b = summary(stall_by_line=[
        LineStall(SourceLoc(KERNEL, 46, "renamed"), 4, 100),
        LineStall(SourceLoc(KERNEL, 60, "decode"), 2, 50),
    ])  # fmt: skip
    rows = {(r.file, r.line): r for r in compare(summary(), b, [], []).stall_by_line}
    assert set(rows) == {(KERNEL, 46), (KERNEL, 60)}
    assert (rows[(KERNEL, 46)].stall.a, rows[(KERNEL, 46)].stall.b) == (400, 100)
    assert (rows[(KERNEL, 60)].stall.a, rows[(KERNEL, 60)].a_waits) == (0, 0)


def test_busy_share_lists_channels_busy_in_either_run_only():
    diff = compare(summary(), summary(end=500), [], [])
    assert [c.name for c in diff.busy] == ["pe0.dma_read0"]
    assert (diff.busy[0].a, diff.busy[0].b) == (0.5, 1.0)


def bound(pe: int, achieved: int, bound: int) -> PEBound:
    return PEBound(
        pe=pe, start=0, end=achieved, achieved=achieved, bound=bound, efficiency=bound / achieved
    )


def test_efficiency_is_the_models_per_pe_and_none_without_it():
    """One efficiency: the dataflow model's bound over achieved, per PE; with no bounds
    (no model) the diff claims none rather than a second, coarser model's."""
    a, b = [bound(0, 1000, 500), bound(1, 800, 400)], [bound(0, 600, 500), bound(1, 800, 400)]
    diff = compare(summary(), summary(end=600), [], [], a_bounds=a, b_bounds=b)
    rows = {c.name: (c.a, c.b) for c in diff.headline}
    assert rows["efficiency PE0"] == (0.5, 500 / 600)
    assert rows["efficiency PE1"] == (0.5, 0.5)
    names = [c.name for c in compare(summary(), summary(), [], []).headline]
    assert names == ["end cycle", "stall cycles", "dma_read_count"]


# --- the command on real traces ----------------------------------------------------------


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("decode")
    paths = {"blocking": root / "blocking.kbt", "prefetch": root / "prefetch.kbt"}
    decode_blocking().run(trace=paths["blocking"])
    decode_prefetch().run(trace=paths["prefetch"])
    return {name: str(path) for name, path in paths.items()}


def diff_json(capsys, *args: str) -> tuple[int, dict]:
    status = main(["diff", *args, "--json"])
    return status, json.loads(capsys.readouterr().out)


def test_diff_of_a_trace_with_itself_shows_no_change_and_passes(traces, capsys):
    path = traces["blocking"]
    status, doc = diff_json(capsys, path, path, "--fail-on-regression")
    assert status == 0
    assert all(c["delta"] == 0 for c in doc["headline"] + doc["busy"] + doc["stall_by_line"])
    assert doc["findings"]["added"] == doc["findings"]["removed"] == []
    assert not doc["regression"]
    assert main(["diff", path, path, "--fail-on-regression"]) == 0
    text = capsys.readouterr().out
    assert "B takes as long as A" in text


def test_depth_2_prefetch_against_blocking_shows_the_speed_up(traces, capsys):
    status, doc = diff_json(capsys, traces["blocking"], traces["prefetch"], "--fail-on-regression")
    assert status == 0 and not doc["regression"]
    end = next(c for c in doc["headline"] if c["name"] == "end cycle")
    blocking = summarize(Replay.open(traces["blocking"]))
    prefetch = summarize(Replay.open(traces["prefetch"]))
    assert (end["a"], end["b"]) == (blocking.end_time, prefetch.end_time)
    assert end["delta"] < 0 and end["verdict"] == "better"
    assert end["percent"] == pytest.approx(100 * end["delta"] / end["a"])
    stall = next(c for c in doc["headline"] if c["name"] == "stall cycles")
    assert stall["b"] < stall["a"]
    efficiency = next(c for c in doc["headline"] if c["name"] == "efficiency PE0")
    assert efficiency["verdict"] == "better"
    # The blocking tile loads' lines stall in A and not at all in B; the two kernels of
    # one file align by likeness, so Q's blocking load pairs with B's (stalling as long).
    lines = {(r["file"], r["line"]): r for r in doc["stall_by_line"]}
    blocking_lines = [r for r in blocking.stall_by_line if r.stall_cycles]
    assert len(blocking_lines) == 3
    q_load, *tile_loads = sorted(blocking_lines, key=lambda r: r.loc.line)
    for row in tile_loads:
        assert lines[(row.loc.file, row.loc.line)]["b"] == 0
    q_row = lines[(q_load.loc.file, q_load.loc.line)]
    assert q_row["b_line"] != q_row["line"] and q_row["b"] == q_row["a"] > 0


def test_depth_2_prefetch_removes_the_blocking_load_findings(traces, capsys):
    ra, rb = Replay.open(traces["blocking"]), Replay.open(traces["prefetch"])
    a = Analysis(ra).findings
    b = Analysis(rb).findings
    _, doc = diff_json(capsys, traces["blocking"], traces["prefetch"])
    removed = {f["id"] for f in doc["findings"]["removed"]}
    assert removed == {f.id for f in a} - {f.id for f in b}
    assert doc["findings"]["added"] == []
    # The rules flag the blocking loads (KB101) in decode_blocking and nothing in
    # decode_prefetch; when they do, the diff must show those findings removed.
    blocking_loads = {f.id for f in a if f.rule == "KB101"}
    assert blocking_loads <= removed
    if a:
        assert removed


def test_text_diff_shows_both_runs_the_change_and_the_verdict(traces, capsys):
    assert main(["diff", traces["blocking"], traces["prefetch"]]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"A: {traces['blocking']}")
    assert "end cycle" in out and "busy share" in out and "stall by source line" in out
    assert "pe0.dma_read0" in out and "(-" in out
    assert out.rstrip().splitlines()[-1].startswith("B is faster")


def test_blocking_after_prefetch_is_a_regression_exit_1(traces, capsys):
    status = main(["diff", traces["prefetch"], traces["blocking"], "--fail-on-regression"])
    assert status == 1
    assert "REGRESSION: B ends" in capsys.readouterr().out
    assert main(["diff", traces["prefetch"], traces["blocking"]]) == 0


def test_json_diff_follows_its_schema(traces, capsys):
    _, doc = diff_json(capsys, traces["blocking"], traces["prefetch"])
    assert doc["schema"] == "kbdebug.diff/2"
    assert doc["a"]["trace"] == traces["blocking"] and doc["b"]["kernel"] == "decode_prefetch"
    keys = {"name", "a", "b", "delta", "percent", "unit", "better", "verdict"}
    assert all(set(c) == keys for c in doc["headline"] + doc["busy"])


@pytest.mark.parametrize("which", ["a", "b"])
def test_bad_file_is_exit_2_with_one_line_and_no_traceback(traces, tmp_path, capsys, which):
    bad = tmp_path / "bad.kbt"
    bad.write_bytes(b"\x93not a trace")
    args = [str(bad), traces["prefetch"]] if which == "a" else [traces["prefetch"], str(bad)]
    assert main(["diff", *args, "--fail-on-regression"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("kbdebug diff: ")
    assert str(bad) in captured.err and "Traceback" not in captured.err


@pytest.mark.parametrize(("content", "message"), [(None, "no such file"), (b"", "no header")])
def test_missing_or_empty_file_is_exit_2(tmp_path, capsys, content, message):
    a = tmp_path / "a.kbt"
    if content is not None:
        a.write_bytes(content)
    assert main(["diff", str(a), str(a)]) == 2
    assert message in capsys.readouterr().err


# --- terminal escapes in the traces' strings ---------------------------------------------

NASTY = "\x1b[31m\x07\x9b2J"


def hostile_trace(path) -> str:
    """A trace whose channel names, kernel name, file and function names hold escapes."""

    def nasty(value):
        if isinstance(value, SourceLoc):
            caller = nasty(value.caller) if value.caller is not None else None
            return SourceLoc(f"k{NASTY}.py", value.line, f"decode{NASTY}", caller)
        return f"decode{NASTY}" if value == "decode_attention" else value

    header = make_header()
    for channel in header["channels"]:
        channel["name"] += NASTY
    header["launch"]["kernel"] = f"decode{NASTY}"
    writer = TraceWriter(path)
    writer.begin(header)
    writer.add_source(f"k{NASTY}.py", KERNEL_SOURCE)
    events = decode_like_events(600)
    for event in events:
        writer.emit(*(nasty(v) for v in event))
    writer.end({"status": "ok", "end_time": events[-1][1], "error": None, "error_loc": None})
    return str(path)


def test_no_escape_of_a_trace_reaches_the_terminal(traces, tmp_path, capsys):
    hostile = hostile_trace(tmp_path / f"b{NASTY}.kbt")
    for args in ([traces["blocking"], hostile], [hostile, traces["blocking"]], [hostile, hostile]):
        main(["diff", *args, "--fail-on-regression"])
        captured = capsys.readouterr()
        for raw in ("\x1b", "\x07", "\x9b"):
            assert raw not in captured.out and raw not in captured.err, (args, raw)
        # Shown, escaped: the channel names, the kernel, the file and function names.
        assert "pe0.dma_read0\\x1b[31m\\x07\\x9b2J" in captured.out
        assert "decode\\x1b[31m\\x07\\x9b2J" in captured.out
        assert "k\\x1b[31m\\x07\\x9b2J.py" in captured.out
    main(["diff", traces["blocking"], hostile, "--json", "--fail-on-regression"])
    captured = capsys.readouterr()
    assert not any(raw in captured.out + captured.err for raw in ("\x1b", "\x07", "\x9b"))
    assert "pe0.dma_read0" + NASTY in {c["name"] for c in json.loads(captured.out)["busy"]}


def test_the_verdict_counts_findings_gone_and_new_apart():
    """'1 removed, 2 added' was summed up as '1 finding fewer'."""
    from kbdebug.commands.diff import render

    diff = compare(
        summary(),
        summary(end=700),
        [finding("KB101", 46)],
        [finding("KB102", 50), finding("KB104", 52)],
    )
    last = render(diff, "a.kbt", "b.kbt").rstrip().splitlines()[-1]
    assert last == (
        "B is faster: 300 fewer cycles (-30.0%), 1 finding gone, 2 new findings (listed above)"
    )
