"""Report and Chrome export name loads, stores and futures by tensor slice in a 1.5 trace."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from kbdebug.analysis.summary import futures_table
from kbdebug.cli import main
from kbdebug.export.chrome import export_chrome
from kbdebug.replay import Replay

TRACES = Path(__file__).resolve().parents[1] / "traces"


@pytest.fixture(scope="module")
def decode(tmp_path_factory):
    out = tmp_path_factory.mktemp("named") / "decode.kbt"
    assert main(["run", "decode_prefetch", "--set", "n_tiles=3", "-q", "-o", str(out)]) == 0
    return out


def test_report_names_each_future_by_its_slice(decode, capsys):
    capsys.readouterr()
    main(["report", str(decode)])
    text = capsys.readouterr().out
    assert " tensor " in text and "K[64:128, :]" in text and "O[:, :]" in text
    main(["report", str(decode), "--json"])
    futures = json.loads(capsys.readouterr().out)["futures"]
    assert [f["where"] for f in futures[:3]] == ["Q[:, :]", "K[0:64, :]", "V[0:64, :]"]


def test_an_old_trace_reports_addresses_as_before():
    old = TRACES.parent / "tests" / "data" / "old_traces" / "decode_prefetch.kbt"  # format 1.3
    rows = futures_table(Replay.open(old))
    assert all(row.where == "" for row in rows)


def test_chrome_export_gives_transfers_and_futures_their_slice(decode):
    replay = Replay.open(decode)
    out = io.StringIO()
    export_chrome(replay, out, findings=[])
    events = json.loads(out.getvalue())["traceEvents"]
    futures = [e for e in events if e.get("cat") == "future" and e["ph"] == "b"]
    assert futures[1]["args"]["tensor"] == "K[0:64, :]"
    transfers = [e for e in events if e["ph"] == "X" and e.get("cat") == "dma_read"]
    assert {e["args"]["tensor"] for e in transfers} >= {"K[0:64, :]", "V[128:192, :]"}
