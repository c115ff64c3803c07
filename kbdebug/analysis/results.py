"""Analysis: everything the analysis says of one trace, computed once and handed out.

``report``, ``diff``, ``compare``, ``sweep``, ``export`` and the app each make one
:class:`Analysis` per opened trace and pass it to whatever needs its figures; nothing is
kept on a :class:`~kbdebug.replay.Replay` or its index, so two readers of one trace
cannot see two different answers and a reloaded trace starts afresh.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from kbdebug.analysis.across_pes import group_across_pes
from kbdebug.analysis.contention import HbmContention, contention
from kbdebug.analysis.findings import MIN_SHARE, find_all
from kbdebug.analysis.hazards import Hazard, find_hazards
from kbdebug.analysis.hbm_share import StackBound, stack_bounds
from kbdebug.analysis.identity import with_stable_ids
from kbdebug.analysis.imbalance import Imbalance, imbalance_of
from kbdebug.analysis.model import Model, PEBound, build_model, launch_efficiency
from kbdebug.analysis.oob import out_of_bounds
from kbdebug.analysis.select import incomplete
from kbdebug.analysis.summary import (
    FutureRow,
    Summary,
    futures_table,
    summarize,
)
from kbdebug.analysis.wait_chain import WaitChain, WaitChains

#: Receive waits whose chains ``report`` shows (the longest, one per wait line).
WORST_CHAINS = 3

if TYPE_CHECKING:
    from kbdebug.analysis.finding import Finding
    from kbdebug.replay.replay import Replay


class Analysis:
    """The analysis of one opened trace: model, bounds, findings, summary, stall by line.

    Each figure is computed the first time it is asked for and kept here; asking from
    several threads computes it once (the app's worker and a breakpoint may race).
    The replay is read, never moved: give it one no other thread moves (the app makes
    a private :class:`~kbdebug.replay.Replay` over the same index for its worker).
    """

    def __init__(self, replay: Replay):
        self.replay = replay
        self._lock = threading.RLock()

    def _once(self, name: str, compute):
        with self._lock:
            if name not in self.__dict__:
                self.__dict__[name] = compute()
            return self.__dict__[name]

    @property
    def model(self) -> Model:
        """The dataflow model of the whole launch."""
        return self._once("_model", lambda: build_model(self.replay.index))

    @property
    def bounds(self) -> list[PEBound]:
        """The critical-path bound and efficiency of every PE that ran a kernel."""
        return self._once("_bounds", self.model.bounds)

    @property
    def findings(self) -> list[Finding]:
        """Every finding, one per bug across PEs, with its edit-proof id, by first event."""
        return self._once(
            "_findings",
            lambda: group_across_pes(
                with_stable_ids(self.replay.index, find_all(self.replay, self.model)),
                ends={b.pe: b.end for b in self.bounds},
                start=min((b.start for b in self.bounds), default=0),
                floor=MIN_SHARE,
            ),
        )

    @property
    def hazards(self) -> list[Hazard]:
        """Every hazard (KB2xx): pairs of accesses to overlapping HBM bytes, at least one
        a store, that no wait or message orders, one per pair of lines, by first occurrence;
        then the lines whose accesses reach outside their tensor (KB204)."""
        return self._once(
            "_hazards",
            lambda: find_hazards(self.replay.index) + out_of_bounds(self.replay.index),
        )

    @property
    def imbalance(self) -> Imbalance | None:
        """The late PEs with more work than the rest, and the launch's balanced bound."""
        return self._once("_imbalance", lambda: imbalance_of(self.model))

    @property
    def launch_efficiency(self) -> tuple[int, float | None]:
        """(the launch's bound in cycles, bound / achieved; None: did not complete): the
        bound with the work split evenly when some PEs do more of it (KB111)."""
        imbalance = self.imbalance
        stacks = tuple(b.end for b in self.stack_bounds)
        return launch_efficiency(self.bounds, imbalance and imbalance.balanced_end, stacks)

    @property
    def contention(self) -> list[HbmContention]:
        """KB113: each shared HBM stack its PEs queued on, with its bound, what sharing it
        cost the launch and the fix; information about the bound, not a finding."""

        def compute() -> list[HbmContention]:
            bound, _ = self.launch_efficiency
            start = min((b.start for b in self.bounds), default=0)
            return contention(self.model, start + bound)

        return self._once("_contention", compute)

    @property
    def stack_bounds(self) -> list[StackBound]:
        """Each HBM stack its PEs share as a bound of the launch (empty without sharing)."""
        return self._once("_stack_bounds", lambda: stack_bounds(self.model))

    @property
    def summary(self) -> Summary:
        """The headline numbers: end, busy channels, stalls, op counts."""
        return self._once("_summary", lambda: summarize(self.replay))

    @property
    def futures(self) -> list[FutureRow]:
        """Every future's life cycle, in id order."""
        return self._once("_futures", lambda: futures_table(self.replay))

    @property
    def wait_chains(self) -> WaitChains:
        """Chains of this trace's waits across PEs (arrays built once, chains on demand)."""
        return self._once("_wait_chains", lambda: WaitChains(self.replay.index))

    def wait_chain(self, event: int) -> WaitChain | None:
        """The chain of causes of the wait whose WAIT_BEGIN is ``event``: each stalled
        receive, the send it waited for (PE, line, cycle issued) and why that was late,
        back to the root cause; None when ``event`` is not a wait's begin."""
        return self.wait_chains.chain(event)

    @property
    def worst_wait_chains(self) -> list[WaitChain]:
        """The chains of the longest stalled receive waits (``WORST_CHAINS``, one per wait
        line), longest first: what ``report`` shows."""
        return self._once("_worst_chains", lambda: self.wait_chains.worst(WORST_CHAINS))

    @property
    def incomplete(self) -> str | None:
        """Why the run did not complete (untrusted text: escape it), None when it did."""
        return self._once("_incomplete", lambda: incomplete(self.replay))


def analyse(replay: Replay) -> Analysis:
    """The analysis of ``replay``'s trace (computed lazily, figure by figure)."""
    return Analysis(replay)
