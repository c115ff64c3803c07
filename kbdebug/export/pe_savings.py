"""What the findings save per PE (within its gap to its bound) and at the launch (KB111).

Report's per-PE table and ``report --json`` show the same figures: a PE's findings'
gains on it, summed and at most its gap to its critical-path bound (gains may overlap,
and no placement of its issues ends it sooner). KB111 moves work between PEs: its saving
is the launch's end, not a PE's own critical path (the PE's bound counts the work it
has), so it stands beside the launch's bound instead of in any PE's figure.
"""

from __future__ import annotations

from kbdebug.analysis.findings import Finding
from kbdebug.analysis.model import PEBound
from kbdebug.analysis.select import savings_by_pe

__all__ = ["LAUNCH_RULES", "launch_saving", "pe_savings_within_gap"]

#: Rules whose saving is the launch's (work moved between PEs), never one PE's.
LAUNCH_RULES = frozenset({"KB111"})


def pe_savings_within_gap(findings: list[Finding], bounds: list[PEBound]) -> dict[int, int]:
    """Per PE, what its findings but the launch's (KB111) save on it together, at most
    its gap to its bound."""
    out = savings_by_pe([f for f in findings if f.rule not in LAUNCH_RULES])
    for b in bounds:
        if b.pe in out:
            out[b.pe] = min(out[b.pe], max(b.achieved - b.bound, 0))
    return out


def launch_saving(findings: list[Finding]) -> int:
    """What the launch-level findings (KB111) save of the launch's end: the largest (one
    even split of the work; its findings across PEs share that saving)."""
    return max((f.saving for f in findings if f.rule in LAUNCH_RULES), default=0)
