"""Hazards: pairs of HBM accesses whose result depends on timing, as findings of their own
kind (rules KB201 read-after-write, KB202 write-after-read, KB203 write-after-write).

:mod:`kbdebug.analysis.hazard_order` finds every unordered pair of accesses to
overlapping bytes (at least one a store); here the pairs of the same two lines (and the
same side of the PE boundary) become one :class:`Hazard`, naming both lines and PEs, the
bytes (a tensor slice where the trace names its tensors), what this run happened to do
(the old or the new bytes read, which store landed last) and the fix: the wait to add,
at the latest point that still orders the pair. A hazard has no saving: any one fails a
``--fail-on any`` or ``--fail-on hazard`` gate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.hazard_order import (
    Accesses,
    Unordered,
    accesses_of,
    unordered_pairs,
    without,
)
from kbdebug.analysis.identity import call_identity
from kbdebug.replay.slices import address_text, header_tensors
from kbdebug.replay.tables import TraceIndex

#: Rule code -> short name, one per class of hazard.
HAZARD_RULES = {
    "KB201": "read-after-write",
    "KB202": "write-after-read",
    "KB203": "write-after-write",
    "KB204": "out-of-bounds",  # a range outside its tensor: kbdebug.analysis.oob
}
#: An access outside its tensor: wrong in any order, so its label says no "timing".
OUT_OF_BOUNDS = "KB204"
#: The selector that picks every hazard (``--fail-on hazard``).
HAZARD_SELECTOR = "hazard"
#: Occurrences a hazard keeps the events of (the breakpoint stops at each).
MAX_OCCURRENCES = 10_000


def hazard_kind(rule: str) -> str:
    """What makes a hazard wrong, as its label says it (``hazard: out of bounds``):
    ``out of bounds`` for KB204, ``timing-dependent`` for an unordered pair."""
    return "out of bounds" if rule == OUT_OF_BOUNDS else "timing-dependent"


def hazards_are(rules: Iterable[str]) -> str:
    """What the hazards of ``rules`` are, for a section's title: ``results that depend on
    timing``, ``bytes outside their tensor`` (KB204 alone) or both, joined by "or"."""
    rules = set(rules)
    kinds = ["results that depend on timing"] if rules - {OUT_OF_BOUNDS} else []
    return " or ".join(kinds + ["bytes outside their tensor"] * (OUT_OF_BOUNDS in rules))


@dataclass(frozen=True)
class HazardAccess:
    """One side of a hazard: a load or store, where it was issued and when it touched HBM."""

    pe: int
    #: The tl op ("store", "load_async", "composite.load", ...).
    op: str
    loc: SourceLoc | None
    #: Its ISSUE's event index.
    issue: int
    #: The event where it touched HBM in this run (-1: never, the run stopped first).
    happen: int
    #: That event's cycle (-1 when it never happened).
    cycle: int
    #: Where its future was waited (None: never, or a composite's own transfer).
    wait_loc: SourceLoc | None

    @property
    def is_store(self) -> bool:
        return "store" in self.op


@dataclass(frozen=True)
class Hazard:
    """Two accesses to overlapping bytes, at least one a store, that no wait or message
    orders: the lines (and PEs) of every such pair of the same two lines, as one."""

    #: ``KB201:IDENTITY&IDENTITY``: the second line's edit-proof identity, then the
    #: first's (``:peN`` when it holds on one PE N > 0 only).
    id: str
    rule: str
    title: str
    #: The access issued first and the one issued after it (of the first occurrence).
    first: HazardAccess
    second: HazardAccess
    #: The overlapping bytes [lo, hi) and how they read (``out[64:128]`` or addresses).
    lo: int
    hi: int
    where: str
    #: True when the two accesses are on different PEs.
    across_pes: bool
    #: What this run happened to do (which bytes the load read, which store landed last).
    outcome: str
    message: str
    suggestion: str
    #: The line where the fix goes and its PE (the wait to add is placed just above it).
    fix_loc: SourceLoc | None
    fix_pe: int
    #: Every PE either side of an occurrence, sorted.
    pes: tuple[int, ...]
    #: Each (PE of the first access, PE of the second) it occurs between, sorted.
    pe_pairs: tuple[tuple[int, int], ...]
    #: Unordered pairs of these two lines.
    count: int
    #: The second access's event of each occurrence (the later of the two to touch HBM
    #: in this run), sorted, at most MAX_OCCURRENCES: where the breakpoint stops.
    occurrences: tuple[int, ...]
    #: ``RULE:FILE:LINE`` of the second line.
    line_id: str = ""

    @property
    def pe(self) -> int:
        """The PE of the second access (what a finding's ``pe`` is to selectors)."""
        return self.second.pe

    @property
    def loc(self) -> SourceLoc | None:
        """The second access's line."""
        return self.second.loc

    @property
    def call_loc(self) -> SourceLoc | None:
        return None

    @property
    def events(self) -> tuple[int, ...]:
        """The first occurrence's second access, then its first access and both issues."""
        a, b = self.first, self.second
        return tuple(e for e in (self.occurrences[0], a.happen, a.issue, b.issue) if e >= 0)

    @property
    def saving(self) -> int:
        """A hazard has no saving (it is wrong, not slow)."""
        return 0


def find_hazards(index: TraceIndex) -> list[Hazard]:
    """Every hazard of the launch, one per pair of lines, by the first occurrence."""
    from kbdebug.analysis.oob import outside_commands  # oob builds on this module's Hazard

    acc = without(accesses_of(index), outside_commands(index))
    pairs = unordered_pairs(index, acc)
    if not len(pairs.first):
        return []
    tensors = header_tensors(index.header)
    loc_of = index.commands.loc.astype(np.int64)
    a_loc, b_loc = loc_of[acc.cmd[pairs.first]], loc_of[acc.cmd[pairs.second]]
    a_write, b_write = acc.write[pairs.first], acc.write[pairs.second]
    rule = np.where(a_write & b_write, 3, np.where(a_write, 1, 2))
    across = acc.pe[pairs.first] != acc.pe[pairs.second]
    second_event = _second_events(acc, pairs)
    n_locs = np.int64(len(index.locs) + 1)
    keys = (((a_loc + 1) * n_locs + b_loc + 1) * 2 + across) * 4 + rule
    _, first_of, inverse = np.unique(keys, return_index=True, return_inverse=True)
    by_group = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse))[:-1]
    out = []
    for g, members in enumerate(np.split(by_group, bounds)):
        code = f"KB20{int(rule[first_of[g]])}"
        out.append(_hazard(index, acc, pairs, members, second_event, code, tensors))
    out.sort(key=lambda h: (h.occurrences[0], h.rule))
    return out


