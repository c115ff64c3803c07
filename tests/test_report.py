"""`kbdebug report`: the text and JSON agree with the emulator's RunResult; --fail-on; bad files."""

from __future__ import annotations

import json

import kernels_for_findings as kf
import pytest

from emulator.scenarios import SCENARIOS
from kbdebug.analysis.findings import RULES
from kbdebug.cli import main


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """(RunResult, path) of decode_blocking and decode_prefetch, default parameters."""
    root = tmp_path_factory.mktemp("report")
    out = {}
    for name in ("decode_blocking", "decode_prefetch", "prefill"):
        path = root / f"{name}.kbt"
        out[name] = (SCENARIOS[name]().run(trace=path), path)
    return out


def report(capsys, *args) -> tuple[int, str, str]:
    status = main(["report", *map(str, args)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def report_json(capsys, *args) -> dict:
    status, out, err = report(capsys, *args, "--json")
    assert status == 0, err
    return json.loads(out)


# --- text -----------------------------------------------------------------------------


def test_text_report_starts_with_status_and_has_the_run_numbers(traces, capsys):
    result, path = traces["decode_blocking"]
    status, out, _ = report(capsys, path)
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "status: ok"
    assert f"end cycle: {result.end_time:,}" in out
    stalls, reads = result.metrics["stall_cycles"], result.metrics["dma_read_count"]
    assert f"stall cycles: {stalls:,}  dma_read_count: {reads}" in out
    busy = result.busy_cycles["pe0.dma_read0"]
    assert any(ln.split()[:2] == ["pe0.dma_read0", f"{busy:,}"] for ln in lines)
    pe0 = next(ln for ln in lines if ln.strip().startswith("PE0  achieved"))
    assert f"achieved {result.pe_end_times[0]:,}" in pe0 and "bound" in pe0
    assert "efficiency" in pe0 and "findings save up to ~" in pe0
    k_line = kf.line_containing(SCENARIOS["decode_blocking"]().kernel, "k = tl.load(")
    assert f"[KB101:emulator/kernels/attention.py:{k_line}]" in out
    assert any(ln.strip().startswith(f"emulator/kernels/attention.py:{k_line}") for ln in lines)


def test_text_report_limits_the_futures_table_and_says_so(traces, capsys):
    result, path = traces["decode_blocking"]
    _, out, _ = report(capsys, path)
    # A future per transfer: each tile's load and the output's store.
    futures = result.metrics["dma_read_count"] + result.metrics["dma_write_count"]
    assert futures > 20
    assert f"futures (first 20 of {futures} by id; --json lists all):" in out
    assert "worst stalls (10 futures):" in out


def test_text_report_of_a_clean_pipeline_says_no_findings(traces, capsys):
    _, path = traces["decode_prefetch"]
    _, out, _ = report(capsys, path)
    assert out.rstrip().endswith("findings: none")


# --- JSON -----------------------------------------------------------------------------


def test_json_report_matches_the_run_result(traces, capsys):
    result, path = traces["decode_blocking"]
    doc = report_json(capsys, path)
    assert doc["schema"] == "kbdebug.report/4"
    assert doc["status"] == "ok" and doc["error"] is None
    assert doc["kernel"] == "decode_blocking" and doc["grid"] == [1]
    assert doc["end_time"] == result.end_time
    assert doc["stall_cycles"] == result.metrics["stall_cycles"]
    assert doc["dma_read_count"] == result.metrics["dma_read_count"]
    for name in ("dma_read_count", "dma_write_count", "gemm_count", "math_count"):
        assert doc["counts"][name] == result.metrics[name]
    assert {ch["name"]: ch["busy_cycles"] for ch in doc["channels"]} == result.busy_cycles
    for ch in doc["channels"]:
        assert ch["share"] == pytest.approx(ch["busy_cycles"] / result.end_time)


def test_json_report_lists_every_future_and_their_stalls_add_up(traces, capsys):
    result, path = traces["decode_blocking"]
    doc = report_json(capsys, path)
    futures = doc["futures"]
    assert [f["id"] for f in futures] == list(range(len(futures)))
    loads = [f for f in futures if f["op"] == "load"]
    assert len(loads) == result.metrics["dma_read_count"]
    assert sum(f["stall"] for f in futures) == result.metrics["stall_cycles"]
    first = loads[1]
    assert first["issued"] <= first["granted"] <= first["done"] <= first["resolved"]
    assert first["loc"]["file"] == "emulator/kernels/attention.py"
    by_line = sum(s["stall_cycles"] for s in doc["stall_by_line"])
    assert by_line == result.metrics["stall_cycles"]


def test_json_report_gives_efficiency_per_pe(traces, capsys):
    result, path = traces["prefill"]
    doc = report_json(capsys, path)
    assert [e["pe"] for e in doc["efficiency"]] == sorted(result.pe_end_times)
    for e in doc["efficiency"]:
        assert e["end"] == result.pe_end_times[e["pe"]]
        assert 0 < e["bound"] <= e["achieved"]
        assert e["efficiency"] == pytest.approx(e["bound"] / e["achieved"])
        assert e["savings"] >= 0


def test_json_findings_carry_ids_messages_and_events(traces, capsys):
    _, path = traces["decode_blocking"]
    findings = report_json(capsys, path)["findings"]
    assert "KB101" in {f["rule"] for f in findings}
    for f in findings:
        assert f["id"].startswith(f["rule"] + ":" + f["loc"]["file"] + "::")
        assert f["line_id"] == f"{f['rule']}:{f['loc']['file']}:{f['loc']['line']}"
        assert f["message"] and f["suggestion"] and f["events"]
        assert f["start"] <= f["end"]
        assert f["saving"] >= 0 and 0 <= f["share"] and "call_loc" in f
    savings = [f["saving"] for f in findings]
    assert savings == sorted(savings, reverse=True)


# --- --fail-on ------------------------------------------------------------------------


def test_fail_on_any_exits_1_when_there_is_a_finding(traces, capsys):
    assert report(capsys, traces["decode_blocking"][1], "--fail-on", "any")[0] == 1


def test_fail_on_any_exits_0_without_findings(traces, capsys):
    assert report(capsys, traces["decode_prefetch"][1], "--fail-on", "any")[0] == 0


def test_fail_on_a_rule_code_an_id_or_a_line_id(traces, capsys):
    path = traces["decode_blocking"][1]
    k_line = kf.line_containing(SCENARIOS["decode_blocking"]().kernel, "k = tl.load(")
    findings = report_json(capsys, path, "--min-saving", "0")["findings"]
    present = {f["rule"] for f in findings}
    absent = sorted(set(RULES) - present)
    assert "KB101" in present and absent
    assert report(capsys, path, "--fail-on", "KB101", "--min-saving", "0")[0] == 1
    assert report(capsys, path, "--fail-on", absent[0], "--min-saving", "0")[0] == 0
    line = f"KB101:emulator/kernels/attention.py:{k_line}"
    assert report(capsys, path, "--fail-on", line, "--min-saving", "0")[0] == 1
    stable = next(f["id"] for f in findings if f["line_id"] == line)
    assert report(capsys, path, "--fail-on", stable, "--min-saving", "0")[0] == 1
    assert report(capsys, path, "--fail-on", "KB101:emulator/kernels/attention.py:1")[0] == 0
    both = ["--fail-on", absent[0], "--fail-on", "KB101", "--min-saving", "0"]
    assert report(capsys, path, *both)[0] == 1


def test_fail_on_an_unknown_rule_is_a_usage_error(traces, capsys):
    status, out, err = report(capsys, traces["decode_prefetch"][1], "--fail-on", "KB9")
    assert status == 2 and not out
    assert len(err.splitlines()) == 1 and "KB9" in err and "Traceback" not in err


# --- incomplete runs and bad files ----------------------------------------------------


def test_truncated_trace_is_reported_as_truncated(traces, capsys, tmp_path):
    whole = traces["decode_blocking"][1].read_bytes()
    cut = tmp_path / "cut.kbt"
    cut.write_bytes(whole[: len(whole) // 2])
    status, out, _ = report(capsys, cut)
    assert status == 0
    assert out.splitlines()[0].startswith("status: the run did not complete: the trace was cut")
    assert report_json(capsys, cut)["status"] == "truncated"


def test_failed_run_is_reported_with_its_error(capsys, tmp_path):
    path = tmp_path / "failed.kbt"
    with pytest.raises(Exception, match="boom"):
        kf.run(kf.raises_midway, path)
    status, out, _ = report(capsys, path)
    assert status == 0
    assert out.splitlines()[0].startswith("status: the run did not complete: kernel error on PE 0")
    assert "boom" in out.splitlines()[0]
    doc = report_json(capsys, path)
    assert doc["status"] == "error" and "boom" in doc["error"]
    assert doc["error_loc"]["line"] == kf.line_of(kf.raises_midway, "raise")


@pytest.mark.parametrize("content", ["missing", "text", "corrupted"])
def test_bad_file_is_one_line_naming_it_and_exit_2(traces, capsys, tmp_path, content):
    path = tmp_path / f"{content}.kbt"
    if content == "text":
        path.write_text("this is not a trace\n")
    elif content == "corrupted":
        data = bytearray(traces["decode_blocking"][1].read_bytes())
        data[len(data) // 3 : len(data) // 3 + 16] = b"\xc1" * 16  # 0xc1: never valid msgpack
        path.write_bytes(bytes(data))
    status, out, err = report(capsys, path)
    assert status == 2 and not out
    assert len(err.splitlines()) == 1
    assert str(path) in err
    assert "Traceback" not in err
