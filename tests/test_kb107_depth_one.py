"""KB107 on a pipeline one tile deep: decode_prefetch at depth 1, where the fix is the depth.

Each load's own deeper issue loses time alone (the other stream's load still
arrives late) and only the two streams together pay; a blocking load that never
stalls avoidably must not hide them. The finding's depth is checked by running it.
"""

from __future__ import annotations

import inspect
import re

import pytest

from emulator import HardwareConfig
from emulator.kernels import attention
from emulator.kernels.pipeline import TilePipeline
from emulator.scenarios import SCENARIOS
from kbdebug.analysis import pe_bounds
from kbdebug.analysis.findings import find_all
from kbdebug.replay import Replay


def line_of(function, text: str) -> int:
    """The line of ``function``'s source holding ``text`` (once)."""
    lines, first = inspect.getsourcelines(function)
    hits = [first + i for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def recorded(path, n_tiles: int, latency: int, depth: int) -> Replay:
    scenario = SCENARIOS["decode_prefetch"](
        n_tiles=n_tiles, depth=depth, config=HardwareConfig(hbm_latency=latency)
    )
    scenario.run(trace=path)
    return Replay.open(path)


@pytest.mark.parametrize(("latency", "n_tiles"), [(400, 32), (500, 64), (1000, 128)])
def test_depth_one_pipeline_gets_kb107_whose_depth_gains_what_it_says(tmp_path, latency, n_tiles):
    shallow = recorded(tmp_path / "d1.kbt", n_tiles, latency, depth=1)
    findings = find_all(shallow)
    assert [f.rule for f in findings] == ["KB107"], [(f.rule, f.message) for f in findings]
    (finding,) = findings
    # Named at the issue (TilePipeline's load_async), called from the kernel's K tile.
    assert finding.loc.file.endswith("emulator/kernels/pipeline.py")
    assert finding.loc.line == line_of(TilePipeline._issue, "self.tl.load_async(")
    assert finding.call_loc.file.endswith("emulator/kernels/attention.py")
    assert finding.call_loc.line == line_of(attention.decode_prefetch, "kv.next(0)")
    ahead = int(re.search(r"issue each load (\d+) tiles? ahead", finding.suggestion).group(1))
    assert ahead > 1

    (before,) = pe_bounds(shallow)
    deeper = recorded(tmp_path / f"d{ahead}.kbt", n_tiles, latency, depth=ahead)
    (after,) = pe_bounds(deeper)
    gain = before.achieved - after.achieved
    assert gain > 0
    assert abs(finding.saving - gain) <= 0.2 * gain, (finding.saving, gain)
    assert find_all(deeper) == []
    assert after.achieved >= before.bound