def _second_events(acc: Accesses, pairs: Unordered) -> np.ndarray:
    """Per pair, the event where the later of its two accesses touched HBM (the second
    access's issue when neither did)."""
    a, b = acc.happen[pairs.first], acc.happen[pairs.second]
    later = np.maximum(a, b)
    return np.where(later >= 0, later, acc.issue[pairs.second])


def _access(index: TraceIndex, acc: Accesses, row: int) -> HazardAccess:
    return access_of(
        index, int(acc.cmd[row]), int(acc.pe[row]), int(acc.issue[row]), int(acc.happen[row])
    )


def access_of(index: TraceIndex, cmd: int, pe: int, issue: int, happen: int) -> HazardAccess:
    """Command ``cmd`` of ``pe`` as one access of a hazard or an out-of-bounds finding:
    issued at event ``issue``, touching HBM at event ``happen`` (-1: never)."""
    cm, fu = index.commands, index.futures
    future = int(cm.future[cmd])
    wait_loc = None
    if future >= 0 and int(fu.wait_begin[future]) >= 0:
        wait_loc = index.loc(int(fu.wait_loc[future]))
    return HazardAccess(
        pe=pe,
        op=index.string(int(cm.op[cmd])),
        loc=index.loc(int(cm.loc[cmd])),
        issue=issue,
        happen=happen,
        cycle=int(index.columns.time[happen]) if happen >= 0 else -1,
        wait_loc=wait_loc,
    )


