"""Two runs' numbers compared: the diff ``kbdebug diff`` prints and the app's compare mode heads.

Pure (no Textual, no printing). :func:`compare` takes each run's
:class:`~kbdebug.analysis.summary.Summary`, findings and bounds and returns a
:class:`RunDiff`.

Matching: PEs by number, channels and engines by name (``pe0.dma_read0``),
findings by their edit-proof id (:mod:`kbdebug.analysis.identity`: an edit that
moves lines does not make a finding "removed" and "added"; a kernel file that B keeps
under another name, paired by the LineMap, is the same file), stalls by wait source
line through a :class:`~kbdebug.analysis.align.LineMap` of the two runs' embedded
sources (``qk.py:28 → qk.py:29``), or by file and line without one.

A regression is B not completing (kernel error, deadlock, interrupted, truncated,
no events), or, when both completed, B ending later than A, or B having a finding A
has not while not ending earlier (a fix often uncovers a smaller serialisation that
the larger one hid: B is then faster, and its new findings are listed, not a
regression), or B having a hazard A has not, or B's output check failing (its trace
records the verdict) where A's did not (wrong, not slow: whatever the speed). A B that
fixes a hazard of A and adds none is no regression for its speed or its findings.
Hazards are paired by rule and by their two lines aligned through the LineMap (an edit
that moves them keeps the hazard "still there"). When either run did not complete, no
number gets a "better" or "worse" verdict: a run cut short ends early and stalls
little, which is no improvement. When A did not complete and B did, nothing else is a regression.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.align import LineMap
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.hazards import Hazard
from kbdebug.analysis.model import PEBound
from kbdebug.analysis.summary import Summary

__all__ = [
    "HIGHER",
    "LOWER",
    "NEUTRAL",
    "Change",
    "HazardGroups",
    "LineChange",
    "RunDiff",
    "compare",
    "id_in_b",
    "kernel_warnings",
    "pair_hazards",
]

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
    """The stall of the waits at one source line in both runs (0 stall, 0 waits if absent).

    ``file``/``line`` are A's, ``b_file``/``b_line`` where the same line is in B (they
    differ when an edit moved it); a line only one run has is None in the other.
    """

    file: str | None
    line: int | None
    function: str
    #: Stalled cycles at the line in A and B.
    stall: Change
    a_waits: int
    b_waits: int
    b_file: str | None = None
    b_line: int | None = None

    def __post_init__(self) -> None:
        if self.b_file is None and self.b_line is None and self.file is not None:
            # Matched by file and line (no alignment): the same place in both runs.
            object.__setattr__(self, "b_file", self.file)
            object.__setattr__(self, "b_line", self.line)

    @property
    def a_where(self) -> str | None:
        return None if self.file is None else f"{self.file}:{self.line}"

    @property
    def b_where(self) -> str | None:
        return None if self.b_file is None else f"{self.b_file}:{self.b_line}"

    @property
    def where(self) -> str:
        """``qk.py:28``, ``qk.py:28 → qk.py:29`` when it moved, ``- →`` / ``→ -`` for a
        line only one run has."""
        a, b = self.a_where, self.b_where
        if a == b:
            return a or "-"
        return f"{a or '-'} → {b or '-'}"


@dataclass(frozen=True)
class HazardGroups:
    """The hazards (KB2xx) of A and B paired by rule and aligned lines."""

    #: A's hazards B no longer has.
    fixed: list[Hazard] = field(default_factory=list)
    #: B's hazards A did not have.
    new: list[Hazard] = field(default_factory=list)
    #: (A's, B's) of each hazard both runs have.
    still: list[tuple[Hazard, Hazard]] = field(default_factory=list)


@dataclass(frozen=True)
class RunDiff:
    """Everything ``kbdebug diff`` shows, for text or JSON."""

    a: Summary
    b: Summary
    #: end cycle, stall cycles, dma_read_count, then efficiency (bound / achieved) per PE.
    headline: list[Change]
    #: Busy share of each channel and engine busy in either run.
    busy: list[Change]
    added: list[Finding]
    removed: list[Finding]
    kept: list[str]
    stall_by_line: list[LineChange]
    #: Why B is a regression (empty when it is not).
    regressions: list[str] = field(default_factory=list)
    #: Why each run did not complete (None when it did).
    a_incomplete: str | None = None
    b_incomplete: str | None = None
    #: Things to know before reading the numbers (the runs ran different kernels).
    warnings: list[str] = field(default_factory=list)
    #: The hazards fixed in B, new in B and still there.
    hazards: HazardGroups = field(default_factory=HazardGroups)

    @property
    def regression(self) -> bool:
        return bool(self.regressions)

    @property
    def comparable(self) -> bool:
        """Both runs completed, so their numbers compare."""
        return self.a_incomplete is None and self.b_incomplete is None


def compare(
    a: Summary,
    b: Summary,
    a_findings: Iterable[Finding],
    b_findings: Iterable[Finding],
    *,
    a_bounds: Iterable[PEBound] | None = None,
    b_bounds: Iterable[PEBound] | None = None,
    lines: LineMap | None = None,
    a_incomplete: str | None = None,
    b_incomplete: str | None = None,
    warnings: Iterable[str] = (),
    a_hazards: Iterable[Hazard] = (),
    b_hazards: Iterable[Hazard] = (),
    a_launch: float | None = None,
    b_launch: float | None = None,
) -> RunDiff:
    """Compare run A (before) with run B (after).

    ``a_bounds``/``b_bounds`` (``Analysis.bounds``) give the efficiency per PE (none
    without them); ``lines`` aligns the stall lines across edits; ``a_incomplete``
    and ``b_incomplete`` say why a run did not complete (``analysis.incomplete``);
    ``a_hazards``/``b_hazards`` (``Analysis.hazards``) are paired by :func:`pair_hazards`;
    ``a_launch``/``b_launch``, the launch's efficiency of a run on several PEs (what
    report and the app's header lead with), head the efficiency rows.
    """
    a_findings, b_findings = list(a_findings), list(b_findings)
    comparable = a_incomplete is None and b_incomplete is None

    def better(way: str) -> str:
        return way if comparable else NEUTRAL

    headline = [
        Change("end cycle", a.end_time, b.end_time, "cycles", better(LOWER)),
        Change("stall cycles", a.stall_cycles, b.stall_cycles, "cycles", better(LOWER)),
        Change(
            "dma_read_count",
            a.counts.get("dma_read_count"),
            b.counts.get("dma_read_count"),
            "count",
        ),
    ]
    if a_launch is not None or b_launch is not None:
        headline.append(Change("launch efficiency", a_launch, b_launch, "ratio", better(HIGHER)))
    a_eff = _efficiency(a_bounds)
    b_eff = _efficiency(b_bounds)
    for pe in sorted(a_eff.keys() | b_eff.keys()):
        headline.append(
            Change(
                f"efficiency PE{pe}",
                a_eff.get(pe),
                b_eff.get(pe),
                "ratio",
                better(HIGHER),
            )
        )
    busy = _busy(a, b)
    renamed = _renames(lines)
    a_ids = {_in_b(f.id, renamed): f for f in a_findings}
    b_ids = {f.id: f for f in b_findings}
    added = [f for f in b_findings if f.id not in a_ids]
    removed = [f for f in a_findings if _in_b(f.id, renamed) not in b_ids]
    kept = [f.id for f in b_findings if f.id in a_ids]
    hazards = pair_hazards(a_hazards, b_hazards, lines)
    regressions = []
    if b.check is not None and not b.check.ok and (a.check is None or a.check.ok):
        # The output is wrong where A's was not (or A recorded no check): whatever the speed.
        regressions.append(f"B's {b.check.text()}")
    if b_incomplete is not None:
        regressions.append(f"B did not complete: {b_incomplete}")
    elif a_incomplete is None:
        if hazards.new:
            # As report's gate: a hazard fails whatever the speed (it has no saving).
            n = len(hazards.new)
            regressions.append(f"B adds {n} hazard{'s' if n != 1 else ''}")
        # Fixing a hazard is never a regression: the wait or message that orders the
        # bytes costs cycles and may expose findings the race hid (a new hazard still is).
        fixes_a_hazard = bool(hazards.fixed) and not hazards.new
        if b.end_time > a.end_time and not fixes_a_hazard:
            regressions.append(f"B ends {b.end_time - a.end_time:,} cycles later than A")
        if added and b.end_time >= a.end_time and not fixes_a_hazard:
            regressions.append(f"B adds {len(added)} finding{'s' if len(added) != 1 else ''}")
    return RunDiff(
        a=a,
        b=b,
        headline=headline,
        busy=busy,
        added=added,
        removed=removed,
        kept=kept,
        stall_by_line=_lines(a, b, lines, better(LOWER)),
        regressions=regressions,
        a_incomplete=a_incomplete,
        b_incomplete=b_incomplete,
        warnings=list(warnings),
        hazards=hazards,
    )


def pair_hazards(
    a_hazards: Iterable[Hazard], b_hazards: Iterable[Hazard], lines: LineMap | None
) -> HazardGroups:
    """A's and B's hazards paired by rule, side of the PE boundary and both lines (A's
    lines taken to B's through ``lines``, as the stall lines are; by file and line
    without it). A hazard on a line B has no counterpart of is fixed."""

    def place(loc: SourceLoc | None, aligned: bool) -> tuple[str, int] | None:
        if loc is None:
            return None
        if not aligned or lines is None:
            return (loc.file, loc.line)
        return lines.b_line(loc.file, loc.line)

    def key(h: Hazard, aligned: bool) -> tuple | None:
        second, first = place(h.second.loc, aligned), place(h.first.loc, aligned)
        if second is None or first is None:
            return None
        return (h.rule, h.across_pes, second, first)

    b_by_key: dict[tuple, list[Hazard]] = {}
    b_list = list(b_hazards)
    for h in b_list:
        k = key(h, False)
        if k is not None:
            b_by_key.setdefault(k, []).append(h)
    fixed, still, paired = [], [], set()
    for h in a_hazards:
        k = key(h, True)
        match = b_by_key.get(k) if k is not None else None
        if match:
            other = match.pop(0)
            still.append((h, other))
            paired.add(id(other))
        else:
            fixed.append(h)
    new = [h for h in b_list if id(h) not in paired]
    return HazardGroups(fixed, new, still)


def _efficiency(bounds: Iterable[PEBound] | None) -> dict[int, float | None]:
    return {b.pe: b.efficiency for b in bounds or ()}


def kernel_warnings(
    a_index: Any, b_index: Any, a: Summary, b: Summary, lines: LineMap | None = None
) -> list[str]:
    """Why the two runs may not be the same kernel: its name, or the functions or files
    their tl calls were made in, differ (files paired across renames, and functions
    paired by their likeness: ``kernel_flawed`` and ``kernel_fixed`` of one file are
    two versions of one kernel, not a reason to warn)."""
    lines = lines if lines is not None else LineMap(a_index, b_index)
    paired = {(p.a_file, p.a_name): (p.b_file, p.b_name) for p in lines.functions}
    kernels_paired = any((p.a_name, p.b_name) == (a.kernel, b.kernel) for p in lines.functions)
    if a.kernel != b.kernel and not kernels_paired:
        return [f"A and B ran different kernels: {a.kernel or '?'} and {b.kernel or '?'}"]
    out = []
    a_funcs = {(loc.file, loc.function) for loc in a_index.locs}
    b_funcs = {(loc.file, loc.function) for loc in b_index.locs}
    renamed = lines.files
    a_funcs = {paired.get((f, fn), (renamed.get(f, f), fn)) for f, fn in a_funcs}
    only_a = sorted(f"{fn} ({f})" for f, fn in a_funcs - b_funcs)
    only_b = sorted(f"{fn} ({f})" for f, fn in b_funcs - a_funcs)
    if only_a or only_b:
        parts = []
        if only_a:
            parts.append("only A calls tl from " + _few(only_a))
        if only_b:
            parts.append("only B calls tl from " + _few(only_b))
        out.append("A and B ran different code: " + "; ".join(parts))
    return out


def _few(names: list[str], n: int = 4) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


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


def _lines(a: Summary, b: Summary, lines: LineMap | None, better: str) -> list[LineChange]:
    """Stall rows of both runs, B's lines matched to A's through ``lines`` (or by place)."""
    unknown = SourceLoc("<unknown>", 0, "")
    # Key: (A file, A line, B file, B line); either half None for a line one run lacks.
    rows: dict[tuple, dict[str, Any]] = {}

    def row(key: tuple, function: str) -> dict[str, Any]:
        return rows.setdefault(
            key, {"function": function, "a": 0, "b": 0, "a_waits": 0, "b_waits": 0}
        )

    for stall in a.stall_by_line:
        loc = stall.loc or unknown
        there = (loc.file, loc.line) if lines is None else lines.b_line(loc.file, loc.line)
        r = row((loc.file, loc.line, *(there or (None, None))), loc.function)
        r["a"] += stall.stall_cycles
        r["a_waits"] += stall.waits
    for stall in b.stall_by_line:
        loc = stall.loc or unknown
        here = (loc.file, loc.line) if lines is None else lines.a_line(loc.file, loc.line)
        r = row((*(here or (None, None)), loc.file, loc.line), loc.function)
        r["function"] = loc.function or r["function"]
        r["b"] += stall.stall_cycles
        r["b_waits"] += stall.waits
    out = []
    for (af, al, bf, bl), r in rows.items():
        change = Change(
            f"{af}:{al}" if af is not None else f"{bf}:{bl}", r["a"], r["b"], "cycles", better
        )
        out.append(LineChange(af, al, r["function"], change, r["a_waits"], r["b_waits"], bf, bl))
    # Largest stall in either run first; then by place, for a stable order.
    out.sort(
        key=lambda r: (
            -max(r.stall.a or 0, r.stall.b or 0),
            r.file or r.b_file or "",
            r.line or r.b_line or 0,
        )
    )
    return out


def id_in_b(ident: str, lines: LineMap | None) -> str:
    """A's finding id ``ident`` as B names the same call (files and functions ``lines``
    pairs under other names renamed): equal to a B finding's id when both runs have it."""
    return _in_b(ident, _renames(lines))


def _renames(lines: LineMap | None) -> dict[str, str]:
    """What ids rename: a function paired with one of another name first
    (``FILE::FUNCTION``), then files."""
    renamed = {
        f"{p.a_file}::{p.a_name}": f"{p.b_file}::{p.b_name}"
        for p in getattr(lines, "functions", ())
    }
    renamed.update(lines.renamed if lines is not None else {})
    return renamed


def _in_b(ident: str, renamed: dict[str, str]) -> str:
    """A's finding id with A's kernel files (and functions paired with one of another
    name) named as B names them (``RULE:FILE::...``, and each ``@FILE::...`` of a
    helper's caller)."""
    if not renamed:
        return ident
    rule, sep, rest = ident.partition(":")
    parts = rest.split("@")
    for i, part in enumerate(parts):
        for fa, fb in renamed.items():
            if part.startswith(fa + ":"):
                parts[i] = fb + part[len(fa) :]
                break
    return rule + sep + "@".join(parts)
