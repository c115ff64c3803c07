"""The findings as a SARIF 2.1.0 log (``kbdebug report --format sarif``), for code scanning.

One run; its driver lists one rule per KB code (name, help, default level: hazards
KB2xx are errors, whole-kernel rules notes, the rest warnings). Each finding is a
result at its line (``uriBaseId`` ``SRCROOT``: the trace's paths are relative to the
launch root, the folder holding the project's pyproject.toml or .git), with the
kernel line that called the helper and the other lines the fix changes as related
locations, the estimated saving in its message and ``properties``, and the finding's
edit-proof id as its ``partialFingerprints``, so a finding keeps its identity while
unrelated lines move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from emulator.trace.schema import SourceLoc
from kbdebug import __version__
from kbdebug.analysis.select import share_of
from kbdebug.export import review

if TYPE_CHECKING:
    from kbdebug.analysis import Analysis
    from kbdebug.analysis.finding import Finding
    from kbdebug.analysis.hazards import Hazard

VERSION = "2.1.0"
SCHEMA_URI = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
#: The base the results' relative paths resolve against: the checkout's root in CI.
SRCROOT = "SRCROOT"
#: The key of the edit-proof id in ``partialFingerprints``.
FINGERPRINT = "kbdebugFindingId/v1"
#: Characters of a message from the trace kept at most.
MESSAGE_CHARS = 4096


def to_sarif(analysis: Analysis, trace: str) -> dict[str, Any]:
    """The SARIF log of ``analysis`` (the trace ``trace``): hazards first, then the
    findings, largest estimated saving first."""
    rules = review.all_rules(analysis)
    index = {code: i for i, (code, _) in enumerate(rules)}
    results = [_hazard_result(h, index) for h in review.hazards(analysis)]
    results += [_result(f, analysis, index) for f in review.ranked(analysis)]
    reason = analysis.incomplete
    invocation: dict[str, Any] = {"executionSuccessful": reason is None}
    if reason is not None:
        invocation["toolExecutionNotifications"] = [
            {"level": "error", "message": {"text": f"the run did not complete: {_bounded(reason)}"}}
        ]
    bound, efficiency = analysis.launch_efficiency
    summary = analysis.summary
    return {
        "$schema": SCHEMA_URI,
        "version": VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "kbdebug",
                        "version": __version__,
                        "rules": [_rule(code, name) for code, name in rules],
                    }
                },
                "originalUriBaseIds": {
                    SRCROOT: {
                        "description": {
                            "text": "The launch root: the folder at or above the launch file "
                            "holding pyproject.toml, setup.py, setup.cfg or .git."
                        }
                    }
                },
                "invocations": [invocation],
                "results": results,
                "properties": {
                    "trace": trace,
                    "kernel": summary.kernel,
                    "status": summary.status,
                    "endCycle": int(summary.end_time),
                    # A run that did not complete claims no bound (it ended where it stopped).
                    "launchBound": None if reason is not None else int(bound),
                    "launchEfficiency": efficiency,
                },
            }
        ],
    }


def _rule(code: str, name: str) -> dict[str, Any]:
    help_ = review.rule_help(code, name)
    kind = "correctness" if review.is_hazard_rule(code) else "performance"
    return {
        "id": code,
        "name": name,
        "shortDescription": {"text": help_.short},
        "fullDescription": {"text": help_.full},
        "help": {"text": help_.full, "markdown": f"**{code} {name}**: {help_.full}"},
        "defaultConfiguration": {"level": review.level(code)},
        "properties": {"tags": [kind, "kbdebug"], "precision": "high"},
    }


def _result(f: Finding, analysis: Analysis, index: dict[str, int]) -> dict[str, Any]:
    text = (
        f"{f.rule} {f.title} on {review.pes_text(f)}: {f.message}; fix: {f.suggestion}; "
        f"{review.saving_text(f, analysis)}"
    )
    result: dict[str, Any] = {
        "ruleId": f.rule,
        "ruleIndex": index[f.rule],
        "level": review.level(f.rule),
        "message": {"text": _bounded(text)},
        "partialFingerprints": {FINGERPRINT: f.id},
        "properties": {
            "findingId": f.id,
            "lineId": f.line_id,
            "saving": int(f.saving),
            "share": round(share_of(f, analysis.bounds), 6),
            "peSaving": int(f.pe_saving),
            "pes": list(f.pes or (f.pe,)),
            "count": int(f.count),
            "stall": int(f.stall),
            "suggestion": _bounded(f.suggestion),
        },
    }
    if review.in_source(f.loc):
        result["locations"] = [_location(f.loc)]
    related = []
    caller = review.caller_of(f)
    if review.in_source(caller):
        related.append(_location(caller, "the kernel line that calls the helper"))
    for other in f.also:
        if review.in_source(other):
            related.append(_location(other, "another line the same fix changes"))
    if related:
        result["relatedLocations"] = [{"id": i + 1, **r} for i, r in enumerate(related)]
    return result


def _hazard_result(h: Hazard, index: dict[str, int]) -> dict[str, Any]:
    """A hazard at its second access, the first access and the fix's line related."""
    text = f"{h.rule} {h.title}: {h.message}; fix: {h.suggestion}"
    result: dict[str, Any] = {
        "ruleId": h.rule,
        "ruleIndex": index[h.rule],
        "level": review.level(h.rule),
        "message": {"text": _bounded(text)},
        "partialFingerprints": {FINGERPRINT: h.id},
        "properties": {
            "findingId": h.id,
            "lineId": h.line_id,
            "pes": list(h.pes),
            "acrossPes": h.across_pes,
            "bytes": _bounded(h.where),
            "outcome": _bounded(h.outcome),
            "count": int(h.count),
            "suggestion": _bounded(h.suggestion),
        },
    }
    if review.in_source(h.second.loc):
        result["locations"] = [_location(h.second.loc)]
    related = [
        _location(loc, what)
        for loc, what in (
            (h.first.loc, f"the first access ({h.first.op} on PE {h.first.pe})"),
            (h.fix_loc, f"the wait to add goes above this line (PE {h.fix_pe})"),
        )
        if review.in_source(loc) and h.first is not h.second  # KB204: one access, no wait
    ]
    if related:
        result["relatedLocations"] = [{"id": i + 1, **r} for i, r in enumerate(related)]
    return result


def _location(loc: SourceLoc, message: str | None = None) -> dict[str, Any]:
    physical = {
        "artifactLocation": {"uri": quote(loc.file, safe="/"), "uriBaseId": SRCROOT},
        "region": {"startLine": int(loc.line)},
    }
    out: dict[str, Any] = {"physicalLocation": physical}
    if loc.function:
        out["logicalLocations"] = [{"name": loc.function, "kind": "function"}]
    if message is not None:
        out["message"] = {"text": message}
    return out


def _bounded(text: str) -> str:
    text = str(text)
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"
