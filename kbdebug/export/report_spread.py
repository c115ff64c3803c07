"""The report's per-PE and busy tables summarised across many PEs: min, median, max.

On a mesh, one row per PE and per channel is more than a screen holds and hides the
PE that matters; each figure is given as its spread over the PEs instead, with the
PEs outside it named (``--per-pe`` prints every row).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import median_low

from kbdebug.analysis.model import PEBound
from kbdebug.analysis.summary import ChannelBusy
from kbdebug.safe_text import escape

#: PEs from which the per-PE table is summarised (fewer: a row per PE).
SPREAD_FROM = 9
#: PEs from which the busy table is summarised (each PE has four channels or more).
BUSY_SPREAD_FROM = 5
#: A PE's figure this far from the median (a share of the median) is named.
OUTSIDE = 0.05
#: PEs named outside the spread, at most.
NAMED = 6


def _outside(values: Sequence[tuple[int, float]], show: Callable[[float], str]) -> str:
    """``PE 63 108,975; PE 0 100,100``: the PEs furthest from the median, when past OUTSIDE."""
    middle = median_low([v for _, v in values])
    scale = abs(middle) or 1.0
    far = sorted(
        ((pe, v) for pe, v in values if abs(v - middle) > OUTSIDE * scale),
        key=lambda pv: (-abs(pv[1] - middle), pv[0]),
    )
    if not far:
        return ""
    named = "; ".join(f"PE {pe} {show(v)}" for pe, v in far[:NAMED])
    more = f"; {len(far) - NAMED} more" if len(far) > NAMED else ""
    return f"  outside: {named}{more}"


def spread_row(name: str, values: Sequence[tuple[int, float]], show: Callable[[float], str]):
    """One figure over the PEs: ``name  min X (PE a)  median Y  max Z (PE b)``."""
    if len({v for _, v in values}) == 1:
        return [name, f"{show(values[0][1])} on every PE", "", ""]
    low = min(values, key=lambda pv: (pv[1], pv[0]))
    high = max(values, key=lambda pv: (pv[1], -pv[0]))
    middle = median_low([v for _, v in values])
    return [
        name,
        f"min {show(low[1])} (PE {low[0]})",
        f"median {show(middle)}",
        f"max {show(high[1])} (PE {high[0]})" + _outside(values, show),
    ]


def pe_spread(bounds: list[PEBound], savings: dict[int, int]) -> list[list[str]]:
    """The per-PE table as spreads: kernel time, bound, efficiency, the findings' savings."""
    rows = [
        spread_row("achieved", [(b.pe, b.achieved) for b in bounds], lambda v: f"{v:,.0f}"),
        spread_row("bound", [(b.pe, b.bound) for b in bounds], lambda v: f"{v:,.0f}"),
    ]
    done = [(b.pe, b.efficiency) for b in bounds if b.efficiency is not None]
    if done:
        rows.append(spread_row("efficiency", done, lambda v: f"{v:.1%}"))
    unfinished = [b.pe for b in bounds if b.efficiency is None]
    if unfinished:
        rows.append(["did not complete", f"{len(unfinished)} PEs", "", ""])
    saved = [(b.pe, savings.get(b.pe, 0)) for b in bounds]
    rows.append(spread_row("findings save", saved, lambda v: f"~{v:,.0f}"))
    return rows


def busy_spread(channels: list[ChannelBusy]) -> list[list[str]]:
    """The busy table as spreads, one row per channel kind over every PE's channels."""
    by_kind: dict[str, list[ChannelBusy]] = {}
    for ch in channels:
        by_kind.setdefault(ch.kind or "channel", []).append(ch)
    rows = []
    for kind, members in by_kind.items():
        per_pe: dict[int, float] = {}
        for ch in members:  # a PE's channels of one kind (its read channels) averaged
            per_pe.setdefault(ch.pe, 0.0)
            per_pe[ch.pe] += ch.share / sum(1 for c in members if c.pe == ch.pe)
        label = f"{escape(kind, 32)} ({len(members)} channel{'s' if len(members) != 1 else ''})"
        rows.append(spread_row(label, sorted(per_pe.items()), lambda v: f"{v:.1%}"))
    return rows
