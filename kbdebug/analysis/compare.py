"""Run A and run B aligned for the app's compare mode: tl calls, futures, findings, headline.

Pure (no Textual). :class:`Comparison` pairs the two runs' lines and tl calls
(:class:`~kbdebug.analysis.align.CallMap`), gives a future's facts in both runs, and,
from each run's :class:`~kbdebug.analysis.results.Analysis`, the diff
(:mod:`kbdebug.analysis.run_diff`, the one ``kbdebug diff`` prints), the findings
grouped fixed / new / still there, and the header figures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.align import CallKey, CallMap, LineMap
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.results import Analysis
from kbdebug.analysis.run_diff import (
    HIGHER,
    NEUTRAL,
    Change,
    HazardGroups,
    RunDiff,
    compare,
    id_in_b,
    kernel_warnings,
)

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay

__all__ = ["Comparison", "FindingGroups", "FutureFacts", "diff_replays", "future_facts"]


# --- from two open replays ---------------------------------------------------------------


def diff_replays(a: Replay, b: Replay, lines: LineMap | None = None) -> RunDiff:
    """Compare two open runs as ``kbdebug diff`` does (findings, bounds, aligned lines)."""
    return Comparison(a, b, lines=lines).diff


@dataclass(frozen=True)
class FutureFacts:
    """One future's passage in cycles (None where it never got there)."""

    future: int
    pe: int
    op: str
    loc: SourceLoc | None
    issue: int | None
    grant: int | None
    done: int | None
    wait: int | None
    resolved: int | None
    #: Cycles its wait stalled the kernel.
    stall: int


def future_facts(index: Any, future: int) -> FutureFacts | None:
    """The facts of ``future`` in a trace's index; None for an unknown id."""
    f, k, c = index.futures, index.commands, index.columns
    if not 0 <= future < len(f.cmd):
        return None

    def at(event: int) -> int | None:
        return int(c.time[event]) if event >= 0 else None

    cmd = int(f.cmd[future])
    op = index.string(int(k.op[cmd])) if 0 <= cmd < len(k.op) else ""
    return FutureFacts(
        future=future,
        pe=int(f.pe[future]),
        op=op,
        loc=index.loc(int(f.loc[future])),
        issue=at(int(f.issue[future])),
        grant=at(int(f.grant[future])),
        done=at(int(f.complete[future])),
        wait=at(int(f.wait_begin[future])),
        resolved=at(int(f.wait_end[future])),
        stall=int(f.stall[future]),
    )


@dataclass(frozen=True)
class FindingGroups:
    """The findings of A and B matched by their edit-proof id."""

    #: A's findings that B no longer has: what the change fixed (A's estimated saving).
    fixed: list[Finding]
    #: B's findings A did not have.
    new: list[Finding]
    #: (A's, B's) of each finding both runs have.
    still: list[tuple[Finding, Finding]]
    #: The hazards (KB2xx) fixed in B, new in B and still there, listed before these.
    hazards: HazardGroups = field(default_factory=HazardGroups)


def _by_saving(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-f.saving, f.pe, f.id))


def _other(run: str) -> str:
    if run not in ("a", "b"):
        raise ValueError(f'run must be "a" or "b", not {run!r}')
    return "b" if run == "a" else "a"


