"""Out-of-bounds accesses (KB204): a load or store that reaches outside the tensor it starts in.

A trace of format 1.5 names its tensors (``Trace.tensors``, base, shape and dtype). A
load or store moves one contiguous byte range; when the tensor holding its first byte
does not hold its last (it runs past that tensor's end into the next tensor or into
unnamed bytes), or it starts in no tensor but runs into one, it read or wrote bytes its
line did not mean to: a wrong index, a page past the table's end. That is wrong, not
slow: it is reported with the hazards (any one fails ``--fail-on any`` or ``hazard``),
and no performance finding is built on such an access (a read past a tensor's end is
no read-back of the bytes it happened to hit). A trace that names no tensors gives none.

One hazard stands for every such access of one line, on every PE: the line, the PEs,
the slice of the tensor it started in (the bytes it meant), and the bytes outside it,
named as a slice where another tensor holds them.
"""

from __future__ import annotations

import bisect

import numpy as np

from emulator.trace.digests import TensorDef
from kbdebug.analysis.hazard_order import accesses_of
from kbdebug.analysis.hazards import MAX_OCCURRENCES, Hazard, HazardAccess, access_of
from kbdebug.analysis.identity import call_identity
from kbdebug.replay.slices import Tensors, address_text, header_tensors
from kbdebug.replay.tables import TraceIndex

RULE = "KB204"
TITLE = "out-of-bounds"


def _started_in(tensors: Tensors, starts: list[int], lo: int, hi: int) -> TensorDef | None:
    """The tensor an access [lo, hi) meant: the innermost holding its first byte, else
    (it starts in unnamed bytes) the first tensor it runs into."""
    held = tensors.containing(lo, 1)
    if held is not None:
        return held
    i = bisect.bisect_left(starts, lo)
    if i < len(starts) and starts[i] < hi:
        return tensors.tensors[i]
    return None


def outside_commands(index: TraceIndex) -> dict[int, tuple[TensorDef, int, int]]:
    """Per access that reaches outside the tensor it starts in, or that lies outside the
    tensor its line's other accesses on its PE mostly lie in: (that tensor, the first
    byte outside it, the end of the bytes outside). Empty without named tensors."""
    tensors = header_tensors(index.header)
    if tensors is None or not len(tensors):
        return {}
    acc = accesses_of(index)
    rows = outside_ranges(tensors, acc.lo, acc.hi)
    # A line's loads and its stores are two lines here; a composite call's accesses (its
    # operands, read and written by design) none.
    loc = np.asarray(index.commands.loc, dtype=np.int64)[acc.cmd]
    line = (acc.pe * np.int64(len(index.locs) + 1) + loc + 1) * 2 + acc.write
    line = np.where(acc.composite >= 0, -1, line)
    rows.update(stray_ranges(tensors, line, acc, rows))
    return {int(acc.cmd[row]): found for row, found in rows.items()}


