"""Shared HBM bandwidth in the model: each stack a FIFO resource of its PEs' transfers.

A trace recorded with ``hbm_stack_pes`` > 0 (format 1.4) names the PEs of each HBM
stack in its header (``hbm_stacks``) and records an ``HBM_SHARE`` event at every DMA
transfer's grant: the stack serves its PEs' transfers one after another in grant order,
each for a slot of ``ceil(bytes / hbm_stack_bytes_per_cycle)`` cycles (at least 1),
and a transfer holds its channel until the later of its own time (``ceil(bytes /
hbm_bytes_per_cycle)``) and the end of its slot (``emulator.hardware.hbm``).

The model reads these as a shared resource of the dataflow graph: re-timing
(:mod:`kbdebug.analysis.retime_shared`) takes each stack's slots in grant order across
its PEs, so the recorded schedule comes back exactly and an edit goes no faster than
the stack allows; the bound counts a transfer at its unshared hold (the PE alone on its
stack) and the launch no shorter than each stack's slots end to end (:func:`stack_bounds`).
A trace without sharing has no :class:`SharedHbm` and every figure is what it was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.analysis.model import LOAD, STORE, _ints
from kbdebug.replay.index import TraceIndex

if TYPE_CHECKING:
    from kbdebug.analysis.model import Model

#: One transfer's share of its stack: (stack, cycles it waited for the stack as recorded,
#: its slot's cycles, its grant's place in the recorded order: the HBM_SHARE event index).
Share = tuple[int, int, int, int]
#: A program's transfer's share: ``Share`` and its own transfer cycles (bytes over its
#: channel's rate), what the emulator counts its channel busy for until its grant.
ProgramShare = tuple[int, int, int, int, int]


@dataclass
class SharedHbm:
    """The stacks of a launch whose PEs share HBM bandwidth, and every transfer's share."""

    #: The PEs of each stack, stack ``i`` at position ``i``.
    stacks: list[list[int]]
    #: Bytes a stack moves per cycle.
    bytes_per_cycle: int
    #: Per transfer command: its share (see ``Share``).
    share: dict[int, Share] = field(default_factory=dict)
    #: Per stack: its slots' cycles, every transfer's, added up.
    slots: list[int] = field(default_factory=list)
    #: Per stack: the stalls of its transfers (cycles each waited for the stack) added up.
    queued: list[int] = field(default_factory=list)
    #: Per stack: its transfers as recorded, sorted by grant and order key: (grant
    #: cycles, order keys, slots, the PE of each program step, -1 for a transfer that is
    #: no step of any program: a composite's own). A re-timing takes the slots of the
    #: PEs it leaves as recorded, and of the -1s, at their recorded grants.
    taken: list[tuple[np.ndarray, ...]] = field(default_factory=list)

    def stack_of(self, pe: int) -> int:
        """The stack PE ``pe`` shares, -1 when none."""
        for i, pes in enumerate(self.stacks):
            if pe in pes:
                return i
        return -1


def shared_hbm(index: TraceIndex) -> SharedHbm | None:
    """The launch's shared HBM stacks from its header and HBM_SHARE events; None when its
    PEs share no bandwidth (every trace before format 1.4, and any run with it off)."""
    stacks = index.header.get("hbm_stacks")
    if not isinstance(stacks, list) or not stacks:
        return None
    config = index.header.get("config") or {}
    rate = config.get("hbm_stack_bytes_per_cycle", 192)
    if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
        return None
    stacks = [[int(p) for p in pes] for pes in stacks]
    c = index.columns
    events = np.flatnonzero(c.kind == Kind.HBM_SHARE)
    cmds = index.commands
    n_cmds = len(cmds.issue)
    stack_of_pe = {p: i for i, pes in enumerate(stacks) for p in pes}
    out = SharedHbm(
        stacks=stacks,
        bytes_per_cycle=rate,
        slots=[0] * len(stacks),
        queued=[0] * len(stacks),
    )
    nbytes = np.asarray(cmds.nbytes, dtype=np.int64)
    for e, cmd, pe, stalled in zip(
        events.tolist(),
        c.cmd[events].tolist(),
        c.pe[events].tolist(),
        c.val[events].tolist(),
        strict=True,
    ):
        stack = stack_of_pe.get(pe, -1)
        if stack < 0 or not 0 <= cmd < n_cmds:
            continue
        # The slot as the emulator gives it (the index keeps the stall, not the slot).
        slot = max(1, math.ceil(int(nbytes[cmd]) / rate))
        out.share[cmd] = (stack, max(int(stalled), 0), slot, e)
        out.slots[stack] += slot
        out.queued[stack] += max(int(stalled), 0)
    return out