def _hazard(index, acc, pairs, members, second_event, rule, tensors) -> Hazard:
    events = second_event[members]
    first_at = members[int(np.argmin(events))]
    a_row, b_row = int(pairs.first[first_at]), int(pairs.second[first_at])
    a, b = _access(index, acc, a_row), _access(index, acc, b_row)
    lo = int(max(acc.lo[a_row], acc.lo[b_row]))
    hi = int(min(acc.hi[a_row], acc.hi[b_row]))
    where = tensors.where(lo, hi - lo) if tensors is not None else address_text(lo, hi - lo)
    pes = np.unique(np.concatenate([acc.pe[pairs.first[members]], acc.pe[pairs.second[members]]]))
    across = a.pe != b.pe
    send = int(pairs.known_send[first_at])
    fix_loc, fix_pe, suggestion = _fix(index, a, b, send)
    outcome = _outcome(a, b) + _tally(acc, pairs, members)
    message = _message(a, b, where, outcome, len(members))
    occurrences = tuple(int(e) for e in np.unique(events)[:MAX_OCCURRENCES])
    identity = f"{rule}:{call_identity(index, b.loc)}&{call_identity(index, a.loc)}"
    line = f"{rule}:{b.loc.file}:{b.loc.line}" if b.loc is not None else f"{rule}:<unknown>:0"
    if len(pes) == 1 and pes[0] > 0:
        identity, line = identity + f":pe{pes[0]}", line + f":pe{pes[0]}"
    return Hazard(
        id=identity,
        rule=rule,
        title=HAZARD_RULES[rule],
        first=a,
        second=b,
        lo=lo,
        hi=hi,
        where=where,
        across_pes=across,
        outcome=outcome,
        message=message,
        suggestion=suggestion,
        fix_loc=fix_loc,
        fix_pe=fix_pe,
        pes=tuple(int(p) for p in pes),
        pe_pairs=_pe_pairs(acc, pairs, members),
        count=len(members),
        occurrences=occurrences,
        line_id=line,
    )


def _pe_pairs(acc: Accesses, pairs: Unordered, members: np.ndarray):
    """The distinct (first PE, second PE) of the pairs ``members``, sorted."""
    both = np.unique(acc.pe[pairs.first[members]] * (1 << 20) + acc.pe[pairs.second[members]])
    return tuple((int(k >> 20), int(k & ((1 << 20) - 1))) for k in both)


def _verb(access: HazardAccess) -> str:
    return "stores" if access.is_store else "loads"


def _noun(access: HazardAccess) -> str:
    return "store" if access.is_store else "load"


def _site(loc: SourceLoc | None) -> str:
    """``file:line``, with the kernel line that called the helper holding it."""
    if loc is None:
        return "?"
    return f"{loc} (called from {loc.caller})" if loc.caller is not None else str(loc)


def _at(access: HazardAccess, pe: bool) -> str:
    where = _site(access.loc)
    return f"on PE {access.pe} at {where}" if pe else f"at {where}"


def _outcome(a: HazardAccess, b: HazardAccess) -> str:
    """What this run did: which bytes the load read, or which store landed last."""
    if a.is_store and b.is_store:
        if a.happen < 0 or b.happen < 0:
            return "this run stopped before both stores landed"
        last = b if b.happen > a.happen else a
        order = "as issued" if last is b else "against the order they were issued"
        return f"this run the {_noun(last)} {_at(last, a.pe != b.pe)} landed last ({order})"
    store, load = (a, b) if a.is_store else (b, a)
    if load.happen < 0:
        return "this run stopped before the load read"
    new = store.happen >= 0 and store.happen < load.happen
    when = f"the load read at cycle {load.cycle:,}, the store "
    when += f"landed at cycle {store.cycle:,}" if store.happen >= 0 else "never landed"
    return f"this run read the {'new' if new else 'old'} bytes ({when})"


