"""The hazard check on tests/hazards/ (written from the README alone, MANIFEST.toml listing
each launch's hazards): every listed hazard is found (class, PEs, both lines), nothing
else is, and each hazard found names both its lines."""

from __future__ import annotations

import importlib.util
import os
import tomllib
from pathlib import Path

import pytest

from emulator import run_kernel
from kbdebug.analysis.hazards import find_hazards
from kbdebug.replay import Replay

CORPUS = Path(__file__).parent / "hazards"
MANIFEST = tomllib.loads((CORPUS / "MANIFEST.toml").read_text())["launch"]
CLASS = {"KB201": "RAW", "KB202": "WAR", "KB203": "WAW"}


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    """Per launch, the hazards the check finds on its recorded trace."""
    root = tmp_path_factory.mktemp("hazard_corpus")
    modules, out = {}, {}
    for entry in MANIFEST:
        path = CORPUS / entry["file"]
        if path.name not in modules:
            spec = importlib.util.spec_from_file_location(f"corpus_{path.stem}", path)
            modules[path.name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(modules[path.name])
        scenario = getattr(modules[path.name], entry["function"])()
        trace = root / f"{path.stem}_{entry['function']}.kbt"
        run_kernel(
            scenario.kernel, scenario.args, scenario.grid, scenario.memory, scenario.config,
            trace=trace, launch_file=path,
        )  # fmt: skip
        replay = Replay.open(trace, cache=False)
        out[(entry["file"], entry["function"])] = find_hazards(replay.index)
    return out


def _line(loc) -> str:
    return f"{os.path.basename(loc.file)}:{loc.line}"


def listed(entry) -> set[tuple]:
    return {
        (h["class"], tuple(h["pes"]), h["first_line"], h["second_line"]) for h in entry["hazards"]
    }


def reported(hazards) -> set[tuple]:
    return {
        (CLASS[h.rule], pair, _line(h.first.loc), _line(h.second.loc))
        for h in hazards
        for pair in h.pe_pairs
    }


def test_recall_is_total_and_nothing_else_is_found(found):
    missed, extra = [], []
    for entry in MANIFEST:
        got = reported(found[(entry["file"], entry["function"])])
        want = listed(entry)
        missed += [(entry["function"], h) for h in sorted(want - got)]
        extra += [(entry["function"], h) for h in sorted(got - want)]
    hazards = sum(len(listed(e)) for e in MANIFEST)
    assert hazards >= 20 and sum(not e["hazards"] for e in MANIFEST) >= 20
    assert not missed, f"{len(missed)} of {hazards} listed hazards missed: {missed}"
    assert not extra, f"false positives: {extra}"


def test_every_hazard_names_both_lines(found):
    for hazards in found.values():
        for h in hazards:
            for loc in (h.first.loc, h.second.loc):
                assert f"{loc.file}:{loc.line}" in h.message, h.message
