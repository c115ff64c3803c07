"""The first differing run of an explore, run again here beside the nominal one: which HBM
bytes differ, and the store (line, tile) that wrote the first of them."""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from emulator.errors import EmulatorError
from emulator.trace.reader import read_trace
from emulator.trace.schema import Kind
from emulator.trace.writer import TraceWriter
from kbdebug.errors import UserError
from kbdebug.launch.output_check import checked_verdict
from kbdebug.sweep.explore import FirstFailure
from kbdebug.sweep.point import PointTask, build

#: Ops whose bytes land in HBM (what wrote a differing byte).
STORE_OPS = ("store", "composite.store")


def first_failure(nominal: PointTask, failing: PointTask, keep: Path | None) -> FirstFailure:
    """Run the nominal and the failing launch here and compare the HBM they leave: which
    bytes differ, and the store that wrote the first of them (read from the failing run's
    trace, kept at ``keep`` when given, else removed)."""
    launcher, expected = build(nominal)
    _, got = build(failing)
    with launcher.importing():
        try:
            expected.run()
        except EmulatorError:
            pass  # a nominal run that fails leaves its bytes as they are: compared as such
        if keep is not None:
            try:
                handle = open(keep, "xb", buffering=0)  # noqa: SIM115 - closed below
            except OSError as e:
                raise UserError(f"cannot keep the trace as {keep}: {e.strerror or e}") from None
            path = keep
        else:
            fd, name = tempfile.mkstemp(prefix="kbdebug-explore-", suffix=".kbt")
            handle, path = os.fdopen(fd, "wb", buffering=0), Path(name)
        # As `kbdebug run --perturb SEED` writes it, byte for byte: the footer held for
        # the output check's verdict.
        writer = TraceWriter(handle, hold_footer=True)
        try:
            finished = True
            try:
                got.run(recorder=writer)
            except EmulatorError:
                finished = False  # a deadlock or kernel error: its row says so
            verdict = None
            if finished and failing.check and got.check is not None and writer.held:
                verdict = checked_verdict(got, path)[3]
            writer.finish(verdict)
        finally:
            writer.close()
            handle.close()
    try:
        found = FirstFailure(failing.index, trace=str(keep) if keep is not None else None)
        found = replace(found, wrong_block=_wrong_block(path, got))
        a, b = _allocated(expected.memory), _allocated(got.memory)
        differ = np.flatnonzero(a[: b.size] != b[: a.size])
        if differ.size:
            lo, hi = int(differ[0]), int(differ[-1]) + 1
            found = replace(found, lo=lo, hi=hi, count=int(differ.size))
            found = _with_store(found, path, lo)
        return found
    finally:
        if keep is None:
            path.unlink(missing_ok=True)


def _with_store(found: FirstFailure, path: Path, addr: int) -> FirstFailure:
    """``found`` with the last store of the trace at ``path`` that wrote byte ``addr``, and
    which of its line's stores it was (in a loop: its tile)."""
    trace = read_trace(str(path))
    per_line: dict[str, int] = {}
    last: tuple[str, int, int, int] | None = None
    for i, record in enumerate(trace.events):
        if record[0] != Kind.ISSUE:
            continue
        _, _, _, _, op, _, start, nbytes, *_, loc = trace.decode(i)
        if op not in STORE_OPS:
            continue
        line = str(loc) if loc is not None else op
        per_line[line] = per_line.get(line, 0) + 1
        if start <= addr < start + nbytes:
            last = (line, start, nbytes, per_line[line])
    if last is None:
        return found
    line, start, nbytes, nth = last
    return replace(
        found,
        store_line=line,
        store_addr=start,
        store_bytes=nbytes,
        store_ordinal=(nth, per_line[line]),
    )


def _wrong_block(path: Path, scenario: Any) -> tuple[str, ...]:
    """What `kbdebug run` says of the first stored block of the run at ``path`` that
    differs from ``scenario``'s reference per block; nothing without one (or when the
    user's reference raises: the row's message stands)."""
    if scenario.reference is None:
        return ()
    from kbdebug.analysis.wrong_block import first_wrong_block
    from kbdebug.replay import Replay

    def read(addr: int, shape: tuple[int, ...], dtype: str):
        return scenario.memory.get(addr, shape, dtype)

    try:
        wrong = first_wrong_block(Replay.open(path), scenario.reference, read)
    except Exception:  # noqa: BLE001 - the user's reference: the row's message says it
        return ()
    return () if wrong is None else tuple(wrong.lines())


def _allocated(memory: Any) -> np.ndarray:
    return memory.data[: memory.next_free]
