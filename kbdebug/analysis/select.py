"""What a CI gate selects: findings by selector, the order they are listed in, and whether a
run completed at all.

Selectors (``kbdebug report --fail-on``, comma lists or repeated):

``any``
    every finding and every hazard;
``hazard``
    every hazard (KB201-KB203, :mod:`kbdebug.analysis.hazards`): a hazard fails the
    gate whatever ``--min-saving`` says, having no saving;
``KB102`` (any case: ``kb102``)
    every finding (or hazard) of that rule;
``KB102:FILE::FUNCTION::TEXT#N`` (the edit-proof id, :mod:`kbdebug.analysis.identity`)
    that call site; quote it in a shell (``--fail-on 'KB102:qk.py::decode::tl.wait(kf)#0'``);
``KB102:FILE:LINE`` (the line form, still accepted and printed for humans)
    that line, until an edit moves it;
``'KB107 pipeline.py:54 ← attention.py:113'`` (the short id the report and app show;
``<-`` for the arrow; without ``← CALLER``, that helper line from every caller)
    that site, until an edit moves its line.

An id without its ``:peN`` suffix selects the site on every PE; ``:pe0`` is PE 0. A
finding held on many PEs is picked by ``:peN`` for each PE N where it holds.

A selector naming one site that picks nothing (:func:`unmatched`) lets the gate pass (the
finding was fixed) but is said on stderr: it may be a typo or an id an edit made stale.
A rule code, ``any`` or ``hazard`` picking nothing is a clean run and is not said.

A run that did not complete (kernel error, deadlock, interrupted, a trace cut off
without its footer, no events) has numbers and findings that cover only what ran,
so a gate cannot pass on it: :func:`incomplete` says why.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.analysis.identity import id_text

if TYPE_CHECKING:
    from kbdebug.analysis.findings import Finding
    from kbdebug.analysis.model import PEBound
    from kbdebug.replay.replay import Replay

__all__ = [
    "in_report_order",
    "incomplete",
    "matches",
    "names_one_site",
    "parse_selectors",
    "pes_text",
    "savings_by_pe",
    "share_of",
    "unmatched",
]

_RULE = re.compile(r"[Kk][Bb]\d+")
_PE_SUFFIX = re.compile(r":pe(\d+)$")
#: A short id as typed: ``KB107 pipeline.py:54``, then ``← attention.py:113`` or ``<-``.
_SHORT = re.compile(
    r"(?P<rule>[Kk][Bb]\d+)\s+(?P<where>[^\s:]+:\d+)(?:\s*(?:←|<-)\s*(?P<caller>[^\s:]+:\d+))?"
)
_OPEN, _CLOSE = "([{", ")]}"
#: A call site of an id: ``::FUNCTION::TEXT#N``, TEXT ending at the ``#N`` before an
#: ``@CALLER``, a ``:peN`` or the end.
_SITE = re.compile(r"(?P<head>::[^:@]*::)(?P<text>.+?)(?P<tail>#\d+(?=@|:pe\d+$|$))")


def _rules() -> dict[str, str]:
    from kbdebug.analysis.findings import RULES
    from kbdebug.analysis.hazards import HAZARD_RULES

    return {**RULES, **HAZARD_RULES}


def _normal(selector: str) -> str:
    """The selector with its rule code upper case, ``any`` lower case and a short id's
    spacing and arrow made one."""
    selector = selector.strip()
    if selector.lower() in ("any", "hazard"):
        return selector.lower()
    short = _SHORT.fullmatch(selector)
    if short:
        caller = f" ← {short['caller']}" if short["caller"] else ""
        return f"{short['rule'].upper()} {short['where']}{caller}"
    rule, sep, rest = selector.partition(":")
    # A call text typed in full is cut as the id cuts it (identity.MAX_TEXT).
    rest = _SITE.sub(lambda m: m["head"] + id_text(m["text"]) + m["tail"], rest)
    return (rule.upper() if _RULE.fullmatch(rule) else rule) + sep + rest


def _split(value: str) -> list[str]:
    """``value`` split at the commas outside brackets and quotes (a call text has commas)."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(value):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append(value[start:i])
            start = i + 1
    parts.append(value[start:])
    return parts


def parse_selectors(values: Iterable[str]) -> list[str]:
    """Every selector of ``values`` (each a comma list), normalised.

    Raises ValueError with one line naming the bad selector.
    """
    rules = _rules()
    out = []
    for value in values:
        for part in _split(value):
            selector = _normal(part)
            if not selector:
                raise ValueError(f"empty selector in {value!r}")
            if selector in ("any", "hazard"):
                out.append(selector)
                continue
            rule, sep, rest = selector.partition(":")
            short = _SHORT.fullmatch(selector)
            if short and short["rule"].upper() in rules:
                out.append(selector)
                continue
            if rule not in rules or (sep and not rest):
                raise ValueError(
                    f"bad selector {part.strip()!r}: expected 'any', 'hazard', a rule code "
                    f"({', '.join(rules)}), a finding id such as "
                    f"'KB102:kernel.py::decode::tl.wait(f)#0', RULE:FILE:LINE, or a short "
                    f"id such as 'KB107 pipeline.py:54 <- attention.py:113'"
                )
            out.append(selector)
    return out


