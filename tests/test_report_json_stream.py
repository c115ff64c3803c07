"""report --json writes its futures as it encodes them: the same bytes as json.dumps."""

from __future__ import annotations

import io
import json

from emulator.scenarios import SCENARIOS
from kbdebug.analysis import Analysis
from kbdebug.cli import main
from kbdebug.export.report_json import to_json, write_json
from kbdebug.replay import Replay


def test_streamed_json_is_byte_identical_to_the_whole_document(tmp_path, capsys):
    path = tmp_path / "ring.kbt"
    SCENARIOS["ring_attention"]().run(trace=path)
    analysis = Analysis(Replay.open(path))
    args = (str(path), analysis.summary, analysis.futures, analysis.findings, analysis.bounds)
    more = {"chains": analysis.worst_wait_chains, "hazards": analysis.hazards}
    whole = json.dumps(to_json(*args, **more), indent=2) + "\n"
    assert json.loads(whole)["futures"], "the scenario has futures to stream"
    out = io.StringIO()
    write_json(out, *args, **more)
    assert out.getvalue() == whole
    assert main(["report", "--json", str(path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["futures"] == json.loads(whole)["futures"]
