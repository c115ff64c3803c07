"""Bundled traces: one per built-in scenario, never stale, identical wherever the checkout lives."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.kernel.runner import DIGESTS_ENV
from emulator.scenarios import SCENARIOS
from emulator.trace.reader import read_trace
from kbdebug.cli import main

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_bundled_trace_is_what_regenerating_it_gives(name, tmp_path, capsys, monkeypatch):
    # The bundled traces are of format 1.3 and 1.4, kept as they are (the traces older
    # kbdebugs read, and those every test and screen of this project was made on):
    # regenerated without what 1.5 adds (digests and named tensors).
    monkeypatch.setenv(DIGESTS_ENV, "0")
    out = tmp_path / f"{name}.kbt"
    assert main(["run", name, "-q", "-o", str(out)]) == 0
    bundled = TRACES / f"{name}.kbt"
    assert bundled.exists(), f"traces/{name}.kbt is missing; see traces/README.md"
    assert out.read_bytes() == bundled.read_bytes(), (
        f"traces/{name}.kbt is stale: regenerate it as traces/README.md says"
    )


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_bundled_trace_is_small_complete_and_carries_its_sources(name):
    path = TRACES / f"{name}.kbt"
    assert path.stat().st_size < 1_000_000
    trace = read_trace(path)
    assert not trace.truncated
    assert trace.footer["status"] == "ok"
    assert trace.footer["events"] == len(trace.events)
    files = {loc.file for loc in trace.locs}
    assert files <= set(trace.sources)
    assert all(not f.startswith("/") for f in files)


def test_a_checkout_elsewhere_writes_the_same_bytes(tmp_path):
    checkout = tmp_path / "elsewhere" / "kbdebug-copy"
    for package in ("emulator", "kbdebug"):
        shutil.copytree(
            ROOT / package, checkout / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    out = tmp_path / "ring.kbt"
    subprocess.run(
        [sys.executable, "-m", "kbdebug", "run", "ring_attention", "-q", "-o", str(out)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin", DIGESTS_ENV: "0"},
        check=True,
        capture_output=True,
    )
    assert out.read_bytes() == (TRACES / "ring_attention.kbt").read_bytes()
