"""Each launch in tests/hazards/MANIFEST.toml records, and its check passes or fails as listed."""

import ast
import importlib.util
import tomllib
from pathlib import Path

import pytest

from emulator import run_kernel

CORPUS = Path(__file__).parent / "hazards"
MANIFEST = tomllib.loads((CORPUS / "MANIFEST.toml").read_text())["launch"]
ACCESS_CALLS = ("tl.store(", "tl.load_async(", "tl.load(")


@pytest.fixture(scope="module")
def corpus_modules():
    """The corpus files, each imported once for all its launches."""
    modules = {}
    for path in sorted({CORPUS / entry["file"] for entry in MANIFEST}):
        spec = importlib.util.spec_from_file_location(f"hazard_corpus_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[path.name] = module
    return modules


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: f"{e['file']}:{e['function']}")
def test_launch_records_and_checks_as_listed(entry, corpus_modules, tmp_path):
    scenario = getattr(corpus_modules[entry["file"]], entry["function"])()
    trace = tmp_path / "run.kbt"
    run_kernel(
        scenario.kernel,
        scenario.args,
        scenario.grid,
        scenario.memory,
        scenario.config,
        trace=trace,
        launch_file=CORPUS / entry["file"],
    )
    assert trace.stat().st_size > 0
    try:
        scenario.check(scenario.memory)
        passed = True
    except AssertionError:
        passed = False
    assert passed == entry["check_passes"]


def test_manifest_lists_every_launch_once_and_names_access_lines():
    listed = [(entry["file"], entry["function"]) for entry in MANIFEST]
    assert len(listed) == len(set(listed))
    defined = set()
    for path in CORPUS.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith(("hazard_", "clean_")):
                defined.add((path.name, node.name))
    assert set(listed) == defined
    for entry in MANIFEST:
        assert bool(entry["hazards"]) == entry["function"].startswith("hazard_")
        for hazard in entry["hazards"]:
            for where in (hazard["first_line"], hazard["second_line"]):
                file, line = where.split(":")
                text = (CORPUS / file).read_text().splitlines()[int(line) - 1]
                assert any(call in text for call in ACCESS_CALLS), where
