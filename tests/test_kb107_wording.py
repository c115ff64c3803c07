"""KB107's message never calls an iteration's work shorter than a transfer it covers."""

from __future__ import annotations

import re

from kernels_restarting_stream import launch

from kbdebug.analysis.findings import Finding, find_all
from kbdebug.replay import Replay


def _findings(path) -> list[Finding]:
    return find_all(Replay.open(path))


def test_work_that_covers_the_transfer_is_not_called_shorter(tmp_path):
    path = tmp_path / "restart.kbt"
    launch().run(trace=path)
    found = [f for f in _findings(path) if f.rule == "KB107"]
    assert found, "the restarting stream stalls at each output tile's first waits"
    for finding in found:
        work, transfer = map(
            lambda s: int(s.replace(",", "")),
            re.search(
                r"work \(([\d,]+) cycles\) \w+ (?:than )?its transfer \+ latency \(([\d,]+)",
                finding.message,
            ).groups(),
        )
        if work >= transfer:
            assert "is shorter than" not in finding.message
            assert "covers its transfer" in finding.message
        else:
            assert "is shorter than" in finding.message
