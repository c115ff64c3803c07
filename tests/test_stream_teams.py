"""A page-gathering decode one page ahead: its K and V page loads only pay deepened
together, while the page table's blocking load gains more alone than either. The
K wait's stall gets KB107 naming both lines, at a depth whose re-timed saving is what
running the kernel at that depth saves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbdebug.analysis import pe_bounds
from kbdebug.analysis.findings import find_all
from kbdebug.replay import Replay
from tests import kernels_paged_gather
from tests.kernels_paged_gather import run_paged


def marked(mark: str) -> int:
    """The line of tests/kernels_paged_gather.py that ends with ``# mark: MARK``."""
    text = Path(kernels_paged_gather.__file__).read_text().splitlines()
    (line,) = [i for i, t in enumerate(text, 1) if t.rstrip().endswith(f"# mark: {mark}")]
    return line


@pytest.fixture(scope="module")
def shallow(tmp_path_factory) -> Replay:
    path = tmp_path_factory.mktemp("paged") / "depth1.kbt"
    run_paged(path, depth=1)
    return Replay.open(path)


def test_gathered_page_pair_one_ahead_gets_kb107_naming_both_lines(shallow):
    findings = find_all(shallow)
    (deeper,) = [f for f in findings if f.rule == "KB107"]
    assert deeper.loc.line == marked("k")
    assert [loc.line for loc in deeper.also] == [marked("v")]
    assert f"paged_gather.py:{marked('k wait')}" in deeper.message
    # The stall is the finding's, not KB106's.
    assert not [f for f in findings if f.rule == "KB106"]


def test_kb107_saving_is_what_running_at_its_depth_saves(shallow, tmp_path):
    (deeper,) = [f for f in find_all(shallow) if f.rule == "KB107"]
    ahead = int(re.search(r"issue each load (\d+) tiles? ahead", deeper.suggestion).group(1))
    assert ahead > 1
    run_paged(tmp_path / "deep.kbt", depth=ahead)
    (before,) = pe_bounds(shallow)
    (after,) = pe_bounds(Replay.open(tmp_path / "deep.kbt"))
    measured = before.achieved - after.achieved
    assert measured > 0
    assert abs(deeper.saving - measured) <= 0.05 * measured, (deeper.saving, measured)