class Comparison:
    """Run A (before) and run B (after), aligned: lines, tl calls, futures, findings.

    Construction pairs lines and calls (fast: the app builds it before its first
    frame); :attr:`diff`, :attr:`findings` and :attr:`headline` need both runs'
    findings and critical-path bounds (about a second per million events), computed
    on first use or by :meth:`compute` (the app calls it in a worker thread).
    """

    def __init__(self, a: Replay, b: Replay, *, lines: LineMap | None = None):
        self.a, self.b = a, b
        #: Each run's analysis (findings, bounds, summary), computed on first use.
        self.analysis = {"a": Analysis(a), "b": Analysis(b)}
        self.lines = lines if lines is not None else LineMap(a.index, b.index)
        self.calls = CallMap(a.index, b.index, self.lines)
        self._diff: RunDiff | None = None

    def replay(self, run: str) -> Replay:
        """The replay of ``run`` ("a" or "b")."""
        _other(run)
        return self.a if run == "a" else self.b

    # --- calls and futures ---------------------------------------------------------------

    def current_call(self, run: str, position: int, pe: int) -> int | None:
        """The event of ``pe``'s latest tl call at or before the current event
        (``position - 1``) of ``run``; None before its first."""
        return self.calls.last_call(run, pe, position - 1)

    def call_key(self, run: str, event: int) -> CallKey | None:
        return self.calls.key(run, event)

    def other_call(self, run: str, event: int) -> int | None:
        """The event of the same tl call in the other run, None if it made no such call."""
        return self.calls.other(run, event)

    def other_future(self, run: str, future: int) -> int | None:
        """The future of the other run waited by the same call (else issued by the same
        call), None when there is none.

        The wait first: a fix moves issues (a prefetch hoisted one tile ahead pairs the
        k-th issue with the next tile's load) while the k-th wait still takes tile k."""
        index = self.replay(run).index
        other = self.replay(_other(run)).index
        f = index.futures
        if not 0 <= future < len(f.cmd):
            return None
        for event in (int(f.wait_begin[future]), int(f.issue[future])):
            if event < 0:
                continue
            there = self.calls.other(run, event)
            if there is None:
                continue
            found = _future_of(other, there)
            if found >= 0:
                return found
        return None

    def future_pair(self, run: str, future: int) -> tuple[FutureFacts | None, FutureFacts | None]:
        """``future`` of ``run`` and its counterpart, as (A's facts, B's facts)."""
        here = future_facts(self.replay(run).index, future)
        other_id = self.other_future(run, future) if here is not None else None
        there = None if other_id is None else future_facts(self.replay(_other(run)).index, other_id)
        return (here, there) if run == "a" else (there, here)

    # --- the diff, findings and headline -------------------------------------------------

    def compute(self) -> RunDiff:
        """Findings, bounds, summaries and the diff of both runs (once)."""
        if self._diff is None:
            a, b = self.analysis["a"], self.analysis["b"]
            sa, sb = a.summary, b.summary
            self._diff = compare(
                sa,
                sb,
                a.findings,
                b.findings,
                a_bounds=a.bounds,
                b_bounds=b.bounds,
                lines=self.lines,
                a_incomplete=a.incomplete,
                b_incomplete=b.incomplete,
                warnings=kernel_warnings(self.a.index, self.b.index, sa, sb, self.lines),
                a_hazards=a.hazards,
                b_hazards=b.hazards,
                a_launch=_launch_efficiency(a),
                b_launch=_launch_efficiency(b),
            )
        return self._diff

    @property
    def diff(self) -> RunDiff:
        return self.compute()

    @property
    def findings(self) -> FindingGroups:
        """Fixed (A's, by saving), new (B's, by saving) and still there (by B's saving)."""
        diff = self.compute()
        a_ids = {id_in_b(f.id, self.lines): f for f in self.analysis["a"].findings}
        b_found = self.analysis["b"].findings
        still = [(a_ids[f.id], f) for f in _by_saving(b_found) if f.id in a_ids]
        return FindingGroups(_by_saving(diff.removed), _by_saving(diff.added), still, diff.hazards)

    @property
    def headline(self) -> list[Change]:
        """End cycle, efficiency (all PEs: bounds over achieved) and stall cycles, A and B."""
        diff = self.compute()
        end, stall = diff.headline[0], diff.headline[1]
        efficiency = [self.analysis[run].launch_efficiency[1] for run in ("a", "b")]
        return [
            end,
            Change(
                "efficiency",
                efficiency[0],
                efficiency[1],
                "ratio",
                HIGHER if diff.comparable else NEUTRAL,
            ),
            stall,
        ]


def _future_of(index: Any, event: int) -> int:
    """The future event ``event`` is about (its own, or its command's), else -1."""
    c, k = index.columns, index.commands
    fut = int(c.fut[event])
    if fut >= 0:
        return fut
    cmd = int(c.cmd[event])
    return int(k.future[cmd]) if 0 <= cmd < len(k.future) else -1


def _launch_efficiency(analysis: Analysis) -> float | None:
    """The launch's efficiency of a run on several PEs (None on one PE: its PE row says it)."""
    return analysis.launch_efficiency[1] if len(analysis.bounds) > 1 else None
