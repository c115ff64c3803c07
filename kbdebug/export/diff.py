"""The comparison of two runs: every headline number side by side, findings and stalls matched.

Pure: it takes the :class:`~kbdebug.replay.summary.Summary` and the findings of
each trace (as ``kbdebug report`` computes them) and returns a
:class:`RunDiff`; nothing here opens a file or prints.

Matching: PEs by number, channels and engines by name (``pe0.dma_read0``),
findings by id, stalls by wait source line (file and line; the function is for
display). A regression is B ending later than A, or B having a finding A has not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.findings import Finding
from kbdebug.replay.summary import Summary

SCHEMA = "kbdebug.diff/1"

#: How a number is better: it went down, it went up, or neither (busy shares, counts).
LOWER, HIGHER, NEUTRAL = "lower", "higher", "neutral"


@dataclass(frozen=True)
class Change:
    """One number in both runs; ``None`` where a run does not have it."""

    name: str
    a: float | None
    b: float | None
    #: "cycles", "count", "ratio" (0..1, efficiency) or "share" (0..1, busy share).
    unit: str
    better: str = NEUTRAL

    @property
    def delta(self) -> float | None:
        """b - a, None unless both runs have the number."""
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def percent(self) -> float | None:
        """The change relative to a, in percent; None when a is missing or zero."""
        delta = self.delta
        return None if delta is None or not self.a else 100.0 * delta / self.a

    @property
    def verdict(self) -> str:
        """ "better", "worse" or "same" by ``better``; "" for a neutral number."""
        delta = self.delta
        if self.better == NEUTRAL or delta is None:
            return ""
        if delta == 0:
            return "same"
        return "better" if (delta < 0) == (self.better == LOWER) else "worse"


@dataclass(frozen=True)
class LineChange:
    """The stall of the waits at one source line in both runs (0 stall, 0 waits if absent)."""

    file: str
    line: int
    function: str
    #: Stalled cycles at the line in A and B.
    stall: Change
    a_waits: int
    b_waits: int

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class RunDiff:
    """Everything ``kbdebug diff`` shows, for text or JSON."""

    a: Summary
    b: Summary
    #: end cycle, stall cycles, dma_read_count, then overlap efficiency per PE.
    headline: list[Change]
    #: Busy share of each channel and engine busy in either run.
    busy: list[Change]
    added: list[Finding]
    removed: list[Finding]
    kept: list[str]
    stall_by_line: list[LineChange]
    #: Why B is a regression (empty when it is not).
    regressions: list[str] = field(default_factory=list)

    @property
    def regression(self) -> bool:
        return bool(self.regressions)


def compare(
    a: Summary, b: Summary, a_findings: Iterable[Finding], b_findings: Iterable[Finding]
) -> RunDiff:
    """Compare run A (before) with run B (after)."""
    a_findings, b_findings = list(a_findings), list(b_findings)
    headline = [
        Change("end cycle", a.end_time, b.end_time, "cycles", LOWER),
        Change("stall cycles", a.stall_cycles, b.stall_cycles, "cycles", LOWER),
        Change(
            "dma_read_count",
            a.counts.get("dma_read_count"),
            b.counts.get("dma_read_count"),
            "count",
        ),
    ]
    a_pes = {pe.pe: pe for pe in a.pes}
    b_pes = {pe.pe: pe for pe in b.pes}
    for pe in sorted(a_pes.keys() | b_pes.keys()):
        headline.append(
            Change(
                f"overlap efficiency PE{pe}",
                a_pes[pe].efficiency if pe in a_pes else None,
                b_pes[pe].efficiency if pe in b_pes else None,
                "ratio",
                HIGHER,
            )
        )
    busy = _busy(a, b)
    a_ids = {f.id: f for f in a_findings}
    b_ids = {f.id: f for f in b_findings}
    added = [f for f in b_findings if f.id not in a_ids]
    removed = [f for f in a_findings if f.id not in b_ids]
    kept = [f.id for f in b_findings if f.id in a_ids]
    regressions = []
    if b.end_time > a.end_time:
        regressions.append(f"B ends {b.end_time - a.end_time:,} cycles later than A")
    if added:
        regressions.append(f"B adds {len(added)} finding{'s' if len(added) != 1 else ''}")
    return RunDiff(
        a=a,
        b=b,
        headline=headline,
        busy=busy,
        added=added,
        removed=removed,
        kept=kept,
        stall_by_line=_lines(a, b),
        regressions=regressions,
    )


def _busy(a: Summary, b: Summary) -> list[Change]:
    a_ch = {ch.name: ch for ch in a.channels}
    b_ch = {ch.name: ch for ch in b.channels}
    # Keep A's channel order, then channels only B has.
    names = [ch.name for ch in a.channels] + [n for n in b_ch if n not in a_ch]
    out = []
    for name in names:
        x, y = a_ch.get(name), b_ch.get(name)
        if not ((x and x.busy_cycles) or (y and y.busy_cycles)):
            continue
        out.append(Change(name, x.share if x else None, y.share if y else None, "share", NEUTRAL))
    return out


def _lines(a: Summary, b: Summary) -> list[LineChange]:
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for side, summary in (("a", a), ("b", b)):
        for stall in summary.stall_by_line:
            loc = stall.loc or SourceLoc("<unknown>", 0, "")
            row = rows.setdefault(
                (loc.file, loc.line),
                {"function": loc.function, "a": 0, "b": 0, "a_waits": 0, "b_waits": 0},
            )
            row[side] += stall.stall_cycles
            row[f"{side}_waits"] += stall.waits
    out = [
        LineChange(
            file,
            line,
            row["function"],
            Change(f"{file}:{line}", row["a"], row["b"], "cycles", LOWER),
            row["a_waits"],
            row["b_waits"],
        )
        for (file, line), row in rows.items()
    ]
    # Largest stall in either run first; then by place, for a stable order.
    out.sort(key=lambda r: (-max(r.stall.a or 0, r.stall.b or 0), r.file, r.line))
    return out


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


def _finding_json(f: Finding) -> dict[str, Any]:
    return {
        "id": f.id,
        "rule": f.rule,
        "title": f.title,
        "pe": f.pe,
        "cycles": f.saving,
        "message": f.message,
    }


def _run_json(path: str, s: Summary) -> dict[str, Any]:
    return {
        "trace": path,
        "kernel": s.kernel,
        "status": s.status,
        "events": s.n_events,
        "end_time": s.end_time,
    }


def to_json(diff: RunDiff, a_path: str, b_path: str) -> dict[str, Any]:
    """The diff as a ``kbdebug.diff/1`` document.

    ::

        {
          "schema": "kbdebug.diff/1",
          "a": {"trace", "kernel", "status", "events", "end_time"}, "b": {...},
          "headline": [change], "busy": [change],
          "findings": {"added": [finding], "removed": [finding], "kept": [id]},
          "stall_by_line": [{"file", "line", "function", "a_waits", "b_waits",
                             **change}],
          "regression": bool, "regressions": [str]
        }

    where a change is ``{"name", "a", "b", "delta", "percent", "unit", "better",
    "verdict"}`` (numbers or null) and a finding ``{"id", "rule", "title", "pe",
    "cycles", "message"}``.
    """
    return {
        "schema": SCHEMA,
        "a": _run_json(a_path, diff.a),
        "b": _run_json(b_path, diff.b),
        "headline": [_change_json(c) for c in diff.headline],
        "busy": [_change_json(c) for c in diff.busy],
        "findings": {
            "added": [_finding_json(f) for f in diff.added],
            "removed": [_finding_json(f) for f in diff.removed],
            "kept": list(diff.kept),
        },
        "stall_by_line": [
            {
                "file": row.file,
                "line": row.line,
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
