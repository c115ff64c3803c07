"""When the data of a store or send was ready, from what the trace recorded (format 1.6).

A trace whose header has ``provenance`` holds, for each store and send, a PROVENANCE
event naming the command whose result it moves: the compute that made its tensor, the
load or receive whose wait gave it, or none (an array the kernel made on the host). The
model then knows the step after which the store or send could have been issued, instead
of guessing the compute from the sent tile's shape and dtype (older traces: see
:func:`kbdebug.analysis.dependencies.send_producers`, whose guess stays for them and for
any store or send whose record is missing or names no earlier command of its PE).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.analysis.model import COMPUTE, LOAD, OPAQUE, RECV, SEND, STORE

if TYPE_CHECKING:
    from kbdebug.analysis.model import Program
    from kbdebug.replay.index import TraceIndex

#: ``Program.producer`` of a store or send whose data no compute made (a loaded or
#: received tile, whose waits its needs name; or a host array): it may leave as soon as
#: its needs and its floor allow.
NO_COMPUTE = -2


def recorded_producers(index: TraceIndex) -> dict[int, int] | None:
    """Per store or send command, the command whose result it moves (-1: none); None
    when the trace records none (older than 1.6, or written without provenance)."""
    if index.header.get("provenance") is not True:
        return None
    c = index.columns
    events = np.flatnonzero(c.kind == Kind.PROVENANCE)
    cmds = c.cmd[events].astype(np.int64).tolist()
    made_by = c.aux[events].astype(np.int64).tolist()
    return dict(zip(cmds, made_by, strict=True))


def use_recorded_producers(
    prog: Program, made_by: dict[int, int], step_of_cmd: dict[int, int]
) -> None:
    """Set ``prog.producer`` of each store and send whose producer the trace recorded: the
    step of the compute (or composite) that made its data, else NO_COMPUTE. A record
    naming no command of this PE issued before the store or send is ignored (a forged or
    damaged trace): the send keeps the guess, the store stays where it was issued."""
    kinds, cmds = prog.kind, prog.cmd
    for s in range(len(prog)):
        k = kinds[s]
        if k != SEND and k != STORE:
            continue
        m = made_by.get(cmds[s])
        if m is None:
            continue
        if m == -1:
            prog.producer[s] = NO_COMPUTE
            continue
        p = step_of_cmd.get(m, -1)
        if not 0 <= p < s:
            continue
        if kinds[p] == COMPUTE or kinds[p] == OPAQUE:
            prog.producer[s] = p
        elif kinds[p] == LOAD or kinds[p] == RECV:
            # Its READS name the load or receive: the send needs its wait, nothing more.
            prog.producer[s] = NO_COMPUTE