def share_transfers(model: Model) -> None:
    """Give each program's loads and stores their shares and unshared holds, and each
    stack its transfers as recorded (``SharedHbm.taken``)."""
    shared = model.shared
    nbytes = model.index.commands.nbytes
    for prog in model.programs.values():
        rate = prog.hw.hbm_bytes_per_cycle
        for k, c in zip(prog.kind, prog.cmd, strict=True):
            if (k == LOAD or k == STORE) and c in shared.share:
                share = shared.share[c]
                own = max(1, math.ceil(int(nbytes[c]) / rate))
                prog.shares[c] = (*share, own)
                prog.unshared[c] = max(own, share[2])
    owner = {c: prog.pe for prog in model.programs.values() for c in prog.shares}
    times = model.index.columns.time
    rows: list[list[tuple[int, int, int, int]]] = [[] for _ in shared.stacks]
    for cmd, (stack, _, slot, key) in shared.share.items():
        rows[stack].append((int(times[key]), key, slot, owner.get(cmd, -1)))
    for stack_rows in rows:
        table = np.array(sorted(stack_rows), dtype=np.int64).reshape(-1, 4)
        shared.taken.append(tuple(np.ascontiguousarray(table[:, i]) for i in range(4)))


@dataclass(frozen=True)
class StackBound:
    """One HBM stack as a bound of the launch: its slots end to end."""

    stack: int
    #: The PEs that share it (those that ran a kernel).
    pes: tuple[int, ...]
    #: Its slots' cycles added up: the least time it takes to move the launch's bytes.
    slots: int
    #: The cycle before which its PEs' kernels cannot all have ended: the first issue a
    #: transfer could be granted at, plus every slot, plus the latency of the last.
    end: int
    #: Cycles its transfers waited for it, added up over its PEs.
    queued: int


def stack_bounds(model: Model) -> list[StackBound]:
    """Each shared stack's bound of the launch (empty without sharing).

    Whatever the placement, the stack serves every slot of its PEs one after another,
    none before the first of them could issue a transfer, and the transfer holding the
    last slot lands ``hbm_latency`` after it: the last of its PEs ends no sooner.
    """
    shared = model.shared
    if shared is None:
        return []
    out = []
    for i, pes in enumerate(shared.stacks):
        progs = [model.programs[p] for p in pes if p in model.programs]
        # Only a kernel that ran to its end waits for its transfers to land.
        if not progs or not shared.slots[i] or not all(p.complete for p in progs):
            continue
        first = min(p.start + p.hw.issue for p in progs)
        latency = min(p.hw.hbm_latency for p in progs)
        out.append(
            StackBound(
                stack=i,
                pes=tuple(p.pe for p in progs),
                slots=shared.slots[i],
                end=first + shared.slots[i] + latency,
                queued=shared.queued[i],
            )
        )
    return out


def unshared_lengths(model: Model) -> dict[int, int]:
    """Per PE, its re-timed length with every PE alone on its stack (each transfer at its
    unshared hold): against the recorded lengths, what sharing the stacks cost each PE."""
    from kbdebug.analysis.retime import _drive, run_program

    sent: dict[int, int] = {}
    gens = {}
    for pe, prog in model.programs.items():
        cycles = None
        if prog.unshared:
            steps = np.frombuffer(prog.cycles, dtype=np.int64).copy()
            for s, c in enumerate(prog.cmd):
                if c in prog.unshared and prog.kind[s] in (LOAD, STORE):
                    steps[s] = prog.unshared[c]
            cycles = _ints(steps)
        gens[pe] = run_program(prog, range(len(prog)), None, cycles, sent)
    return _drive(gens, sent)
