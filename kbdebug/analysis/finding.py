"""Finding and WaitCause: what a diagnosis reports, the rule codes and a finding's ids."""

from __future__ import annotations

from dataclasses import dataclass

from emulator.trace.schema import SourceLoc
from kbdebug.analysis import identity
from kbdebug.replay.index import TraceIndex

#: Rule code -> short name.
RULES = {
    "KB101": "blocking-load",
    "KB102": "wait-right-after-issue",
    "KB103": "queued-behind",
    "KB104": "wait-before-use",
    "KB106": "below-bound",
    "KB107": "prefetch-too-shallow",
    "KB108": "store-waited-early",
    "KB109": "recv-waited-before-work",
    "KB110": "composite-restarted",
    "KB111": "imbalance",
    "KB112": "send-issued-late",
    "KB113": "hbm-contention",
}
#: Work between a load's issue and its wait below this share of transfer + latency is
#: none (KB102 says "with no work in between").
IMMEDIATE_MAX_WORK = 0.1


@dataclass(frozen=True)
class Finding:
    """One diagnosis: what serialised, the line to change, and what fixing it is worth."""

    #: Edit-proof id: rule, file, function, the tl call's text and its ordinal, ":peN" for
    #: PE N > 0 (``kbdebug.analysis.identity``); stable while unrelated lines move.
    id: str
    #: Rule code, e.g. "KB101".
    rule: str
    #: Short rule name, e.g. "blocking-load".
    title: str
    pe: int
    #: Cycle span the finding covers.
    start: int
    end: int
    #: Event indices involved, in order; the first is where the debugger jumps.
    events: tuple[int, ...]
    #: The line to change (inside a helper when the tl call is in one).
    loc: SourceLoc | None
    #: One line saying what happened.
    message: str
    #: One line saying what to change.
    suggestion: str
    #: Estimated cycles the launch's end moves earlier when this is fixed (the same line's
    #: finding fixed on every PE that has it), re-timed on the whole mesh.
    saving: int = 0
    #: ``saving`` as a share of the PE's kernel time (0..1).
    share: float = 0.0
    #: Estimated cycles this PE's own kernel saves when this is fixed.
    pe_saving: int = 0
    #: Other lines the same fix changes (loads issued together, both late).
    also: tuple[SourceLoc, ...] = ()
    #: Occurrences aggregated into this finding (loads, waits; 1 for KB106).
    count: int = 1
    #: Stalled cycles of the waits involved (0 where the rule is not about waits).
    stall: int = 0
    #: The kernel line that called the helper holding ``loc`` (None outside helpers).
    call_loc: SourceLoc | None = None
    #: ``RULE:FILE:LINE[:peN]``: the line-based form, for humans and older selectors.
    line_id: str = ""
    #: The PEs where it holds, sorted (one finding for a line's bug on every PE:
    #: :mod:`kbdebug.analysis.across_pes`); empty for one PE's own finding (``pe``).
    pes: tuple[int, ...] = ()
    #: Each PE's own gain, in ``pes`` order (``pe_saving`` is their median).
    pe_savings: tuple[int, ...] = ()


@dataclass(frozen=True)
class WaitCause:
    """One stalled wait: its stall, the part no placement could avoid, and who is charged."""

    future: int
    pe: int
    #: WAIT_BEGIN event index.
    event: int
    stall: int
    #: Stall beyond the earliest arrival the model allows.
    avoidable: int
    #: Rule the avoidable stall is charged to (None when it is unexplained, or zero).
    rule: str | None


def line_id(rule: str, loc: SourceLoc | None, pe: int) -> str:
    """``RULE:FILE:LINE``, with ``:peN`` appended for PE N > 0."""
    where = f"{loc.file}:{loc.line}" if loc is not None else "<unknown>:0"
    return f"{rule}:{where}" + (f":pe{pe}" if pe else "")


def finding_id(rule: str, index: TraceIndex, loc: SourceLoc | None, pe: int) -> str:
    """The edit-proof id (see ``kbdebug.analysis.identity.finding_id``)."""
    return identity.finding_id(rule, index, loc, pe)
