"""A ``tl.composite`` call as the PE scheduler runs it: its tiles, and its pipeline re-timed.

The trace records a composite's own commands (B's load, a bias's, each A tile's
load, GEMM, epilogues and store). From them the model knows what the call moved
and computed, and can re-time the scheduler's pipeline (``CompositeJob`` in
``emulator/hardware/composite.py``) for any run of tiles: that is how merging
consecutive calls that restart the pipeline (B and the first A tile read cold
on every call) into one call is priced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from kbdebug.analysis.model import Hardware
    from kbdebug.replay.index import TraceIndex


@dataclass(frozen=True)
class Tile:
    """One row tile of A: its load, its compute after the GEMM, its store."""

    a_addr: int
    a_bytes: int
    a_cycles: int
    gemm: int
    epilogue: int
    out_addr: int
    out_bytes: int
    store_cycles: int


@dataclass(frozen=True)
class Composite:
    """One ``tl.composite`` call."""

    cmd: int
    b_addr: int
    b_cycles: int
    #: The bias load's cycles (-1: no bias).
    bias_cycles: int
    #: The epilogues' op names, in order (calls with other epilogues never merge).
    ops: tuple[str, ...]
    tiles: tuple[Tile, ...]

    def continues(self, before: Composite) -> bool:
        """Whether this call is the rows right after ``before``'s, over the same B."""
        if not self.tiles or not before.tiles:
            return False
        a, b = before.tiles[-1], self.tiles[0]
        return (
            self.b_addr == before.b_addr
            and self.b_cycles == before.b_cycles
            and self.bias_cycles == before.bias_cycles
            and self.ops == before.ops
            and b.a_addr == a.a_addr + a.a_bytes
            and b.out_addr == a.out_addr + a.out_bytes
        )


def composites_of(
    index: TraceIndex, cmd: int, inner: np.ndarray, hold: np.ndarray, hw: Hardware
) -> Composite | None:
    """The composite ``cmd`` from its own commands ``inner`` (in issue order); None when
    they are not the scheduler's usual sequence (a cut trace)."""
    cmds = index.commands
    strings = index.strings
    ops = []
    for c in inner.tolist():
        op = int(cmds.op[c])
        ops.append(strings[op] if 0 <= op < len(strings) else "")
    loads = [c for c, op in zip(inner.tolist(), ops, strict=True) if op == "composite.load"]
    has_bias = "composite.bias" in ops
    if len(loads) < 1 + has_bias:
        return None
    b, bias = loads[0], (loads[1] if has_bias else None)
    a_loads = loads[1 + has_bias :]
    tiles: list[Tile] = []
    signature: tuple[str, ...] | None = None
    gemm, epilogue, names = -1, 0, []
    for c, op in zip(inner.tolist(), ops, strict=True):
        if op == "composite.gemm":
            gemm, epilogue, names = int(hold[c]), 0, []
        elif op == "composite.store":
            j = len(tiles)
            if gemm < 0 or j >= len(a_loads):
                return None
            a = a_loads[j]
            tiles.append(
                Tile(
                    a_addr=int(cmds.addr[a]),
                    a_bytes=int(cmds.nbytes[a]),
                    a_cycles=int(hold[a]),
                    gemm=gemm,
                    epilogue=epilogue,
                    out_addr=int(cmds.addr[c]),
                    out_bytes=int(cmds.nbytes[c]),
                    store_cycles=int(hold[c]),
                )
            )
            if signature is None:
                signature = tuple(names)
            gemm = -1
        elif op.startswith("composite.") and op != "composite.load":
            epilogue += int(hold[c])
            names.append(op)
    if not tiles or len(tiles) != len(a_loads):
        return None
    return Composite(
        cmd=cmd,
        b_addr=int(cmds.addr[b]),
        b_cycles=int(hold[b]),
        bias_cycles=int(hold[bias]) if bias is not None else -1,
        ops=signature or (),
        tiles=tuple(tiles),
    )


def pipeline_length(hw: Hardware, calls: list[Composite]) -> int:
    """Cycles one composite call over all the tiles of ``calls`` takes, its channels free
    at its start (as ``CompositeJob.run`` schedules it)."""
    lat = hw.hbm_latency
    reads = [0] * hw.read_channels
    writes = [0] * hw.write_channels

    def transfer(free: list[int], cycles: int, at: int) -> int:
        i = free.index(min(free))
        g = max(free[i], at)
        free[i] = g + cycles
        return g + cycles + lat

    first = calls[0]
    tiles = [t for call in calls for t in call.tiles]
    b_done = transfer(reads, first.b_cycles, 0)
    bias_done = transfer(reads, first.bias_cycles, 0) if first.bias_cycles >= 0 else 0
    depth = hw.composite_depth
    in_flight = [transfer(reads, t.a_cycles, 0) for t in tiles[:depth]]
    upcoming = len(in_flight)
    t = max(b_done, bias_done)
    end = t
    for tile in tiles:
        t = max(t, in_flight.pop(0))
        if upcoming < len(tiles):
            in_flight.append(transfer(reads, tiles[upcoming].a_cycles, t))
            upcoming += 1
        t += tile.gemm + tile.epilogue
        end = max(end, transfer(writes, tile.store_cycles, t))
    return max(t, end)
