"""The analysis: a critical-path model of every PE, the findings it supports and their savings.

Pure numpy over a :class:`~kbdebug.replay.Replay`'s index, never Textual; ``report``,
the app, ``export``, ``diff`` and ``sweep`` all read it, so they cannot disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbdebug.analysis.findings import RULES, Finding, find_all, matches
from kbdebug.analysis.model import PEBound, pe_bounds

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay

__all__ = ["RULES", "Finding", "PEBound", "find_all", "findings_of", "matches", "pe_bounds"]


def findings_of(replay: Replay) -> list[Finding]:
    """The findings of ``replay``'s trace, computed once and kept on the replay."""
    if replay.findings is None:
        replay.findings = find_all(replay)
    return replay.findings
