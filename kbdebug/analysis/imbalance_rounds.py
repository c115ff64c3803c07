"""KB111's even split message by message, for a late PE whose extra work sits in a chain.

A late PE whose runs of the unit line are parted by its messages (a pipeline's last
stage: receive a tile, run the line three times, store; a middle stage: receive, run,
send) does its extra work once per **round** (the steps between two of its messages).
That work cannot leave the round: a round's work is on the message it received or will
send, so moved to another PE it is done on that message there, before that PE sends it
on (or after it receives it), and every later stage waits for it. The split is then
per round: of a round's units, each PE takes at most ``ceil(units / PEs)``, the PEs with
the most time to spare first (the least kernel time besides their receive stalls and
their own runs of the line), the late PE among them.

:func:`round_split_edits` builds the re-timing's edits of that split: the late PE
without the round's units it gives away (their steps and the waits on them), each other
PE slower, round by round, by the cycles of the units it takes (the late PE's own cycles
for them) on its compute before its matching send (or, with no send per round, after its
matching receive). :func:`kbdebug.analysis.retime.simulate_launch` re-times them
together, the messages' order kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kbdebug.analysis.model import COMPUTE, OPAQUE, RECV, SEND, WAIT, Model, Program

__all__ = ["RoundSplit", "round_split_edits"]


@dataclass(frozen=True)
class RoundSplit:
    """A late PE's units round by round, and the re-timing's edits of their even split."""

    #: The late PE whose rounds are named (the first with rounds), its round count and
    #: the most units of the line one of its rounds holds.
    pe: int
    rounds: int
    round_units: int
    #: Whether every one of its rounds holds ``round_units`` units.
    uniform: bool
    #: The most units a PE takes of one round with the round's units split evenly.
    cap: int
    #: The PEs that hold some of the units after the split (the late PE if it keeps any).
    takers: tuple[int, ...]
    #: Per edited PE: (step order, None, step cycles), as simulate_launch takes them.
    edits: dict


def round_split_edits(
    model: Model,
    late: tuple[int, ...],
    units: dict[int, int],
    unit_line: int,
    stalled: dict[int, int],
) -> RoundSplit | None:
    """The even split, round by round, of the late PEs' units of ``unit_line``; None when
    no late PE's runs of the line are parted by its messages (its extra work is one run),
    a round's steps of the line do not come in whole units, or another PE has no
    send (or receive) per round to do the moved work on. ``stalled``: per PE, the cycles
    it stalled on receives."""
    if unit_line < 0:
        return None
    locs = np.asarray(model.index.commands.loc, dtype=np.int64)
    programs = model.programs
    others = [pe for pe in sorted(programs) if pe not in late]
    n_pes = len(programs)
    spare = {
        pe: prog.achieved
        - stalled.get(pe, 0)
        - int(np.asarray(prog.cycles, dtype=np.int64)[_on_line(prog, locs, unit_line)].sum())
        for pe, prog in programs.items()
    }
    # Per other PE, per round index: the cycles it takes on.
    gained: dict[int, dict[int, float]] = {pe: {} for pe in others}
    edits: dict = {}
    takers: set[int] = set()
    named: tuple[int, int, int, int, bool] | None = None
    single = False
    for pe in late:
        prog = programs[pe]
        kinds = np.frombuffer(prog.kind, dtype=np.int8)
        cmds = np.asarray(prog.cmd, dtype=np.int64)
        steps = np.flatnonzero(_on_line(prog, locs, unit_line))
        if not len(steps) or not units.get(pe):
            continue
        per_unit, rest = divmod(len(steps), units[pe])
        if rest or not per_unit:
            return None
        messages = np.flatnonzero(np.isin(kinds, (RECV, SEND)))
        # A step's round: how many of the PE's messages come before it.
        round_of = np.searchsorted(messages, steps)
        rounds, counts = np.unique(round_of, return_counts=True)
        if len(rounds) < 2:
            single = True  # its extra work is one run: the rounds would leave it be
            continue
        if np.any(counts % per_unit):
            return None
        cycles = np.asarray(prog.cycles, dtype=np.int64)
        keep = np.ones(len(prog), dtype=bool)
        dropped_cmds: set[int] = set()
        most, fewest = 0, None
        # The steps come in program order, so each round's are one slice of them.
        by_round = np.split(steps, np.cumsum(counts)[:-1])
        for r, (mine, count) in enumerate(zip(by_round, counts.tolist(), strict=True)):
            n_units = count // per_unit
            most = max(most, n_units)
            fewest = n_units if fewest is None else min(fewest, n_units)
            cap = math.ceil(n_units / n_pes)
            takes, left = [], n_units
            for q in sorted([pe, *others], key=lambda q: (spare[q], q)):
                take = min(cap, left)
                if take <= 0:
                    break
                if q != pe:
                    takes.append((q, take))
                takers.add(q)
                left -= take
            # The late PE gives the round's last units, each at its own cycles.
            given = sum(take for _, take in takes)
            gone = mine[len(mine) - given * per_unit :] if given else mine[:0]
            keep[gone] = False
            dropped_cmds.update(cmds[gone].tolist())
            at = 0
            for q, take in takes:
                part = gone[at : at + take * per_unit]
                at += take * per_unit
                gained[q][r] = gained[q].get(r, 0.0) + float(cycles[part].sum())
        keep &= ~((kinds == WAIT) & np.isin(cmds, list(dropped_cmds)))
        edits[pe] = (np.flatnonzero(keep).tolist(), None, None)
        if named is None:
            named = (pe, len(rounds), most, math.ceil(most / n_pes), most == fewest)
        elif len(rounds) != named[1]:
            return None  # late PEs with rounds of their own count: no one other's round
    if named is None or single:
        return None
    for q, per_round in gained.items():
        if not per_round:
            continue
        cycles = _with_round_work(model, q, per_round, named[1])
        if cycles is None:
            return None
        edits[q] = (range(len(programs[q])), None, cycles)
    pe, rounds, most, cap, uniform = named
    return RoundSplit(
        pe=pe,
        rounds=rounds,
        round_units=most,
        uniform=uniform,
        cap=cap,
        takers=tuple(sorted(takers)),
        edits=edits,
    )


def _with_round_work(
    model: Model, pe: int, per_round: dict[int, float], rounds: int
) -> np.ndarray | None:
    """``pe``'s step cycles with ``per_round[r]`` cycles more on round ``r``'s work: its
    last compute before its r-th send when it sends once a round, else its first compute
    after its r-th receive's wait; None when it has neither once a round."""
    prog = model.programs[pe]
    kinds = np.frombuffer(prog.kind, dtype=np.int8)
    cmds = np.asarray(prog.cmd, dtype=np.int64)
    work = np.flatnonzero(np.isin(kinds, (COMPUTE, OPAQUE)))
    cycles = np.asarray(prog.cycles, dtype=np.int64).copy()
    sends = np.flatnonzero(kinds == SEND)
    received = set(cmds[kinds == RECV].tolist())
    waits = np.flatnonzero((kinds == WAIT) & np.isin(cmds, list(received)))
    if len(sends) == rounds:
        # The work on a message it sends: the last compute after the previous send,
        # before this one.
        ends, last = sends, True
        starts = np.concatenate(([-1], sends[:-1]))
    elif len(waits) == rounds:
        # The work on a message it receives: the first compute after its wait.
        starts, last = waits, False
        ends = np.concatenate((waits[1:], [len(prog)]))
    else:
        return None
    for r, extra in per_round.items():
        lo, hi = np.searchsorted(work, [starts[r] + 1, ends[r]])
        if lo >= hi:
            return None
        cycles[work[hi - 1] if last else work[lo]] += round(extra)
    return cycles


def _on_line(prog: Program, locs: np.ndarray, unit_line: int) -> np.ndarray:
    """Per step of ``prog``, whether it is one of its steps of ``unit_line`` (no wait)."""
    kinds = np.frombuffer(prog.kind, dtype=np.int8)
    cmds = np.asarray(prog.cmd, dtype=np.int64)
    valid = (cmds >= 0) & (cmds < len(locs)) & (kinds != WAIT)
    on_line = valid.copy()
    on_line[valid] = locs[cmds[valid]] == unit_line
    return on_line