def _tally(acc: Accesses, pairs: Unordered, members: np.ndarray) -> str:
    """Of several pairs of the two lines, how often this run did what breaks the result
    (the first pair's outcome alone can read the new bytes while a later one read the
    old): ``; the load read the old bytes 1 of 4 times``."""
    n = len(members)
    if n < 2:
        return ""
    first, second = pairs.first[members], pairs.second[members]
    a_at, b_at = acc.happen[first], acc.happen[second]
    a_store, b_store = acc.write[first].astype(bool), acc.write[second].astype(bool)
    if a_store.all() and b_store.all():
        landed = (a_at >= 0) & (b_at >= 0)
        against = int((landed & (a_at > b_at)).sum())
        return f"; the first-issued store landed last {against:,} of {n:,} times"
    store_at = np.where(a_store, a_at, b_at)
    load_at = np.where(a_store, b_at, a_at)
    read = load_at >= 0
    old = int((read & ~((store_at >= 0) & (store_at < load_at))).sum())
    return f"; the load read the old bytes {old:,} of {n:,} times"


def _message(a: HazardAccess, b: HazardAccess, where: str, outcome: str, count: int) -> str:
    if a.pe != b.pe:
        text = (
            f"PE {a.pe} {_verb(a)} {where} at {_site(a.loc)} and PE {b.pe} {_verb(b)} them at "
            f"{_site(b.loc)} with no wait and message ordering the two"
        )
    elif a.loc == b.loc:  # one line, run again (a loop) before its last run is waited
        text = (
            f"PE {a.pe} {_verb(a)} {where} at {_site(a.loc)} and {_verb(b)} them again at the same "
            f"line before the last {_noun(a)} is waited"
        )
    else:
        text = (
            f"PE {a.pe} {_verb(a)} {where} at {_site(a.loc)}, then {_verb(b)} them at "
            f"{_site(b.loc)} before the {_noun(a)} is waited"
        )
    times = f" ({count:,} times)" if count > 1 else ""
    return f"{text}{times}; {outcome}"


def _spot(target: SourceLoc | None, handle: SourceLoc | None) -> tuple[SourceLoc | None, str]:
    """Where a wait of the handle issued at ``handle`` goes to come just before
    ``target``, and how to say it: ``target`` itself, or, when ``target`` is in a helper
    the handle was not issued in, the kernel line that calls that helper (where the
    kernel holds the handle)."""
    caller = target.caller if target is not None else None
    same = handle is not None and target is not None
    same = same and (handle.caller, handle.function) == (caller, target.function)
    if caller is None or same:
        return target, f"just before {_site(target)}"
    return caller, f"just before {caller} (the call into the helper holding {target})"


def _fix(index: TraceIndex, a: HazardAccess, b: HazardAccess, send: int):
    """(the line the wait goes just above, its PE, the suggestion): the latest point
    that still orders the pair."""
    if a.op.startswith("composite."):
        # A composite's own transfers have landed when the call returns: only a message
        # sent after it can order them for another PE (so only that case comes here).
        over = f"once the composite at {_site(a.loc)} has returned (its tiles have landed)"
    else:
        over = f"tl.wait the {_noun(a)} issued at {_site(a.loc)}"
    late = f" (its wait at {_site(a.wait_loc)} comes after: move it up)" if a.wait_loc else ""
    if a.pe == b.pe and a.loc == b.loc:
        return b.loc, b.pe, f"{over} before that line runs again{late}"
    if a.pe == b.pe:
        loc, where = _spot(b.loc, a.loc)
        return loc, b.pe, f"{over} {where}{late}"
    if send >= 0:
        loc, where = _spot(index.loc(int(index.commands.loc[send])), a.loc)
        text = (
            f"on PE {a.pe}, {over} {where.replace('just before', 'before its send at', 1)}, "
            f"the latest message PE {b.pe} waits for (directly or through other PEs) before "
            f"{_site(b.loc)}{late}"
        )
        return loc, a.pe, text
    loc, where = _spot(b.loc, None)
    text = (
        f"on PE {a.pe}, {over}, then tl.send PE {b.pe} a message (relayed by the PEs "
        f"between); on PE {b.pe}, tl.wait its tl.recv_async {where} (no message PE {a.pe} "
        f"sent after the {_noun(a)} reaches PE {b.pe} before it)"
    )
    return loc, b.pe, text
