"""Traces of formats 1.3 (copies of the bundled traces as they were before 1.5) still open,
replay to their end and report, with the figures they were recorded with."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.trace.reader import read_trace
from kbdebug.cli import main
from kbdebug.replay import Replay

OLD = Path(__file__).resolve().parent / "data" / "old_traces"

# name: (format version, events, end cycle, report lines), as `kbdebug report` printed them
# when these files were the bundled traces (recorded with KBDEBUG_DIGESTS=0).
FIGURES = {
    "decode_prefetch": (
        (1, 3),
        3472,
        23_784,
        ["end cycle: 23,784  events: 3,472", "stall cycles: 5,255  dma_read_count: 65"],
    ),
    "flawed_prefetch": (
        (1, 3),
        3472,
        72_960,
        ["end cycle: 72,960  events: 3,472", "stall cycles: 54,431  dma_read_count: 65"],
    ),
    "gemm_composite": (
        (1, 3),
        1236,
        35_478,
        ["end cycle: 35,478  events: 1,236", "stall cycles: 0  dma_read_count: 34"],
    ),
    "gemm_pipeline": (
        (1, 3),
        1398,
        36_738,
        ["end cycle: 36,738  events: 1,398", "stall cycles: 2,352  dma_read_count: 34"],
    ),
    "prefill": (
        (1, 3),
        7040,
        20_273,
        [
            "end cycle: 20,273  events: 7,040",
            "stall cycles: 4,980 (summed over 4 PEs)  dma_read_count: 132 (summed over 4 PEs)",
        ],
    ),
    "ring_attention": (
        (1, 3),
        2048,
        11_950,
        [
            "end cycle: 11,950  events: 2,048",
            "stall cycles: 9,080 (summed over 4 PEs)  dma_read_count: 12 (summed over 4 PEs)",
        ],
    ),
}


def test_every_old_trace_has_its_figures():
    assert sorted(p.stem for p in OLD.glob("*.kbt")) == sorted(FIGURES)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_an_old_trace_opens_replays_to_its_end_and_reports(name, capsys):
    version, events, end_cycle, lines = FIGURES[name]
    path = OLD / f"{name}.kbt"
    trace = read_trace(path)
    assert trace.version == version
    assert "tensors" not in trace.header and "provenance" not in trace.header
    assert trace.footer["status"] == "ok" and len(trace.events) == events

    replay = Replay.open(path, cache=False)
    assert replay.n_events == events
    replay.seek(events)
    assert replay.time == end_cycle == replay.end_time

    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "status: ok"
    for line in lines:
        assert line in out, line