def matches(finding: Finding, selector: str) -> bool:
    """Whether ``selector`` picks ``finding`` (or a hazard): ``any``, ``hazard``, a rule
    code, an id, a line id or a short id. The one test the gate, ``diff`` and the app use.

    Rule codes match in any case; an id without ``:peN`` picks that site on every PE,
    one with ``:peN`` a finding that holds on PE N.
    """
    from kbdebug.analysis.across_pes import short_id

    selector = _normal(selector)
    if selector in ("any", finding.rule):
        return True
    if selector == "hazard":
        from kbdebug.analysis.hazards import HAZARD_RULES

        return finding.rule in HAZARD_RULES
    if _SHORT.fullmatch(selector):
        mine = short_id(finding)
        return selector == mine or (" ← " not in selector and mine.startswith(selector + " ←"))
    pes = finding.pes or (finding.pe,)
    for form in (finding.id, finding.line_id):
        if not form:
            continue
        base = _PE_SUFFIX.sub("", form) if any(pes) else form
        if selector == base or selector in {f"{base}:pe{pe}" for pe in pes}:
            return True
    return False


def names_one_site(selector: str) -> bool:
    """Whether ``selector`` names one finding's site (an id, a line id or a short id), not
    a kind (``any``, ``hazard``, a rule code): one that matches nothing is stale or
    mistyped, where a rule with no finding is a clean run."""
    selector = _normal(selector)
    return selector not in ("any", "hazard") and bool(_SHORT.fullmatch(selector) or ":" in selector)


def unmatched(selectors: Iterable[str], findings: Iterable) -> list[str]:
    """The selectors of ``selectors`` that name one site and pick none of ``findings``
    (findings and hazards, whatever their saving), in order."""
    findings = list(findings)
    return [s for s in selectors if names_one_site(s) and not any(matches(f, s) for f in findings)]


def share_of(finding: Finding, bounds: Iterable[PEBound] = ()) -> float:
    """The finding's saving as a share of its PE's kernel time (``finding.share``, or
    computed from ``bounds`` when the finding does not carry it)."""
    if finding.share:
        return float(finding.share)
    for b in bounds:
        if b.pe == finding.pe and b.achieved > 0:
            return finding.saving / b.achieved
    return 0.0


def in_report_order(findings: Iterable[Finding], bounds: Iterable[PEBound] = ()) -> list[Finding]:
    """The one order findings are listed in (report, its exports, the pytest plugin):
    largest estimated saving first, then share, PE and id, so the order is stable."""
    bounds = list(bounds)
    return sorted(findings, key=lambda f: (-f.saving, -share_of(f, bounds), f.pe, f.id))


def savings_by_pe(findings: Iterable[Finding]) -> dict[int, int]:
    """Per PE, the sum of its findings' gains on that PE (a finding's ``saving`` is the
    launch's, with the line fixed on every PE: summed per PE it would count it twice)."""
    out: dict[int, int] = {}
    for f in findings:
        if f.pes and f.pe_savings:
            for pe, gain in zip(f.pes, f.pe_savings, strict=True):
                out[pe] = out.get(pe, 0) + gain
        else:
            out[f.pe] = out.get(f.pe, 0) + (f.pe_saving or f.saving)
    return out


def incomplete(replay: Replay) -> str | None:
    """Why the run of ``replay`` did not complete, None when it did.

    "kernel error on PE 0: ...", "deadlock on PE 1: ...", "interrupted",
    "the trace was cut off after N events (no footer)", "the trace holds no events".
    The text comes from the trace: escape it before printing it.
    """
    index = replay.index
    status = replay.status
    if index.n_events == 0:
        return "the trace holds no events" + (
            " (cut off before its first one)" if status == "truncated" else ""
        )
    if status == "ok":
        return None
    if status == "truncated":
        return (
            f"the trace was cut off after {index.n_events:,} events at cycle "
            f"{index.end_time:,} (no footer: the writer was killed or never ended)"
        )
    footer = index.footer or {}
    error = " ".join(str(footer.get("error") or "").split())
    if status == "interrupted":
        return (
            error
            if error.startswith("interrupted")
            else f"interrupted{': ' if error else ''}{error}"
        )
    kinds = {"error": Kind.KERNEL_ERROR, "deadlock": Kind.DEADLOCK}
    what = {"error": "kernel error"}.get(status, status)
    kind = kinds.get(status)
    pes: list[int] = []
    if kind is not None:
        c = index.columns
        pes = sorted({int(p) for p in c.pe[np.flatnonzero(c.kind == kind)]})
    where = f" on {pes_text(pes)}" if pes else ""
    loc = footer.get("error_loc")
    at = f" at {loc}" if loc is not None and str(loc) not in error else ""
    # Said once: "deadlock on PEs 0, 1 at cycle 4: ...", not "...: deadlock at cycle 4: ...";
    # "kernel error on PE 0: x.py:7: ...", not "...: PE 0, x.py:7: ...".
    if len(pes) == 1 and error.startswith(f"PE {pes[0]}, "):
        error = error[len(f"PE {pes[0]}, ") :]
    detail = f": {error}" if error else ""
    if error.startswith(f"{what} "):
        detail = error[len(what) :]
    return f"{what}{where}{detail}{at}"


def pes_text(pes: list[int]) -> str:
    """The PEs a failure names: ``PE 3``, ``PEs 0, 1``; past eight, the first eight and ``...``."""
    listed = ", ".join(map(str, pes[:8])) + (", ..." if len(pes) > 8 else "")
    return f"PE{'s' if len(pes) > 1 else ''} {listed}"
