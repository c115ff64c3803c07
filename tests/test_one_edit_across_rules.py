"""One edit, one finding: a wait line two rules find on different PEs (a load's wait on
the first stage of a pipeline, KB104; a receive's on the others, KB109) is fixed by one
edit, the wait moved down to the value's first use on every PE. It is reported once,
over every PE, with that edit's saving re-timed on the whole mesh."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from emulator import HardwareConfig, Memory, run_kernel
from kbdebug.analysis import Analysis, find_all
from kbdebug.analysis.findings import wait_causes
from kbdebug.analysis.model import build_model
from kbdebug.replay import Replay

TILE = (64, 64)
TILE_BYTES = 64 * 64 * 2
PES = 4


def stages_wait_first(tl, x_ptr, w_ptr, y_ptr, n_mb):
    """A pipeline stage that waits for the next micro-batch before this one's work."""
    pid, n = tl.program_id(0), tl.num_programs(0)
    w = tl.load(w_ptr + pid * TILE_BYTES, TILE, "f16")
    f = tl.load_async(x_ptr, TILE, "f16") if pid == 0 else tl.recv_async("left", TILE, "f16")
    x = tl.wait(f)
    for m in range(n_mb):
        if m + 1 < n_mb:
            nxt_ptr = x_ptr + (m + 1) * TILE_BYTES
            f = (
                tl.load_async(nxt_ptr, TILE, "f16")
                if pid == 0
                else tl.recv_async("left", TILE, "f16")
            )
            nxt = tl.wait(f)  # mark: wait
        y = tl.exp(tl.dot(x, w) * 0.01).to("f16")
        if pid + 1 < n:
            tl.send("right", y)
        else:
            tl.store(y_ptr + m * TILE_BYTES, y)
        if m + 1 < n_mb:
            x = nxt


def stages_wait_at_use(tl, x_ptr, w_ptr, y_ptr, n_mb):
    """The same stage waiting for the next micro-batch after this one's work."""
    pid, n = tl.program_id(0), tl.num_programs(0)
    w = tl.load(w_ptr + pid * TILE_BYTES, TILE, "f16")
    f = tl.load_async(x_ptr, TILE, "f16") if pid == 0 else tl.recv_async("left", TILE, "f16")
    x = tl.wait(f)
    for m in range(n_mb):
        if m + 1 < n_mb:
            nxt_ptr = x_ptr + (m + 1) * TILE_BYTES
            f = (
                tl.load_async(nxt_ptr, TILE, "f16")
                if pid == 0
                else tl.recv_async("left", TILE, "f16")
            )
        y = tl.exp(tl.dot(x, w) * 0.01).to("f16")
        if pid + 1 < n:
            tl.send("right", y)
        else:
            tl.store(y_ptr + m * TILE_BYTES, y)
        if m + 1 < n_mb:
            x = tl.wait(f)  # mark: wait


def _line(kernel) -> int:
    import inspect

    lines, first = inspect.getsourcelines(kernel)
    return first + next(i for i, text in enumerate(lines) if "# mark: wait" in text)


def _run(kernel, path: Path, n_mb: int = 8) -> Replay:
    memory = Memory(size_bytes=(2 * n_mb + 2 * PES) * TILE_BYTES + (1 << 16))
    rng = np.random.default_rng(2)
    x_ptr = memory.put((rng.standard_normal((n_mb * 64, 64)) * 0.1).astype(np.float16))
    w_ptr = memory.put((rng.standard_normal((PES * 64, 64)) * 0.1).astype(np.float16))
    y_ptr = memory.alloc(n_mb * TILE_BYTES)
    config = HardwareConfig(mesh_rows=1, mesh_cols=PES, mesh_wrap=False)
    run_kernel(kernel, (x_ptr, w_ptr, y_ptr, n_mb), (PES,), memory, config, trace=path)
    return Replay.open(path, cache=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("one_edit")
    return _run(stages_wait_first, root / "bug.kbt"), _run(stages_wait_at_use, root / "fix.kbt")


def _span(replay: Replay) -> int:
    model = build_model(replay.index)
    return model.end - model.start


def test_two_rules_find_the_wait_line_on_different_pes(runs):
    """The case is the mixed one: per PE, the stalls of the load's wait and of the
    receive's are charged to their own rules; find_all reports the line under one."""
    bug, _ = runs
    charged = {(w.rule, w.pe) for w in wait_causes(bug) if w.rule in ("KB104", "KB109")}
    assert ("KB104", 0) in charged
    assert {pe for rule, pe in charged if rule == "KB109"} == set(range(1, PES))
    line = _line(stages_wait_first)
    assert len({f.rule for f in find_all(bug) if f.loc.line == line}) == 1


def test_the_wait_line_is_one_finding_with_the_one_edits_saving(runs):
    bug, fixed = runs
    line = _line(stages_wait_first)
    found = [f for f in Analysis(bug).findings if f.loc is not None and f.loc.line == line]
    assert len(found) == 1, [(f.rule, f.pes, f.saving) for f in found]
    (f,) = found
    assert f.rule in ("KB104", "KB109")
    assert f.pes == tuple(range(PES))
    measured = _span(bug) - _span(fixed)
    assert measured > 0
    assert abs(f.saving - measured) <= 0.2 * measured, (f.saving, measured)
    assert "data or message" in f.message


def test_the_fixed_twin_has_no_finding_at_its_wait(runs):
    _, fixed = runs
    line = _line(stages_wait_at_use)
    assert not [f for f in Analysis(fixed).findings if f.loc is not None and f.loc.line == line]
