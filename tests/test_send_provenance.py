"""KB112 and the bound from the recorded producer of a send (format 1.6), not a guess.

A split-K chain: each PE sums its K range of A @ B, adds the partial sum it receives
from the left, then runs a side projection whose output has the running sum's shape and
dtype, stores it, and only then sends the running sum on. Guessing a send's producer as
the latest compute of the sent tile's shape takes that projection (no finding, and a
bound the fix beats); the recorded producer is the add, so KB112 names the send and
prices moving it up, and the bound lets the send leave after the add.
"""

from __future__ import annotations

import inspect
import io
from pathlib import Path

import msgpack
import numpy as np
import pytest

from emulator import HardwareConfig, Memory, run_kernel
from emulator.trace.schema import Kind
from kbdebug.analysis import Analysis
from kbdebug.analysis.model import build_model, launch_efficiency
from kbdebug.replay import Replay

M, N, BK = 32, 64, 64
A_BYTES, B_BYTES = M * BK * 2, BK * N * 2
PES, TILES = 4, 2


def _chain_sum(tl, a_ptr, b_ptr, pe):
    """This PE's K range of A @ B (blocking loads), plus the left neighbour's sum."""
    acc = tl.full((M, N), 0.0, "f32")
    for t in range(pe * TILES, (pe + 1) * TILES):
        acc = acc + tl.dot(
            tl.load(a_ptr + t * A_BYTES, (M, BK)), tl.load(b_ptr + t * B_BYTES, (BK, N))
        )
    if pe > 0:
        acc = tl.wait(tl.recv_async("left", (M, N), "f32")) + acc
    return acc


def chain_late(tl, a_ptr, b_ptr, w_ptr, side_ptr, c_ptr, wc=N):
    """The running sum sent on after the side projection, which does not need it sent
    (and whose output, (M, wc) f32, has the running sum's shape unless ``wc`` < N)."""
    pe, n = tl.program_id(0), tl.num_programs(0)
    w = tl.load(w_ptr, (N, N))
    total = _chain_sum(tl, a_ptr, b_ptr, pe)
    side = tl.dot(tl.dot(total.to("f16"), w).to("f16"), w[:, :wc])
    tl.store(side_ptr + pe * M * N * 4, side)
    if pe + 1 < n:
        tl.send("right", total)  # mark: late
    else:
        tl.wait(tl.store(c_ptr, total))


def chain_early(tl, a_ptr, b_ptr, w_ptr, side_ptr, c_ptr):
    """The same chain sending the running sum as soon as it is made."""
    pe, n = tl.program_id(0), tl.num_programs(0)
    w = tl.load(w_ptr, (N, N))
    total = _chain_sum(tl, a_ptr, b_ptr, pe)
    if pe + 1 < n:
        tl.send("right", total)  # mark: early
    else:
        done = tl.store(c_ptr, total)
    side = tl.dot(tl.dot(total.to("f16"), w).to("f16"), w)
    tl.store(side_ptr + pe * M * N * 4, side)
    if pe + 1 == n:
        tl.wait(done)


def _run(kernel, path: Path, **options) -> Path:
    rng = np.random.default_rng(3)
    k = PES * TILES * BK
    a = rng.standard_normal((M, k)).astype(np.float16)
    memory = Memory(1 << 22)
    a_tiles = np.ascontiguousarray(a.reshape(M, PES * TILES, BK).transpose(1, 0, 2))
    a_ptr = memory.put(a_tiles, name="A")
    b_ptr = memory.put(rng.standard_normal((k, N)).astype(np.float16), name="B")
    w_ptr = memory.put((rng.standard_normal((N, N)) * 0.1).astype(np.float16), name="W")
    side_ptr, c_ptr = memory.alloc(PES * M * N * 4), memory.alloc(M * N * 4)
    config = HardwareConfig(mesh_rows=1, mesh_cols=PES)
    args = (a_ptr, b_ptr, w_ptr, side_ptr, c_ptr, *options.pop("args", ()))
    run_kernel(kernel, args, (PES,), memory, config, trace=path, **options)
    return path


def _line_of(kernel, mark: str) -> int:
    lines, first = inspect.getsourcelines(kernel)
    return first + next(i for i, text in enumerate(lines) if f"# mark: {mark}" in text)


def _span(replay: Replay) -> int:
    model = build_model(replay.index)
    return model.end - model.start


def _launch_bound(replay: Replay) -> int:
    bound, _ = launch_efficiency(build_model(replay.index).bounds())
    return bound


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The late chain's and its fixed twin's replays."""
    root = tmp_path_factory.mktemp("chain")
    late = Replay.open(_run(chain_late, root / "late.kbt"), cache=False)
    early = Replay.open(_run(chain_early, root / "early.kbt"), cache=False)
    return late, early


def test_kb112_names_the_send_past_the_same_shaped_projection(runs):
    late, early = runs
    found = [f for f in Analysis(late).findings if f.rule == "KB112"]
    assert len(found) == 1, found
    (f,) = found
    assert f.loc.line == _line_of(chain_late, "late")
    measured = _span(late) - _span(early)
    assert measured > 0.2 * _span(late)  # the fix pays a lot
    assert abs(f.saving - measured) <= 0.15 * measured, (f.saving, measured)


def test_the_fixed_twin_does_not_beat_the_late_runs_bound(runs):
    late, early = runs
    assert _launch_bound(late) <= _span(early)
    early_pe = {b.pe: b.achieved for b in build_model(early.index).bounds()}
    for b in build_model(late.index).bounds():
        assert b.bound <= early_pe[b.pe], b


def test_a_send_already_early_gets_no_kb112(runs):
    _, early = runs
    assert not [f for f in Analysis(early).findings if f.rule == "KB112"]


def test_a_trace_without_provenance_keeps_the_guess_and_says_so(tmp_path):
    """Before format 1.6 the producer is the latest compute of the sent tile's shape:
    right when the side projection has another shape, and the message says it guessed."""
    path = _run(chain_late, tmp_path / "old.kbt", args=(N // 2,), provenance=False)
    old = Replay.open(path, cache=False)
    assert "provenance" not in old.index.header
    (f,) = [f for f in Analysis(old).findings if f.rule == "KB112"]
    assert f.loc.line == _line_of(chain_late, "late")
    assert "guessed from the sent tile's shape and dtype" in f.message


def test_a_provenance_naming_no_earlier_command_of_its_pe_is_ignored(runs, tmp_path):
    """A forged trace whose records name the store or send itself, or a later command
    (of another PE), opens; the model then guesses as for a trace without them."""
    late, _ = runs
    data = Path(late.path).read_bytes()
    records = list(msgpack.Unpacker(io.BytesIO(data), strict_map_key=False))
    last = max(r[3] for r in records if isinstance(r, list) and r[0] in (18, 19, 20, 21))
    for r in records:
        if isinstance(r, list) and r[0] == Kind.PROVENANCE:
            r[4] = r[3] if r[3] % 2 else last  # itself, or the launch's last command
    forged = tmp_path / "forged.kbt"
    forged.write_bytes(b"".join(msgpack.packb(r) for r in records))
    guessed = Replay.open(_run(chain_late, tmp_path / "old.kbt", provenance=False), cache=False)
    assert _launch_bound(Replay.open(forged, cache=False)) == _launch_bound(guessed)
