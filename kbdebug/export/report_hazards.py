"""Hazards in the report: the text section ``report`` prints before the findings, and each
hazard as JSON (``kbdebug report --json``'s ``hazards``). Trace strings are escaped in
the text and left as recorded in the JSON."""

from __future__ import annotations

import os
from typing import Any

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.hazards import Hazard, HazardAccess, hazards_are
from kbdebug.safe_text import escape


def _loc(loc: SourceLoc | None) -> str:
    """``file:line``, `` ← file:line`` of the kernel line that called the helper holding it."""
    if loc is None:
        return "?"
    text = escape(f"{loc.file}:{loc.line}", 512)
    if loc.caller is not None:
        text += " ← " + escape(f"{os.path.basename(loc.caller.file)}:{loc.caller.line}", 512)
    return text


def _side(access: HazardAccess) -> str:
    when = "never (the run stopped first)" if access.cycle < 0 else f"cycle {access.cycle:,}"
    verb = "landed" if access.is_store else "read HBM"
    return f"PE {access.pe} {escape(access.op, 32)} at {_loc(access.loc)}, {verb} {when}"


def hazard_lines(hazards: list[Hazard]) -> list[str]:
    """The hazards section: a title, then per hazard its rule, both accesses, the bytes,
    what happened, the fix and its id; "hazards: none" when there are none."""
    if not hazards:
        return ["", "hazards: none (every pair of accesses to the same bytes is ordered)"]
    n = len(hazards)
    lines = [
        "",
        f"hazards ({n}: {hazards_are(h.rule for h in hazards)}; any fails --fail-on any or hazard;",
        "  their lines get no performance finding until they are fixed):",
    ]
    for h in hazards:
        where = f"PE {h.first.pe} and PE {h.second.pe}" if h.across_pes else f"PE {h.first.pe}"
        on = "" if len(h.pes) <= 2 else f" (PEs {', '.join(map(str, h.pes))})"
        times = f"{h.count:,} time{'s' if h.count != 1 else ''}"
        lines += [
            f"  {escape(h.rule, 16)} {escape(h.title, 64)}  on {where}{on}; {times}",
        ]
        # An access outside its tensor (KB204) is one access, not a pair.
        sides = (
            [("access", h.first)]
            if h.first is h.second
            else [("first", h.first), ("second", h.second)]
        )
        lines += [f"      {name + ':':<7} {_side(side)}" for name, side in sides]
        lines += [
            f"      bytes: {escape(h.where, 256)}",
            f"      {escape(h.message)}",
            f"      fix: {escape(h.suggestion)}",
            f"      id: {escape(h.id, 1024)}  [{escape(h.line_id, 512)}]",
        ]
    return lines


def _loc_json(loc: SourceLoc | None) -> dict[str, Any] | None:
    return None if loc is None else {"file": loc.file, "line": loc.line, "function": loc.function}


def _access_json(access: HazardAccess) -> dict[str, Any]:
    return {
        "pe": access.pe,
        "op": access.op,
        "loc": _loc_json(access.loc),
        "issue_event": access.issue,
        "event": access.happen if access.happen >= 0 else None,
        "cycle": access.cycle if access.cycle >= 0 else None,
        "wait_loc": _loc_json(access.wait_loc),
    }


def hazard_json(h: Hazard) -> dict[str, Any]:
    """One hazard as the ``hazards`` entry of ``kbdebug.report/4``."""
    return {
        "id": h.id,
        "line_id": h.line_id,
        "rule": h.rule,
        "title": h.title,
        "across_pes": h.across_pes,
        "pes": list(h.pes),
        "pe_pairs": [list(pair) for pair in h.pe_pairs],
        "first": _access_json(h.first),
        "second": _access_json(h.second),
        "bytes": {"lo": h.lo, "hi": h.hi, "where": h.where},
        "outcome": h.outcome,
        "count": h.count,
        "message": h.message,
        "suggestion": h.suggestion,
        "fix": {"pe": h.fix_pe, "loc": _loc_json(h.fix_loc)},
        "events": list(h.occurrences),
    }
