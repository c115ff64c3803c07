"""Pipelined scenarios' `depth` parameter: it reaches the kernel; its default changes nothing."""

from __future__ import annotations

import pytest

from emulator.scenarios import SCENARIOS, parameters
from kbdebug.cli import main

PIPELINED = ["decode_prefetch", "prefill", "gemm_pipeline"]
SMALL = {
    "decode_prefetch": {"n_tiles": 6},
    "prefill": {"n_tiles": 6, "pes": 2},
    "gemm_pipeline": {"m": 384},
}


@pytest.mark.parametrize("name", PIPELINED)
def test_depth_is_a_parameter_whose_default_is_the_depth_2_launch(name):
    assert parameters(name)["depth"] == 2
    default = SCENARIOS[name](**SMALL[name])
    explicit = SCENARIOS[name](**SMALL[name], depth=2)
    assert explicit.args == default.args
    assert explicit.run().end_time == default.run().end_time


@pytest.mark.parametrize("name", PIPELINED)
def test_depth_reaches_the_pipeline_scratch_and_timing(name):
    results = {}
    for depth in (1, 2, 3):
        scenario = SCENARIOS[name](**SMALL[name], depth=depth)
        results[depth] = scenario.run()
        scenario.check(scenario.memory)
    peak = {d: max(r.scratch_peak.values()) for d, r in results.items()}
    # TilePipeline holds depth + 1 tiles per stream: each extra tile of depth costs scratch.
    assert peak[1] < peak[2] < peak[3]
    # One tile in flight cannot hide the next load behind the compute.
    assert results[1].end_time > results[2].end_time


@pytest.mark.parametrize("value", ["0", "-1", "1.5"])
def test_a_bad_depth_is_one_line_naming_depth(value, tmp_path, capsys):
    out = tmp_path / "x.kbt"
    assert main(["run", "decode_prefetch", "--set", f"depth={value}", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "depth" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
