"""Waits followed across PEs: a stalled receive, the send it waited for, and why that was late.

A receive stalls until its message arrives; the message leaves when the sender
issues its send, and a PE issues each command at the end of its last stall
plus the work since (its program runs in order). A send issued before its
receive was waited on was not late: the message was in flight (the link's
latency, or a queue on it), and the chain stops there. Otherwise the send was
late by its issue minus the wait's begin; the sender's last stalled wait before
the send held it back when that stall is a fair share of the lateness
(:data:`FOLLOW_SHARE`); when it is not, the sender's own work made the send
late, and the chain stops there (its root). When that last wait is itself on a
receive, the chain goes on to that receive's sender, and so on, up to
:data:`MAX_LINKS` links, each wait visited once (a ring's chain stops where it
would come round again).

Built from the index's future and command columns (one pass of numpy when the
first chain is asked for, then a bisection per link), never from the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.trace.schema import Kind, SourceLoc
from kbdebug.replay.index import TraceIndex

__all__ = ["MAX_LINKS", "ChainLink", "ChainRoot", "WaitChain", "WaitChains"]

#: Links a chain follows at most (a ring of 64 PEs waiting in turn has 63).
MAX_LINKS = 64
#: The sender's last stalled wait is followed when it stalled at least this share of the
#: send's lateness; a shorter one before a long stretch of work is not the reason.
FOLLOW_SHARE = 0.1

#: Root kinds: why the chain stops.
WORK = "work"  # the sender had not stalled (enough) before its send: its own work
TRANSIT = "transit"  # the send was issued before the wait began: the message was in flight
STALL = "stall"  # the PE stalled on a wait that is not a receive (a load, store, send)
UNMATCHED = "unmatched"  # a receive no send ever matched (deadlock, cut trace)
CYCLE = "cycle"  # the chain came back to a wait it had already passed
DEPTH = "depth"  # MAX_LINKS links followed
NOT_STALLED = "not-stalled"  # the wait asked about did not stall


@dataclass(frozen=True)
class ChainLink:
    """One stalled receive wait and the send it waited for."""

    #: The waiting PE, its WAIT_BEGIN event, the wait's line, when it began, its stall.
    pe: int
    wait_event: int
    wait_loc: SourceLoc | None
    waited_at: int
    stall: int
    #: The matching send: its PE, ISSUE event, line, the cycle it was issued and the
    #: cycle its message arrived.
    sender: int
    send_event: int
    send_loc: SourceLoc | None
    issued: int
    delivered: int | None
    #: Cycles the sender worked (did not stall) between its last stall, or its kernel's
    #: start, and the send's issue.
    work: int

    @property
    def late(self) -> int:
        """Cycles the send was issued after the wait began (<= 0: it was not late)."""
        return self.issued - self.waited_at


@dataclass(frozen=True)
class ChainRoot:
    """Where a chain stops: the first cause it does not follow further."""

    #: WORK, TRANSIT, STALL, UNMATCHED, CYCLE, DEPTH or NOT_STALLED.
    kind: str
    pe: int
    #: The event to show: the send's ISSUE (WORK, TRANSIT), the stalled wait's
    #: WAIT_BEGIN (STALL, UNMATCHED, CYCLE, DEPTH, NOT_STALLED).
    event: int
    loc: SourceLoc | None
    #: WORK: cycles the sender did not stall from its kernel's start to its send;
    #: TRANSIT: the message's cycles from issue to arrival; STALL: the wait's stall;
    #: otherwise 0.
    cycles: int
    #: STALL: the op the wait was on ("load", "load_async", "store", "send"); else "".
    op: str = ""


@dataclass(frozen=True)
class WaitChain:
    """A stalled wait followed back across PEs: each receive and its late send, then the root.

    ``links[0]`` is the wait asked about (when it is a stalled receive); ``links[i + 1]``
    is why ``links[i]``'s send was late; ``root`` is why the last one's was (or why the
    chain stops). A wait on a load, store or send has no links: its root is itself.
    """

    event: int
    links: tuple[ChainLink, ...]
    root: ChainRoot

    @property
    def stall(self) -> int:
        """The stall of the wait asked about."""
        return self.links[0].stall if self.links else self.root.cycles


class WaitChains:
    """Chains of one trace's waits, from arrays built once over its futures and commands."""

    def __init__(self, index: TraceIndex):
        self.index = index
        c, futs, cmds = index.columns, index.futures, index.commands
        n_futs, n_cmds = len(futs.cmd), len(cmds.issue)
        self._stall = np.asarray(futs.stall, dtype=np.int64)
        # Per receive future: the send command matched with it (-1: none).
        self._send_of = np.full(n_futs, -1, dtype=np.int64)
        recv = np.flatnonzero(c.kind == Kind.IPCQ_RECV)
        fut = c.fut[recv].astype(np.int64)
        send = c.cmd[recv].astype(np.int64)
        ok = (fut >= 0) & (fut < n_futs) & (send >= 0) & (send < n_cmds)
        self._send_of[fut[ok]] = send[ok]
        # Per PE: the WAIT_BEGIN events of its stalled waits, sorted, and their futures.
        begin = np.asarray(futs.wait_begin, dtype=np.int64)
        stalled = np.flatnonzero((begin >= 0) & (self._stall > 0))
        pes = np.asarray(futs.pe, dtype=np.int64)[stalled]
        order = np.lexsort((begin[stalled], pes))
        self._stalled_fut = stalled[order]
        self._stalled_begin = begin[self._stalled_fut]
        self._pe_at = np.searchsorted(pes[order], np.arange(index.n_pes + 1))
        # Stall of the stalled waits before each one (per PE, running), for a PE's work.
        self._stalled_before = np.concatenate([[0], np.cumsum(self._stall[self._stalled_fut])])
        # Per PE: its kernel's start cycle (-1: never started).
        self._start = np.full(index.n_pes, -1, dtype=np.int64)
        starts = np.flatnonzero(c.kind == Kind.KERNEL_START)
        start_pe = c.pe[starts].astype(np.int64)
        keep = (start_pe >= 0) & (start_pe < index.n_pes)
        # The first start of each PE (assigning in reverse leaves the first one).
        self._start[start_pe[keep][::-1]] = c.time[starts[keep][::-1]]
        self._recv_ops = {i for i, s in enumerate(index.strings) if s == "recv_async"}

    def _time(self, event: int) -> int:
        return int(self.index.columns.time[event])

    def _loc(self, loc_id: int) -> SourceLoc | None:
        return self.index.loc(int(loc_id))

    def _op(self, future: int) -> str:
        cmd = int(self.index.futures.cmd[future])
        if cmd < 0 or cmd >= len(self.index.commands.op):
            return ""
        return self.index.string(int(self.index.commands.op[cmd]))

    def _is_receive(self, future: int) -> bool:
        cmd = int(self.index.futures.cmd[future])
        ops = self.index.commands.op
        return 0 <= cmd < len(ops) and int(ops[cmd]) in self._recv_ops

    def _wait_stall(self, future: int) -> int:
        """The wait's stall; a wait that never ended (deadlock, cut) up to the trace's end."""
        futs = self.index.futures
        if int(futs.wait_end[future]) < 0 and bool(futs.blocks[future]):
            return max(0, self.index.end_time - self._time(int(futs.wait_begin[future])))
        return int(self._stall[future])

    def _last_stall_before(self, pe: int, event: int) -> int:
        """The future of ``pe``'s last stalled wait begun before ``event`` (-1: none)."""
        lo, hi = int(self._pe_at[pe]), int(self._pe_at[pe + 1])
        i = int(np.searchsorted(self._stalled_begin[lo:hi], event)) - 1
        return int(self._stalled_fut[lo + i]) if i >= 0 else -1

    def chain(self, event: int) -> WaitChain | None:
        """The chain of causes of the wait whose WAIT_BEGIN is ``event``; None when
        ``event`` is not a WAIT_BEGIN on a known future."""
        index = self.index
        c, futs, cmds = index.columns, index.futures, index.commands
        if not 0 <= event < index.n_events or int(c.kind[event]) != Kind.WAIT_BEGIN:
            return None
        future = int(c.fut[event])
        if not 0 <= future < len(futs.cmd) or int(futs.wait_begin[future]) != event:
            return None
        links: list[ChainLink] = []
        seen: set[int] = set()
        while True:
            pe, begin = int(futs.pe[future]), int(futs.wait_begin[future])
            loc = self._loc(futs.wait_loc[future])
            stall = self._wait_stall(future)
            hanging = int(futs.wait_end[future]) < 0 and bool(futs.blocks[future])
            if stall <= 0 and not hanging:
                return WaitChain(event, tuple(links), ChainRoot(NOT_STALLED, pe, begin, loc, 0))
            if not self._is_receive(future):
                root = ChainRoot(STALL, pe, begin, loc, stall, self._op(future))
                return WaitChain(event, tuple(links), root)
            send = int(self._send_of[future])
            sender = int(cmds.pe[send]) if send >= 0 else -1
            if send < 0 or int(cmds.issue[send]) < 0 or not 0 <= sender < index.n_pes:
                return WaitChain(event, tuple(links), ChainRoot(UNMATCHED, pe, begin, loc, 0))
            if begin in seen:
                return WaitChain(event, tuple(links), ChainRoot(CYCLE, pe, begin, loc, 0))
            if len(links) >= MAX_LINKS:
                return WaitChain(event, tuple(links), ChainRoot(DEPTH, pe, begin, loc, 0))
            seen.add(begin)
            send_event = int(cmds.issue[send])
            issued = self._time(send_event)
            done = int(cmds.complete[send])
            before = self._last_stall_before(sender, send_event)
            if before >= 0 and int(futs.wait_end[before]) >= 0:
                since_at = self._time(int(futs.wait_end[before]))
            else:
                since_at = self._start_of(sender, issued)
            links.append(
                ChainLink(
                    pe=pe,
                    wait_event=begin,
                    wait_loc=loc,
                    waited_at=self._time(begin),
                    stall=stall,
                    sender=sender,
                    send_event=send_event,
                    send_loc=self._loc(cmds.loc[send]),
                    issued=issued,
                    delivered=self._time(done) if done >= 0 else None,
                    work=max(0, issued - since_at),
                )
            )
            send_loc = self._loc(cmds.loc[send])
            if links[-1].late <= 0:
                transit = 0 if done < 0 else self._time(done) - issued
                root = ChainRoot(TRANSIT, sender, send_event, send_loc, transit)
                return WaitChain(event, tuple(links), root)
            # The sender's last stall held the send back unless the work since outweighs it.
            if before < 0 or self._wait_stall(before) < max(1, FOLLOW_SHARE * links[-1].late):
                work = self._work_before(sender, send_event, issued)
                root = ChainRoot(WORK, sender, send_event, send_loc, work)
                return WaitChain(event, tuple(links), root)
            future = before

    def _start_of(self, pe: int, fallback: int) -> int:
        start = int(self._start[pe]) if 0 <= pe < len(self._start) else -1
        return fallback if start < 0 else start

    def _work_before(self, pe: int, event: int, at: int) -> int:
        """Cycles ``pe`` did not stall between its kernel's start and ``event`` (at ``at``)."""
        lo, hi = int(self._pe_at[pe]), int(self._pe_at[pe + 1])
        i = lo + int(np.searchsorted(self._stalled_begin[lo:hi], event))
        stalled = int(self._stalled_before[i] - self._stalled_before[lo])
        return max(0, at - self._start_of(pe, at) - stalled)

    def worst(self, count: int) -> list[WaitChain]:
        """The chains of the ``count`` longest stalled receive waits, longest first: one
        per wait line (a loop's or a ring's waits on one line tell one story), none that
        shares a link with a longer one's chain."""
        futs, cmds = self.index.futures, self.index.commands
        cmd = np.asarray(futs.cmd, dtype=np.int64)[self._stalled_fut]
        ok = (cmd >= 0) & (cmd < len(cmds.op))
        ops = np.asarray(cmds.op, dtype=np.int64)[np.where(ok, cmd, 0)] if len(cmds.op) else cmd
        receive = ok & np.isin(ops, list(self._recv_ops))
        candidates = self._stalled_fut[receive]
        order = candidates[np.argsort(-self._stall[candidates], kind="stable")]
        out: list[WaitChain] = []
        lines: set[int] = set()
        shown: set[int] = set()
        for f in order.tolist():
            line, begin = int(futs.wait_loc[f]), int(futs.wait_begin[f])
            if line in lines or begin in shown:
                continue
            lines.add(line)
            chain = self.chain(begin)
            # A chain that runs into one already shown tells its story again.
            if (
                chain is not None
                and chain.links
                and all(link.wait_event not in shown for link in chain.links)
            ):
                out.append(chain)
                shown.update(link.wait_event for link in chain.links)
            if len(out) >= count:
                break
        return out
