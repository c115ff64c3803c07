"""``kbdebug diff`` as a JSON document (schema ``kbdebug.diff/2``), beside the report's
(:mod:`kbdebug.export.report_json`).

The comparison itself lives in :mod:`kbdebug.analysis.run_diff`, which the app's
compare mode reads too, so the two cannot disagree.
"""

from __future__ import annotations

from typing import Any

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.run_diff import Change, RunDiff
from kbdebug.analysis.summary import Summary
from kbdebug.export.report_hazards import hazard_json

__all__ = ["SCHEMA", "to_json"]

SCHEMA = "kbdebug.diff/2"


# --- JSON -------------------------------------------------------------------------------


def _change_json(change: Change) -> dict[str, Any]:
    return {
        "name": change.name,
        "a": change.a,
        "b": change.b,
        "delta": change.delta,
        "percent": change.percent,
        "unit": change.unit,
        "better": change.better,
        "verdict": change.verdict,
    }


def _loc_json(loc: SourceLoc | None) -> dict[str, Any] | None:
    return None if loc is None else {"file": loc.file, "line": loc.line, "function": loc.function}


def _finding_json(f: Finding) -> dict[str, Any]:
    return {
        "id": f.id,
        "line_id": f.line_id,
        "rule": f.rule,
        "title": f.title,
        "pe": f.pe,
        "loc": _loc_json(f.loc),
        "saving": f.saving,
        "share": f.share,
        "message": f.message,
    }


def _run_json(path: str, s: Summary, incomplete: str | None) -> dict[str, Any]:
    return {
        "trace": path,
        "kernel": s.kernel,
        "status": s.status,
        "complete": incomplete is None,
        "incomplete": incomplete,
        "events": s.n_events,
        "end_time": s.end_time,
        "check": None if s.check is None else s.check.json(),
    }


def to_json(diff: RunDiff, a_path: str, b_path: str) -> dict[str, Any]:
    """The diff as a ``kbdebug.diff/2`` document.

    ::

        {
          "schema": "kbdebug.diff/2",
          "a": {"trace", "kernel", "status", "complete": bool,
                "incomplete": str | null,     # why the run did not complete
                "events", "end_time",
                "check": null | {"ok": bool,  # the output check its trace records
                                 "message": str | null,      # what failed, one line
                                 "block": str | null}},      # "O[16:32, :]"
          "b": {...},
          "comparable": bool,                 # both completed: verdicts are given
          "warnings": [str],                  # e.g. A and B ran different kernels
          "headline": [change], "busy": [change],
          "hazards": {"fixed": [hazard],      # KB201-KB204 A has and B has not,
                      "new": [hazard],        # B has and A has not (a regression),
                      "still": [{"a": hazard, "b": hazard}]},  # both, paired by rule,
                                              # side of the PE boundary and both lines
                                              # (aligned across edits)
          "findings": {"added": [finding], "removed": [finding], "kept": [id]},
          "stall_by_line": [{"file", "line",          # A's place (null: only in B)
                             "b_file", "b_line",      # B's place (null: only in A)
                             "where",                 # "qk.py:28 → qk.py:29"
                             "function", "a_waits", "b_waits", **change}],
          "regression": bool, "regressions": [str]    # "B did not complete: ..."
        }

    where a change is ``{"name", "a", "b", "delta", "percent", "unit", "better",
    "verdict"}`` (numbers or null; verdict "" when either run did not complete), and
    a finding ``{"id", "line_id", "rule", "title", "pe", "loc", "saving", "share",
    "message"}``, matched by ``id`` (edit-proof); a hazard is an entry of
    ``kbdebug.report/4``'s ``hazards``.
    """
    return {
        "schema": SCHEMA,
        "a": _run_json(a_path, diff.a, diff.a_incomplete),
        "b": _run_json(b_path, diff.b, diff.b_incomplete),
        "comparable": diff.comparable,
        "warnings": list(diff.warnings),
        "headline": [_change_json(c) for c in diff.headline],
        "busy": [_change_json(c) for c in diff.busy],
        "hazards": {
            "fixed": [hazard_json(h) for h in diff.hazards.fixed],
            "new": [hazard_json(h) for h in diff.hazards.new],
            "still": [{"a": hazard_json(a), "b": hazard_json(b)} for a, b in diff.hazards.still],
        },
        "findings": {
            "added": [_finding_json(f) for f in diff.added],
            "removed": [_finding_json(f) for f in diff.removed],
            "kept": list(diff.kept),
        },
        "stall_by_line": [
            {
                "file": row.file,
                "line": row.line,
                "b_file": row.b_file,
                "b_line": row.b_line,
                "where": row.where,
                "function": row.function,
                "a_waits": row.a_waits,
                "b_waits": row.b_waits,
                **_change_json(row.stall),
            }
            for row in diff.stall_by_line
        ],
        "regression": diff.regression,
        "regressions": list(diff.regressions),
    }
