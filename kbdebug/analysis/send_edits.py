"""KB112 send-issued-late: a send issued after work its data does not need, delaying a receive.

A ``tl.send`` needs only the data it sends: the loaded or received tile it carries
(its ``tl.wait``), or the compute that produced it (recorded from format 1.6 on, see
:mod:`kbdebug.analysis.provenance`; guessed in older traces), and the receives waited
before it (their message may be what says the data is ready). A send the kernel issues
below work it does not need holds its message back; the receiving PE waits for it.
The fix moves each send of the line right after the last of those steps (never
above an earlier send on the same link, which would reorder its messages) and the
re-timing prices it on the whole mesh: the saving is what the PEs that receive,
directly or down the line, gain, not the sender, whose own kernel a send never
holds up.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from kbdebug.analysis.model import COMPUTE, LOAD, NEVER, OPAQUE, RECV, SEND, WAIT
from kbdebug.analysis.retime import simulate_launch
from kbdebug.analysis.stream_edits import _Group
from kbdebug.analysis.wording import times, where
from kbdebug.replay.timing import event_times

if TYPE_CHECKING:
    from emulator.trace.schema import SourceLoc
    from kbdebug.analysis.findings import _Diagnosis
    from kbdebug.analysis.model import Model

RULE = "KB112"


def late_send_groups(d: _Diagnosis) -> list[tuple[_Group, int]]:
    """KB112 groups of one PE, one per send line, each with what its fix saves the PE
    that gains most from it (a receiving PE, or one further down the line)."""
    prog = d.prog
    kinds, step_cmds = prog.kind, prog.cmd
    receiver = d.model.receiver
    recv_stall = _receive_stalls(d.model)
    by_loc: dict[int, list[int]] = defaultdict(list)
    moves: dict[int, float] = {}
    anchors: dict[int, int] = {}
    last_on_link: dict[int, float] = {}
    for s in range(len(prog)):
        if kinds[s] != SEND:
            continue
        c = step_cmds[s]
        link = prog.link.get(c, -1)
        anchor = _data_ready_step(d, s)
        # Messages on one link arrive in the order they were sent.
        key = max(anchor + 0.5, last_on_link.get(link, -1.0))
        # Work between the data's readiness and the send: what held the message back.
        late = (
            anchor >= 0
            and key < s
            and c in receiver
            and d.compute_steps[s] - d.compute_steps[anchor + 1] > 0
        )
        last_on_link[link] = key if late else float(s)
        if not late:
            continue
        moves[s] = key
        anchors[c] = anchor
        by_loc[int(d.loc[c])].append(c)
    out = []
    for loc_id, sends in by_loc.items():
        stalled = sum(recv_stall.get(receiver[c][1], 0) for c in sends)
        if stalled <= 0:  # no receive waited for these messages
            continue
        # The line most of the sends' data is ready at (a loop's wait, not its prologue's).
        ready = [_anchor_loc(d, anchors[c]) for c in sends]
        known = [loc for loc in ready if loc is not None]
        work = [int(d.work[d.issue_step[c]] - d.work[anchors[c] + 1]) for c in sends]
        info = {
            "ready_loc": max(known, key=known.count) if known else None,
            "work": int(np.median(work)),
            "receivers": tuple(sorted({receiver[c][0] for c in sends})),
            "recv_stall": int(stalled),
        }
        keys = {d.issue_step[c]: moves[d.issue_step[c]] for c in sends}
        g = _Group(RULE, loc_id, sorted(sends), keys, info=info)
        out.append((g, max(_mesh_gain(d, g), 0)))
    return _together(d, out)


def _together(d: _Diagnosis, found: list[tuple[_Group, int]]) -> list[tuple[_Group, int]]:
    """Send lines that only pay together (a ring passing K and V: the receiver waits for
    both, so moving one send alone gains little) as one group named by the first line,
    with the others in ``also``; lines that pay alone as they are."""
    from kbdebug.analysis.findings import JOINT_SHARE

    if len(found) < 2:
        return found
    ordered = sorted(found, key=lambda x: min(d.issue_step[c] for c in x[0].cmds))
    groups = [g for g, _ in ordered]
    merged = _Group(
        RULE,
        groups[0].loc_id,
        sorted(c for g in groups for c in g.cmds),
        {s: k for g in groups for s, k in g.moves.items()},
        info={
            **(groups[0].info or {}),
            "receivers": tuple(sorted({pe for g in groups for pe in g.info["receivers"]})),
            "recv_stall": sum(g.info["recv_stall"] for g in groups),
        },
        also=tuple(dict.fromkeys(g.loc_id for g in groups[1:] if g.loc_id != groups[0].loc_id)),
    )
    joint = max(_mesh_gain(d, merged), 0)
    if sum(gain for _, gain in found) >= JOINT_SHARE * joint:
        return found
    return [(merged, joint)]


def drop_redundant(model: Model, diagnoses: list[_Diagnosis], launch_end, floor: int) -> None:
    """Drop the KB112 lines whose fix adds less than ``floor`` cycles to the launch's end
    on top of every other finding's fix: another way to the same cycles (a receive waited
    before the work, whose fix also lets the next send leave before that work).
    ``launch_end``: the launch's end cycle from per-PE lengths."""
    lines = sorted({g.loc_id for d in diagnoses for g, _ in d.groups() if g.rule == RULE})
    dropped: set[int] = set()

    def end(skip: set[int]) -> int:
        edits = {}
        for d in diagnoses:
            kept = [g for g, _ in d.groups() if not (g.rule == RULE and g.loc_id in skip)]
            if kept:
                edits[d.prog.pe] = d.edit(*kept)
        return launch_end(simulate_launch(model, edits, model.recorded)[0])

    everything = end(dropped) if lines else 0
    for loc_id in lines:
        without = end(dropped | {loc_id})
        if without - everything < floor:
            dropped.add(loc_id)
            everything = without
    for d in diagnoses:
        d._groups = [x for x in d.groups() if not (x[0].rule == RULE and x[0].loc_id in dropped)]


