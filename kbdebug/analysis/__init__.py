"""The analysis: the dataflow model of the whole launch, its findings, hazards, summary and
alignment.

Pure numpy over a :class:`~kbdebug.replay.Replay`'s index, never Textual. One
:class:`Analysis` per opened trace holds every figure (model, bounds, findings, hazards,
summary, stall by line); ``report``, ``diff``, ``compare``, ``sweep``, ``export`` and the app are
handed it, so they cannot disagree.
"""

from kbdebug.analysis.align import LineMap
from kbdebug.analysis.findings import RULES, Finding, find_all
from kbdebug.analysis.hazards import HAZARD_RULES, Hazard, find_hazards
from kbdebug.analysis.identity import call_identity, finding_id, with_stable_ids
from kbdebug.analysis.model import PEBound, pe_bounds
from kbdebug.analysis.results import Analysis, analyse
from kbdebug.analysis.select import incomplete, matches, parse_selectors, share_of

__all__ = [
    "HAZARD_RULES",
    "RULES",
    "Analysis",
    "Finding",
    "Hazard",
    "LineMap",
    "PEBound",
    "analyse",
    "call_identity",
    "find_all",
    "find_hazards",
    "finding_id",
    "incomplete",
    "matches",
    "parse_selectors",
    "pe_bounds",
    "share_of",
    "with_stable_ids",
]
