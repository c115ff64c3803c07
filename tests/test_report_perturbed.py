"""A perturbed trace says so: report's run lines and --json, the note beside its figures, and
the app's header; a nominal trace says nothing of it, and a header's odd values read as unknown."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from app_settle import settled

from kbdebug.analysis.perturbation import FIGURES_NOTE, Perturbation, perturbation_of
from kbdebug.cli import main
from kbdebug.replay import Replay
from kbdebug.ui import KbdebugApp
from kbdebug.ui.app.header import StatusHeader

FENCED = f"{Path(__file__).parent / 'kernels_store_load_race.py'}:launch_fenced"
LABEL = "seed 33, latency ±100%, grant delay ≤1.5x HBM latency, grant window 2"


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    """The fenced kernel recorded at its nominal timing and perturbed from seed 33."""
    root = tmp_path_factory.mktemp("runs")
    paths = {"nominal": root / "nominal.kbt", "perturbed": root / "perturbed.kbt"}
    assert main(["run", FENCED, "-q", "-o", str(paths["nominal"])]) == 0
    assert main(["run", FENCED, "--perturb", "33", "-q", "-o", str(paths["perturbed"])]) == 0
    return paths


def report(capsys, *args: str) -> str:
    capsys.readouterr()
    main(["report", *map(str, args)])
    return capsys.readouterr().out


def test_a_perturbed_report_names_its_seed_and_bounds_under_the_kernel(traces, capsys):
    lines = report(capsys, traces["perturbed"]).splitlines()
    kernel = next(i for i, line in enumerate(lines) if line.startswith("kernel: "))
    assert lines[kernel + 1] == f"perturbed: {LABEL}"


def test_a_perturbed_report_says_beside_its_bound_what_counts_as_lost_time(traces, capsys):
    out = report(capsys, traces["perturbed"])
    note = " ".join(line.strip() for line in out.split("  note: ")[1].split("\n\n")[0].split())
    assert note == f"{FIGURES_NOTE}."
    assert out.index("bound ") < out.index("  note: ") < out.index("stall by wait line")


def test_a_nominal_report_says_nothing_of_a_perturbation(traces, capsys):
    out = report(capsys, traces["nominal"])
    assert "perturbed" not in out and "note: " not in out, out
    doc = json.loads(report(capsys, traces["nominal"], "--json"))
    assert doc["perturbation"] is None


def test_a_perturbed_report_json_holds_the_header_fields_and_the_note(traces, capsys):
    doc = json.loads(report(capsys, traces["perturbed"], "--json"))
    assert doc["perturbation"] == {
        "perturb_seed": 33,
        "perturb_latency": 1.0,
        "perturb_grant_delay": 1.5,
        "perturb_grant_window": 2,
        "note": FIGURES_NOTE,
    }


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, None),
        ({"perturb_seed": 0}, None),
        ({"perturb_seed": "33"}, None),
        ({"perturb_seed": True}, None),
        ({"perturb_seed": 2**40}, None),
        (
            {"perturb_seed": 5, "perturb_latency": math.nan, "perturb_grant_delay": -1,
             "perturb_grant_window": "[red]2"},
            Perturbation(5, None, None, None),
        ),
        (
            {"perturb_seed": 5, "perturb_latency": 3, "perturb_grant_delay": 0.0,
             "perturb_grant_window": 1},
            Perturbation(5, 3.0, 0.0, 1),
        ),
    ],
)  # fmt: skip
def test_a_header_value_out_of_its_range_reads_as_unknown(config, expected):
    assert perturbation_of({"config": config}) == expected
    assert perturbation_of({"config": "not a map"}) is None


def test_unknown_and_long_bounds_read_as_such():
    assert Perturbation(5, None, None, None).label() == (
        "seed 5, latency ?, grant delay ?, grant window ?"
    )
    assert Perturbation(5, 3.0, 0.0, 1).label() == (
        "seed 5, latency 0..4x, grant delay ≤0x HBM latency, grant window 1"
    )


@pytest.mark.parametrize("width", [160, 60])
async def test_the_app_header_marks_a_perturbed_trace_with_its_seed(traces, width):
    for name, marked in (("perturbed", True), ("nominal", False)):
        app = KbdebugApp(replay=Replay.open(traces[name]))
        async with app.run_test(size=(width, 30)) as pilot:
            await settled(pilot)
            text = app.query_one(StatusHeader).render().plain
            first = text.splitlines()[0]
            assert ("perturbed seed 33" in first or "perturbed 33" in first) == marked, first
            if width == 160 and marked:
                assert "perturbed seed 33" in first
