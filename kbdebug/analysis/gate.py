"""The CI gate of ``report --fail-on`` and ``diff``: which findings fail a run, and the exit status.

A finding fails the gate when a selector (:mod:`kbdebug.analysis.select`) picks it and
its estimated saving reaches ``min_saving`` of its PE's kernel time (of the launch's on
a mesh, where a finding's saving is the launch's); a hazard (KB2xx) fails it whenever a
selector picks it (``any``, ``hazard``, its rule or id): it has no saving, its result is
wrong; a run that did not complete fails whatever the selector (its findings cover only
what ran). A selector naming one site (an id, a line id, a short id) that picks no
finding nor hazard passes the gate (the finding was fixed) but is said on stderr
(:meth:`Gate.unmatched_lines`): a typo or a stale id would otherwise never fail CI.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kbdebug.analysis.findings import MIN_SHARE, Finding
from kbdebug.analysis.hazards import Hazard
from kbdebug.analysis.model import PEBound
from kbdebug.analysis.select import matches, share_of, unmatched
from kbdebug.safe_text import escape

#: Exit statuses: the report was printed and the gate passed; the gate matched a
#: finding; bad input; the gate was asked of a run that did not complete.
EXIT_OK, EXIT_GATE, EXIT_BAD_INPUT, EXIT_INCOMPLETE = 0, 1, 2, 3
#: Default --min-saving: a finding must be worth this share of its PE's kernel time
#: (the share findings are reported from).
MIN_SAVING = MIN_SHARE
#: Matched findings the gate names on stderr.
GATE_LINES = 20


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) made one space."""
    return " ".join(str(text).split())


def _short(loc) -> str:
    """``file:line`` of a location, escaped (``?`` when unknown)."""
    return "?" if loc is None else escape(f"{loc.file}:{loc.line}", 512)


def percent(share: float) -> str:
    """``18 %``; ``<1 %`` for a share that rounds to nothing but is not zero."""
    if 0 < share < 0.005:
        return "<1 %"
    return f"{100 * share:.0f} %"


class Gate:
    """The outcome of ``--fail-on``: the exit status and what made it."""

    def __init__(
        self,
        selectors: list[str],
        min_saving: float,
        matched: list[tuple[Finding, float]],
        below: list[tuple[Finding, float]],
        reason: str | None,
        hazards: list[Hazard] | None = None,
        unmatched: list[str] | None = None,
    ):
        self.selectors = selectors
        self.min_saving = min_saving
        self.matched = matched
        self.below = below
        self.reason = reason
        #: The hazards a selector picked (each fails the gate, whatever its size).
        self.hazards = hazards or []
        #: The selectors naming one site that picked no finding nor hazard.
        self.unmatched = unmatched or []

    @classmethod
    def check(
        cls,
        selectors: list[str],
        min_saving: float,
        findings: list[Finding],
        bounds: list[PEBound],
        reason: str | None,
        hazards: Sequence[Hazard] = (),
    ) -> Gate:
        matched, below, picked = [], [], []
        if selectors:
            for f in findings:
                if any(matches(f, s) for s in selectors):
                    share = share_of(f, bounds)
                    (matched if share >= min_saving else below).append((f, share))
            picked = [h for h in hazards if any(matches(h, s) for s in selectors)]
        # What ran of an incomplete run says nothing of the sites it never reached.
        missed = unmatched(selectors, [*findings, *hazards]) if reason is None else []
        return cls(selectors, min_saving, matched, below, reason, picked, missed)

    @property
    def exit(self) -> int:
        if not self.selectors:
            return EXIT_OK
        if self.reason is not None:
            return EXIT_INCOMPLETE
        return EXIT_GATE if self.matched or self.hazards else EXIT_OK

    def explain(self) -> list[str]:
        """Lines for stderr: why the gate failed (none when it passed or was not asked)."""
        if self.exit == EXIT_INCOMPLETE:
            return [f"--fail-on: the run did not complete: {escape(one_line(self.reason))}"]
        if self.exit != EXIT_GATE:
            return []
        lines = []
        selectors = escape(",".join(self.selectors), 512)
        if self.hazards:
            k = len(self.hazards)
            lines.append(
                f"--fail-on {selectors} matched {k} hazard{'s' if k != 1 else ''} "
                "(results that depend on timing or bytes outside their tensor):"
            )
            for h in self.hazards[:GATE_LINES]:
                pes = f"PE {h.first.pe} and PE {h.second.pe}" if h.across_pes else f"PE {h.pe}"
                # One access outside its tensor (KB204) is no pair: its line once.
                at = _short(h.second.loc)
                if h.first is not h.second:
                    at = f"{_short(h.first.loc)} then {at}"
                lines.append(f"  {escape(h.id, 512)}  ({escape(h.title, 64)}, {at}, {pes})")
            if k > GATE_LINES:
                lines.append(f"  ... {k - GATE_LINES} more (--json lists all)")
        n = len(self.matched)
        if n or not self.hazards:
            lines.append(
                f"--fail-on {selectors} matched {n} finding{'s' if n != 1 else ''} worth at "
                f"least {percent(self.min_saving)} of its PE's time:"
            )
        for f, share in self.matched[:GATE_LINES]:
            lines.append(
                f"  {escape(f.id, 512)}  ({escape(f.line_id or '-', 512)}, PE{f.pe}, "
                f"est. saving {f.saving:,} cycles, {percent(share)})"
            )
        if n > GATE_LINES:
            lines.append(f"  ... {n - GATE_LINES} more (--json lists all)")
        if self.below:
            lines.append(
                f"  ({len(self.below)} more matched below --min-saving {percent(self.min_saving)}"
                " and do not count)"
            )
        return lines

    def unmatched_lines(self, trace: str, option: str = "--fail-on") -> list[str]:
        """A line per selector that names one site and matched nothing in ``trace``."""
        shown = escape(str(trace), 512)
        return [
            f"{option} {escape(s, 512)} matched no finding in {shown} (fixed, or a typo? "
            f"'kbdebug report {shown}' lists the ids)"
            for s in self.unmatched
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "selectors": list(self.selectors),
            "min_saving": self.min_saving,
            "failed": self.exit != EXIT_OK,
            "exit": self.exit,
            "matched": [f.id for f, _ in self.matched] + [h.id for h in self.hazards],
            "below_min_saving": [f.id for f, _ in self.below],
        }
