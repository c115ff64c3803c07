"""The analysis: a critical-path model of every PE, the findings it supports and their savings.

Pure numpy over a :class:`~kbdebug.replay.Replay`'s index, never Textual; ``report``,
the app, ``export``, ``diff`` and ``sweep`` all read it, so they cannot disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbdebug.analysis.align import LineMap
from kbdebug.analysis.findings import RULES, Finding, find_all, matches
from kbdebug.analysis.identity import call_identity, finding_id, with_stable_ids
from kbdebug.analysis.model import PEBound, pe_bounds
from kbdebug.analysis.select import incomplete, parse_selectors, share_of

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay

__all__ = [
    "RULES",
    "Finding",
    "LineMap",
    "PEBound",
    "call_identity",
    "find_all",
    "finding_id",
    "findings_of",
    "incomplete",
    "matches",
    "parse_selectors",
    "pe_bounds",
    "share_of",
    "with_stable_ids",
]


def findings_of(replay: Replay) -> list[Finding]:
    """The findings of ``replay``'s trace, computed once and kept on the replay."""
    if replay.findings is None:
        replay.findings = find_all(replay)
    return replay.findings
