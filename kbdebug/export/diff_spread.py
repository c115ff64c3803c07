"""The diff's per-PE rows summarised across many PEs: the median and the lowest PE.

On a mesh, ``kbdebug diff`` would list every PE's efficiency and every channel's busy
share; from ``SPREAD_FROM`` PEs the text gives, per figure, its median over the PEs
and its lowest (``--per-pe`` and ``--json`` keep every row).
"""

from __future__ import annotations

import re
from statistics import median_low

from kbdebug.analysis.run_diff import Change
from kbdebug.export.report_spread import BUSY_SPREAD_FROM, SPREAD_FROM

_PE_ROW = re.compile(r"efficiency PE(\d+)")
#: ``pe12.dma_read0`` -> ``dma_read``: a channel's kind from its name.
_CHANNEL = re.compile(r"pe\d+\.(.*?)\d*")


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return median_low(known) if known else None


def _lowest(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def spread_headline(changes: list[Change]) -> list[Change]:
    """The headline with its per-PE efficiency rows made two (median, lowest PE) on a mesh."""
    per_pe = [c for c in changes if _PE_ROW.fullmatch(c.name)]
    if len(per_pe) < SPREAD_FROM:
        return changes
    n, better = len(per_pe), per_pe[0].better
    a, b = [c.a for c in per_pe], [c.b for c in per_pe]
    rows = [c for c in changes if c not in per_pe]
    rows.append(Change(f"efficiency, median of {n} PEs", _median(a), _median(b), "ratio", better))
    rows.append(Change("efficiency, lowest PE", _lowest(a), _lowest(b), "ratio", better))
    return rows


def spread_busy(changes: list[Change]) -> list[Change]:
    """Busy shares by channel kind (the median over its channels) when the mesh is large."""
    pes = {m.group(0).split(".")[0] for c in changes if (m := _CHANNEL.fullmatch(c.name))}
    if len(pes) < BUSY_SPREAD_FROM:
        return changes
    kinds: dict[str, list[Change]] = {}
    rest = []
    for c in changes:
        m = _CHANNEL.fullmatch(c.name)
        if m:
            kinds.setdefault(m.group(1), []).append(c)
        else:
            rest.append(c)
    for kind, members in kinds.items():
        name = f"{kind}, median of {len(members)} channels"
        a, b = _median([c.a for c in members]), _median([c.b for c in members])
        rest.append(Change(name, a, b, members[0].unit, members[0].better))
    return rest
