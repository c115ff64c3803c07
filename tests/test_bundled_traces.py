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
    # What `kbdebug run` writes by default (digests, named tensors, provenance): the bundled
    # traces show the product as it is; tests/data/old_traces keeps older formats opening.
    monkeypatch.delenv(DIGESTS_ENV, raising=False)
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
    # Recorded as `kbdebug run` records today: named tensors with their digests.
    assert trace.version == (1, 6) and trace.header.get("tensors")


def test_a_checkout_elsewhere_writes_the_same_bytes(tmp_path):
    # Digests and provenance are deterministic too: the same bytes from any checkout.
    checkout = tmp_path / "elsewhere" / "kbdebug-copy"
    for package in ("emulator", "kbdebug"):
        shutil.copytree(
            ROOT / package, checkout / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    out = tmp_path / "ring.kbt"
    subprocess.run(
        [sys.executable, "-m", "kbdebug", "run", "ring_attention", "-q", "-o", str(out)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
    )
    assert out.read_bytes() == (TRACES / "ring_attention.kbt").read_bytes()