def _data_ready_step(d: _Diagnosis, s: int) -> int:
    """The last step the send at ``s`` must follow: the compute producing its data, the
    waits of the loaded or received data it needs, the last host read or receive wait
    before it; -1 when the model cannot say what produced its data."""
    prog = d.prog
    producer = prog.producer.get(s)
    if producer == -1:
        return -1
    # NO_COMPUTE (-2, recorded provenance): no compute made its data, its needs say when.
    anchor = max(prog.floor[s], -1 if producer is None else producer)
    for c in prog.needs(s):
        anchor = max(anchor, d.wait_step.get(c, d.issue_step.get(c, -1)))
    return anchor if anchor < s else -1


def _mesh_gain(d: _Diagnosis, g: _Group) -> int:
    """Cycles the PE that gains most saves with ``g`` fixed on this PE alone."""
    model = d.model
    base = model.recorded
    lengths, _ = simulate_launch(model, {d.prog.pe: d.edit(g)}, base)
    return max((base[pe] - min(n, NEVER) for pe, n in lengths.items()), default=0)


def _receive_stalls(model: Model) -> dict[int, int]:
    """Per receive command: the cycles its first ``tl.wait`` stalled."""
    cached = model.__dict__.get("_receive_stalls")
    if cached is None:
        index = model.index
        futs = index.futures
        recvs = np.array(
            [r for prog in model.programs.values() for r in prog.match], dtype=np.int64
        )
        fut = np.asarray(index.commands.future, dtype=np.int64)[recvs] if len(recvs) else recvs
        ok = (fut >= 0) & (fut < len(futs.wait_begin))
        begin = event_times(index, np.asarray(futs.wait_begin)[fut[ok]])
        end = event_times(index, np.asarray(futs.wait_end)[fut[ok]])
        stall = np.where((begin >= 0) & (end >= begin), end - begin, 0)
        cached = dict(zip(recvs[ok].tolist(), stall.tolist(), strict=True))
        model.__dict__["_receive_stalls"] = cached
    return cached


def _anchor_loc(d: _Diagnosis, step: int) -> SourceLoc | None:
    """Where the data of a send is ready: the producing compute's line, or the line of
    the wait at ``step`` (None for a host read)."""
    prog, index = d.prog, d.index
    c = prog.cmd[step]
    if not 0 <= c < len(d.loc):
        return None
    kind = prog.kind[step]
    if kind == WAIT:
        f = int(index.commands.future[c])
        wait_loc = index.futures.wait_loc
        return index.loc(int(wait_loc[f])) if 0 <= f < len(wait_loc) else None
    if kind in (COMPUTE, OPAQUE, LOAD, RECV):
        return index.loc(int(d.loc[c]))
    return None


def send_words(d: _Diagnosis, g: _Group, loc: SourceLoc | None) -> tuple[str, str]:
    """The message and suggestion of a KB112 finding."""
    info = g.info or {}
    ready = info.get("ready_loc")
    ready_at = where(ready) if ready is not None else "the line that produces its data"
    pes = info.get("receivers", ())
    on = f"PE {pes[0]}" if len(pes) == 1 else "PEs " + ", ".join(map(str, pes))
    sends = f"tl.send at {where(loc)}"
    if g.also:
        sends += " (with the send at " + ", ".join(where(d.index.loc(i)) for i in g.also) + ")"
    message = (
        f"{sends} was issued {times(len(g.cmds))} after {info.get('work', 0):,} cycles "
        f"of work its data does not need (its data is ready after {ready_at}); the "
        f"receiving {on} waited {info.get('recv_stall', 0):,} cycles for these messages"
    )
    if d.index.header.get("provenance") is not True:
        message += (
            " (what made its data is guessed from the sent tile's shape and dtype: the "
            "trace, older than format 1.6, does not record it)"
        )
    suggestion = (
        f"issue the send right after the line that produces its data ({ready_at}), "
        f"before the work that does not need it"
    )
    if g.also:
        suggestion += " (both sends: the receiver waits for every message, one alone gains little)"
    return message, suggestion
