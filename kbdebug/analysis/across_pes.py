"""One finding per bug across the mesh: a line's findings on many PEs made one, saying where.

The rules diagnose each PE's program; the same rule at the same site (its edit-proof
id without ``:peN``) on several PEs is one bug, and fixing its line fixes it on every
PE, so it is one finding that names the PEs where it holds (``on 64 of 64 PEs``,
``on PEs 3, 17``), its saving on the launch's end and each PE's own gain (min, median,
max). Its ``id`` is the site's (no ``:peN``): a selector with ``:peN`` still picks it
when it holds on PE N.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import replace
from statistics import median_low

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.finding import Finding

__all__ = ["group_across_pes", "short_id", "where_text"]

#: Events a finding held on many PEs keeps (each PE's first ones first): enough for the
#: debugger to stop on every PE, bounded on 256.
MAX_EVENTS = 512
_PE_SUFFIX = re.compile(r":pe\d+$")


def _base(ident: str, pe: int) -> str:
    return _PE_SUFFIX.sub("", ident) if pe else ident


def short_id(finding: Finding) -> str:
    """``KB107 pipeline.py:54 ← attention.py:113``: the rule, the line's file name and
    line, and the kernel line that called the helper holding it (when in one)."""
    text = f"{finding.rule} {_short_loc(finding.loc)}"
    caller = finding.call_loc or (finding.loc.caller if finding.loc is not None else None)
    return f"{text} ← {_short_loc(caller)}" if caller is not None else text


def _short_loc(loc: SourceLoc | None) -> str:
    if loc is None:
        return "<unknown>:0"
    return f"{os.path.basename(loc.file) or loc.file}:{loc.line}"


def where_text(finding: Finding, n_pes: int) -> str:
    """``on 64 of 64 PEs``, ``on PEs 3, 17``, ``on PE 0``: where a finding holds."""
    pes = finding.pes or (finding.pe,)
    if n_pes > 1 and len(pes) == n_pes:
        return f"on {len(pes)} of {n_pes} PEs"
    if len(pes) == 1:
        return f"on PE {pes[0]}"
    if len(pes) > 8:
        return f"on {len(pes)} of {n_pes} PEs ({_ranges(pes)})"
    return "on PEs " + ", ".join(map(str, pes))


def _ranges(pes: tuple[int, ...]) -> str:
    """``0-7, 12, 40-63``: sorted PE numbers as runs."""
    runs: list[list[int]] = []
    for pe in pes:
        if runs and pe == runs[-1][1] + 1:
            runs[-1][1] = pe
        else:
            runs.append([pe, pe])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def group_across_pes(
    findings: Iterable[Finding],
    ends: dict[int, int] | None = None,
    start: int = 0,
    floor: float = 0.0,
) -> list[Finding]:
    """One finding per (rule, site) over every PE, in the order of their first events.

    Its saving is the launch's (the line fixed on every PE: the rules give each PE's
    finding that figure), its ``pe_savings`` each PE's own gain in ``pes`` order;
    counts and stalls add up; the message and suggestion are the first PE's. KB106's
    per-PE gaps are made the launch's with ``ends`` (each PE's end cycle; the launch
    starts at ``start``): the launch
    ends when its last PE does, so closing the gaps of PEs that do not end last saves
    nothing; such a KB106 whose launch saving is under ``floor`` (a share of the
    launch's length) is dropped.
    """
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.rule, _base(f.id, f.pe)), []).append(f)
    out = []
    for (_, base), members in groups.items():
        members = _one_per_pe(members)
        first = members[0]
        pes = tuple(f.pe for f in members)
        each = max(1, MAX_EVENTS // len(members))
        events = sorted({e for f in members for e in f.events[:each]})
        out.append(
            replace(
                first,
                id=base,
                line_id=_base(first.line_id, first.pe) if first.line_id else "",
                pe=pes[0],
                pes=pes,
                start=min(f.start for f in members),
                end=max(f.end for f in members),
                events=tuple(events),
                saving=max(f.saving for f in members),
                share=max(f.share for f in members),
                pe_saving=median_low([f.pe_saving for f in members]),
                pe_savings=tuple(f.pe_saving for f in members),
                count=sum(f.count for f in members),
                stall=sum(f.stall for f in members),
            )
        )
    if ends:
        out = [g for g in (_launch_gap(f, ends, start, floor) for f in out) if g is not None]
    out.sort(key=lambda f: (f.events[0] if f.events else f.start, f.id))
    return out


def _one_per_pe(members: list[Finding]) -> list[Finding]:
    """``members`` sorted by PE, one each: two findings of one rule and site on one PE
    (one line's occurrences split by the rule) are that PE's one finding, their counts
    and stalls added, its gains the larger (the line's edit covers both), never a PE
    listed twice."""
    by_pe: dict[int, Finding] = {}
    for f in sorted(members, key=lambda f: (f.pe, -f.saving)):
        seen = by_pe.get(f.pe)
        if seen is None:
            by_pe[f.pe] = f
            continue
        by_pe[f.pe] = replace(
            seen,
            start=min(seen.start, f.start),
            end=max(seen.end, f.end),
            events=tuple(sorted({*seen.events, *f.events})),
            count=seen.count + f.count,
            stall=seen.stall + f.stall,
            pe_saving=max(seen.pe_saving, f.pe_saving),
        )
    return list(by_pe.values())


def _launch_gap(f: Finding, ends: dict[int, int], start: int, floor: float) -> Finding | None:
    """On a mesh: a finding's share of the launch's time, and KB106's saving on the
    launch's end, its PEs' gaps closed and the others as they ended (other rules'
    savings are the launch's already)."""
    if len(ends) < 2:
        return f
    end = max(ends.values())
    length = end - start
    if f.rule != "KB106":  # on a mesh a share is of the launch's time, as the saving is
        return replace(f, share=f.saving / max(length, 1))
    gaps = dict(zip(f.pes or (f.pe,), f.pe_savings or (f.pe_saving,), strict=True))
    saving = end - max(e - gaps.get(pe, 0) for pe, e in ends.items())
    if saving <= 0 or saving < floor * length:
        return None
    return replace(f, saving=saving, share=saving / max(length, 1))
