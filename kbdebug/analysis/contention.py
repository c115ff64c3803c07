"""KB113 hbm-contention: a shared HBM stack that limits the launch, stated with its bound.

Where PEs share an HBM stack's bandwidth (:mod:`kbdebug.analysis.hbm_share`), the time
a transfer waits for the other PEs' slots is the stack's, not the kernel line's: no
placement of the line's issues and waits moves the stack's bytes faster, and re-timing
an edit under the stack (:mod:`kbdebug.analysis.retime_shared`) says so (a deeper
prefetch of a saturated stack gains nothing, so KB107 and KB102 do not fire on it).

What the model vouches for: each stack's slots end to end are a bound of the launch
(the launch's bound is never below the latest stack's, :func:`stack_bounds`), and what
sharing costs is what the launch and each PE would gain with every PE alone on its
stack (re-timed, :func:`~kbdebug.analysis.hbm_share.unshared_lengths`). It does not
vouch for any gain below the stack's bound: the fix (fewer bytes through tiling or
reuse, the traffic spread over more stacks) changes the program or the hardware, not
the placement of its steps. So KB113 is information about the bound, never a finding
with a saving: :class:`HbmContention` names the stack, the PEs sharing it, the cycles
their transfers queued on it, what sharing cost the launch, whether its slots are the
launch's bound, and the fix. A launch at its bound (the stack's) gets no finding, as its
efficiency of 100 % says; the gap of a launch below it is what the findings re-timed
under the stack, and KB106 past what the stack explains, name. Each stalled wait whose
transfer waited for the stack (or queued on its channel behind one that did) is charged
to KB113 when no rule's fix claims it (:func:`queued_on_stack`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kbdebug.analysis.finding import RULES
from kbdebug.analysis.hbm_share import StackBound, stack_bounds, unshared_lengths
from kbdebug.analysis.model import NEVER, Model, Program

RULE = "KB113"


@dataclass(frozen=True)
class HbmContention:
    """One shared HBM stack whose PEs queued for it: its bound and what sharing cost."""

    rule: str
    title: str
    stack: int
    #: The PEs sharing it that ran a kernel.
    pes: tuple[int, ...]
    #: Its slots end to end (cycles): the least time its PEs' bytes take.
    slots: int
    #: The cycle below which the last of its PEs cannot end.
    bound_end: int
    #: Cycles its transfers waited for it, added up over its PEs.
    queued: int
    #: Cycles the launch's end moves earlier with every PE alone on its stack (re-timed).
    cost: int
    #: Whether its bound is the launch's (nothing placed differently ends sooner).
    limits: bool
    message: str
    suggestion: str


def pe_ranges(pes: tuple[int, ...]) -> str:
    """``0–7, 9`` for PEs 0 to 7 and 9."""
    out: list[str] = []
    run: list[int] = []
    for pe in sorted(pes):
        if run and pe == run[-1] + 1:
            run.append(pe)
            continue
        if run:
            out.append(_run_text(run))
        run = [pe]
    if run:
        out.append(_run_text(run))
    return ", ".join(out)


def _run_text(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}\u2013{run[-1]}"


def stack_explained(model: Model) -> dict[int, int]:
    """Per PE on a shared stack, the part of its gap (achieved minus its bound alone on
    the stack) that is the stack's, never its kernel's (KB106 names only the rest): what
    its kernel would save with every PE alone on its stack, and at least all of the gap
    but what the launch could still gain above its stack's bound (no fix of this PE ends
    the launch before its stack's slots are served). Empty without sharing."""
    if model.shared is None:
        return {}
    alone = unshared_lengths(model)
    bounds = model.bound_lengths
    room = {pe: NEVER for pe in model.programs}
    for b in stack_bounds(model):
        for pe in b.pes:
            room[pe] = max(model.end - b.end, 0)
    out = {}
    for pe, n in model.recorded.items():
        cost = max(n - min(alone.get(pe, n), NEVER), 0)
        gap = model.programs[pe].achieved - bounds[pe]
        out[pe] = max(cost, gap - room[pe])
    return out


def contention(model: Model, launch_bound_end: int) -> list[HbmContention]:
    """Every shared stack its PEs queued on, with its bound and what sharing cost the
    launch; ``launch_bound_end``: the launch's bound end cycle (its stack's when limited)."""
    bounds: list[StackBound] = stack_bounds(model)
    if not bounds:
        return []
    alone = unshared_lengths(model)
    recorded_end = max(p.start + model.recorded[pe] for pe, p in model.programs.items())
    out = []
    for b in bounds:
        if b.queued <= 0:
            continue
        # What the launch gains with this stack's PEs alone on it: the ends of its PEs.
        mine = [model.programs[pe] for pe in b.pes]
        shared_end = max(p.start + model.recorded[p.pe] for p in mine)
        alone_end = max(p.start + min(alone.get(p.pe, 0), NEVER) for p in mine)
        cost = max(min(shared_end, recorded_end) - alone_end, 0)
        limits = b.end >= launch_bound_end
        pes = pe_ranges(b.pes)
        plural = "s" if len(b.pes) > 1 else ""
        bound_words = (
            "its slots end to end are the launch's bound"
            if limits
            else f"its slots end to end end at cycle {b.end:,}, below the launch's bound"
        )
        out.append(
            HbmContention(
                rule=RULE,
                title=RULES[RULE],
                stack=b.stack,
                pes=b.pes,
                slots=b.slots,
                bound_end=b.end,
                queued=b.queued,
                cost=cost,
                limits=limits,
                message=(
                    f"PE{plural} {pes} queued {b.queued:,} cycles behind each other's "
                    f"transfers on HBM stack {b.stack} ({b.slots:,} cycles of slots; "
                    f"{bound_words}); sharing it costs the launch {cost:,} cycles"
                ),
                suggestion=(
                    "move fewer bytes through the stack (larger tiles reused across more "
                    "work, data kept in scratch) or spread the traffic over more stacks or "
                    "over time; a deeper prefetch does not help a saturated stack"
                ),
            )
        )
    return out


def queued_on_stack(prog: Program, index) -> set[int]:
    """The transfers of ``prog`` that waited for its stack, or queued on their channel
    behind one that did: their waits' stalls are the stack's, not the kernel line's."""
    if not prog.shares:
        return set()
    cmds = index.commands
    times = index.columns.time
    out: set[int] = set()
    # Per channel: whether its last transfer was held back by the stack.
    last_delayed: dict[int, bool] = {}
    for c, (_, stalled, _, key, _) in sorted(prog.shares.items(), key=lambda x: x[1][3]):
        grant = int(times[key])
        channel = int(cmds.channel[c])
        issued = int(times[cmds.issue[c]]) if cmds.issue[c] >= 0 else grant
        queued = grant > issued + prog.hw.issue
        delayed = stalled > 0 or (queued and last_delayed.get(channel, False))
        if delayed:
            out.add(c)
        last_delayed[channel] = delayed
    return out