def _holders(tensors: Tensors, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per range, the position in ``tensors.tensors`` of the innermost tensor holding all
    of it; -1 where none does."""
    begin = np.array([t.addr for t in tensors.tensors], dtype=np.int64)
    end = begin + np.array([t.nbytes for t in tensors.tensors], dtype=np.int64)
    nearest = np.searchsorted(begin, lo, side="right") - 1
    at = np.maximum(nearest, 0)
    out = np.where((nearest >= 0) & (end[at] >= hi), nearest, -1)
    # The nearest tensor starting before a range holds most; one named around it (a
    # view inside a larger tensor) is looked up one by one.
    reach = np.maximum.accumulate(end)
    position = {id(t): i for i, t in enumerate(tensors.tensors)}
    for row in np.flatnonzero((out < 0) & (nearest >= 0) & (reach[at] >= hi)).tolist():
        held = tensors.containing(int(lo[row]), int(hi[row] - lo[row]))
        if held is not None:
            out[row] = position[id(held)]
    return out


def stray_ranges(
    tensors: Tensors, line: np.ndarray, acc, known: dict
) -> dict[int, tuple[TensorDef, int, int]]:
    """Per access (row of ``acc``) wholly outside the tensor X that holds most of the
    accesses of its ``line`` (a key per PE, issue line and kind; -1: none): (X, its bytes).

    An index one tile too far starts at X's end, so it never starts in X: it is seen by
    its line, which reads or writes X on most issues, all of them before (or after) the
    stray ones. A line whose accesses spread over several tensors, none holding more
    than half of them, or that leaves X and comes back, walks them on purpose."""
    out: dict[int, tuple[TensorDef, int, int]] = {}
    if len(line) < 3:
        return out
    holder = _holders(tensors, acc.lo, acc.hi)
    groups, group = np.unique(line, return_inverse=True)
    totals = np.bincount(group, minlength=len(groups))
    held = holder >= 0
    pairs, counts = np.unique(
        group[held] * np.int64(len(tensors) + 1) + holder[held], return_counts=True
    )
    best = np.zeros(len(groups), dtype=np.int64)
    most = np.full(len(groups), -1, dtype=np.int64)
    # Per line, the tensor holding the most of its accesses (pairs sorted by line).
    for key, count in zip(pairs.tolist(), counts.tolist(), strict=True):
        g, t = divmod(key, len(tensors) + 1)
        if count > best[g]:
            best[g], most[g] = count, t
    dominant = np.where((2 * best > totals) & (groups >= 0), most, -1)
    # An index running off X's end (or start) strays only after (or before) the issues
    # inside X; a line that leaves X between them reads the other bytes on purpose.
    meant = dominant[group]
    in_x = (meant >= 0) & (holder == meant)
    never = np.iinfo(np.int64).max
    first_in = np.full(len(groups), never, dtype=np.int64)
    last_in = np.full(len(groups), -1, dtype=np.int64)
    np.minimum.at(first_in, group[in_x], acc.issue[in_x])
    np.maximum.at(last_in, group[in_x], acc.issue[in_x])
    away = (meant >= 0) & ~in_x
    between = away & (acc.issue > first_in[group]) & (acc.issue < last_in[group])
    mixed = np.zeros(len(groups), dtype=bool)
    mixed[group[between]] = True
    meant = np.where(mixed[group], -1, meant)
    for row in np.flatnonzero((meant >= 0) & (holder != meant)).tolist():
        if row in known:
            continue
        x = tensors.tensors[int(meant[row])]
        lo, hi = int(acc.lo[row]), int(acc.hi[row])
        if x.addr < hi and lo < x.addr + x.nbytes:  # partly inside X: not wholly astray
            continue
        out[row] = (x, lo, hi)
    return out


def outside_ranges(
    tensors: Tensors, lo: np.ndarray, hi: np.ndarray
) -> dict[int, tuple[TensorDef, int, int]]:
    """Per range [lo[i], hi[i]) that reaches outside the tensor it starts in (or starts in
    unnamed bytes and runs into a tensor): (that tensor, the bytes outside it)."""
    out: dict[int, tuple[TensorDef, int, int]] = {}
    if not len(lo) or not len(tensors):
        return out
    # Most ranges lie inside the tensor starting nearest before them, or in bytes no
    # tensor reaches: both settled for all ranges at once; the rest one by one.
    starts = [t.addr for t in tensors.tensors]
    begin = np.array(starts, dtype=np.int64)
    end = begin + np.array([t.nbytes for t in tensors.tensors], dtype=np.int64)
    reach = np.maximum.accumulate(end)
    nearest = np.searchsorted(begin, lo, side="right") - 1
    at = np.maximum(nearest, 0)
    before = nearest >= 0
    held = before & (end[at] >= hi)
    covered = before & (reach[at] > lo)
    following = np.append(begin, np.iinfo(np.int64).max)[nearest + 1]
    unnamed = ~covered & (following >= hi)
    for row in np.flatnonzero(~held & ~unnamed).tolist():
        a, b = int(lo[row]), int(hi[row])
        if tensors.containing(a, b - a) is not None:
            continue
        meant = _started_in(tensors, starts, a, b)
        if meant is None:  # nothing named near it: bytes the trace does not name
            continue
        if a < meant.addr:  # starts below it, runs into it
            out[row] = (meant, a, meant.addr)
        else:
            out[row] = (meant, meant.addr + meant.nbytes, b)
    return out


def out_of_bounds(index: TraceIndex) -> list[Hazard]:
    """Every line whose loads or stores reach outside their tensor, one hazard each (by
    line and PE side), ordered by the first such access."""
    outside = outside_commands(index)
    if not outside:
        return []
    tensors = header_tensors(index.header)
    cm = index.commands
    by_line: dict[int, list[int]] = {}
    for cmd in sorted(outside, key=lambda c: int(cm.issue[c])):
        by_line.setdefault(int(cm.loc[cmd]), []).append(cmd)
    out = [_hazard(index, tensors, outside, cmds) for cmds in by_line.values()]
    out.sort(key=lambda h: h.occurrences[0])
    return out


def _access(index: TraceIndex, cmd: int) -> HazardAccess:
    cm = index.commands
    store = "store" in index.string(int(cm.op[cmd]))
    happen = int(cm.complete[cmd] if store else cm.grant[cmd])
    return access_of(index, cmd, int(cm.pe[cmd]), int(cm.issue[cmd]), happen)


def _hazard(index: TraceIndex, tensors, outside, cmds: list[int]) -> Hazard:
    cm = index.commands
    first = cmds[0]
    access = _access(index, first)
    meant, out_lo, out_hi = outside[first]
    lo, hi = int(cm.addr[first]), int(cm.addr[first] + cm.nbytes[first])
    beyond = "past the end of" if out_lo >= meant.addr else "before the start of"
    other = tensors.containing(out_lo, out_hi - out_lo)
    into = f", in {tensors.where(out_lo, out_hi - out_lo)}" if other is not None else ""
    if other is None:
        into = ", into bytes no tensor names"
    where = f"{address_text(out_lo, out_hi - out_lo)} {beyond} {meant.name}{into}"
    verb = "stores" if access.is_store else "loads"
    pes = tuple(sorted({int(cm.pe[c]) for c in cmds}))
    on = f"PE {access.pe}" if len(pes) == 1 else f"PEs {', '.join(map(str, pes[:8]))}"
    count = len(cmds)
    times = f" ({count:,} times on {on})" if count > 1 else ""
    what = "read" if not access.is_store else "wrote"
    if lo >= meant.addr + meant.nbytes or hi <= meant.addr:
        message = (
            f"{_stray_message(index, tensors, first, meant, access, where)}{times}; the run "
            f"{what} bytes the line did not mean to"
        )
    else:
        inside_lo, inside_hi = max(lo, meant.addr), min(hi, meant.addr + meant.nbytes)
        meant_text = tensors.where(inside_lo, inside_hi - inside_lo)
        if meant_text.startswith("0x"):
            meant_text = f"{meant.name} ({meant_text})"
        message = (
            f"{on} {verb} {hi - lo:,} bytes at "
            f"{_site(access.loc)} starting in {meant_text}: {out_hi - out_lo:,} of them lie "
            f"{where}{times}; the run {what} bytes the line did not mean to"
        )
    suggestion = (
        f"check the address computed at {_site(access.loc)} (an index or a page past the "
        f"end of the tensor it means to read or write): keep the whole range inside one "
        f"tensor"
    )
    events = sorted(
        {
            int(cm.complete[c] if "store" in index.string(int(cm.op[c])) else cm.grant[c])
            for c in cmds
        }
        - {-1}
    ) or [int(cm.issue[first])]
    identity = f"{RULE}:{call_identity(index, access.loc)}"
    line = f"{RULE}:{access.loc.file}:{access.loc.line}" if access.loc else f"{RULE}:<unknown>:0"
    if len(pes) == 1 and pes[0] > 0:
        identity, line = identity + f":pe{pes[0]}", line + f":pe{pes[0]}"
    return Hazard(
        id=identity,
        rule=RULE,
        title=TITLE,
        first=access,
        second=access,
        lo=out_lo,
        hi=out_hi,
        where=where,
        across_pes=False,
        outcome=f"the run {what} {out_hi - out_lo:,} bytes outside {meant.name}",
        message=message,
        suggestion=suggestion,
        fix_loc=access.loc,
        fix_pe=access.pe,
        pes=pes,
        pe_pairs=tuple((p, p) for p in pes),
        count=count,
        occurrences=tuple(events[:MAX_OCCURRENCES]),
        line_id=line,
    )


def _stray_message(index: TraceIndex, tensors: Tensors, cmd: int, meant, access, where) -> str:
    """``PE 0's load at k.py:96 reads X on iterations 0-4; on iteration 5 it reads ...``:
    the issues of the line on that PE inside the tensor it meant, then the stray one."""
    cm = index.commands
    same = np.flatnonzero(
        (np.asarray(cm.pe) == cm.pe[cmd]) & (np.asarray(cm.loc) == cm.loc[cmd]) & (cm.issue >= 0)
    )
    same = same[np.argsort(cm.issue[same], kind="stable")]
    iteration = int(np.flatnonzero(same == cmd)[0])
    inside = [
        i
        for i, c in enumerate(same.tolist())
        if tensors.containing(int(cm.addr[c]), max(int(cm.nbytes[c]), 1)) == meant
    ]
    lo = min(int(cm.addr[same[i]]) for i in inside)
    hi = max(int(cm.addr[same[i]] + cm.nbytes[same[i]]) for i in inside)
    span = tensors.where(lo, hi - lo)
    span = meant.name if span.startswith("0x") else span
    verb = "writes" if access.is_store else "reads"
    return (
        f"PE {access.pe}'s {access.op} at {_site(access.loc)} {verb} {span} on "
        f"{_iterations(inside)}; on iteration {iteration} it {verb} {where}"
    )


def _iterations(numbers: list[int]) -> str:
    """``iterations 0-5``, ``iterations 0-2, 4`` or ``iteration 3`` (issues of a line)."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and runs[-1][1] == n - 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    parts = [f"{a}" if a == b else f"{a}\u2013{b}" for a, b in runs[:4]]
    more = ", ..." if len(runs) > 4 else ""
    word = "iteration" if numbers and len(numbers) == 1 else "iterations"
    return f"{word} {', '.join(parts)}{more}"


def _site(loc) -> str:
    if loc is None:
        return "?"
    return f"{loc} (called from {loc.caller})" if loc.caller is not None else str(loc)


__all__ = ["RULE", "out_of_bounds", "outside_commands", "outside_ranges", "stray_ranges"]
