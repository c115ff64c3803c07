"""What each step of a program needs: first uses, receive gates, store fences, floors.

From what each command reads (format 1.3) and the program's order, fills a
:class:`~kbdebug.analysis.model.Program`'s ``need_at``/``need`` (per step, the
commands whose data it needs), ``first_use`` (per wait, the step that first needs
its value), ``fences`` (per load, the earlier stores of its PE it reads back), ``overwritten_at``
(per load or store, the first later store of its PE to the same bytes),
``floor`` (per step, the last step no issue may move above), ``carried`` (per receive's
wait, the load it gates that may move down with it) and ``producer`` (per send of
computed data, the compute that produced it).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

import numpy as np

from kbdebug.analysis.model import (
    BARRIER,
    COMPUTE,
    LOAD,
    OPAQUE,
    RECV,
    SEND,
    STORE,
    WAIT,
    _ints,
)

if TYPE_CHECKING:
    from kbdebug.analysis.model import Program

#: Stores per PE above which fences are matched by any earlier waited store, not by range.
MAX_RANGE_FENCES = 4096


def dependencies(
    prog: Program,
    reads: list[tuple[int, int]],
    addr,
    nbytes,
    stores,
    times=None,
    outside: frozenset[int] = frozenset(),
    loads=None,
) -> None:
    """Fill ``prog``'s needs, first uses, fences and floors from what its steps read.
    ``stores``: (first byte, end, PE) of every store of the launch; ``times``: per command,
    the cycle a store landed and the cycle a load read HBM (-1: never), when known;
    ``outside``: loads and stores that reach outside their tensor (no fence is theirs);
    ``loads``: (first byte, end, PE) of every load of the launch.

    A send issued after the wait of a store whose bytes another PE loads may be what
    tells that PE the bytes have landed: it needs that store (the latest such one waited
    before it; one write channel lands stores in issue order) and is never moved above
    its wait."""
    lo_all, hi_all, pe_all = stores
    load_lo, load_hi, load_pe = loads if loads is not None else (hi_all[:0], hi_all[:0], pe_all[:0])

    def read_elsewhere(c: int) -> bool:
        """Whether another PE loads bytes of store ``c``."""
        if not len(load_lo) or not 0 <= c < len(addr) or c in outside:
            return False
        lo, hi = int(addr[c]), int(addr[c]) + int(nbytes[c])
        return bool(((load_lo < hi) & (load_hi > lo) & (load_pe != prog.pe)).any())

    def foreign(c: int) -> bool:
        """Whether load ``c`` reads bytes another PE stores."""
        if not len(lo_all) or not 0 <= c < len(addr):
            return False
        lo, hi = int(addr[c]), int(addr[c]) + int(nbytes[c])
        return bool(((lo_all < hi) & (hi_all > lo) & (pe_all != prog.pe)).any())

    n = len(prog)
    kinds, cmds = prog.kind, prog.cmd
    issue_step: dict[int, int] = {}
    pairs: list[tuple[int, int]] = list(reads)
    wait_steps: list[int] = []
    for s in range(n):
        k = kinds[s]
        if k in (LOAD, STORE, SEND, RECV):
            issue_step[cmds[s]] = s
        elif k == WAIT:
            wait_steps.append(s)
        elif k == BARRIER and cmds[s] >= 0:
            pairs.append((s, cmds[s]))
    # First use of each waited load or receive: the first step after the wait needing it.
    uses: dict[int, list[int]] = {}
    for s, c in sorted(pairs):
        uses.setdefault(c, []).append(s)
    floor = array("q", [-1]) * n
    last_gate = -1
    store_waits: list[tuple[int, int]] = []  # (wait step, store cmd)
    recv_need: dict[int, int] = {}
    gates_load: list[tuple[int, int, int]] = []  # (receive's wait, load it gates, data use)
    signal: tuple[int, int] | None = None  # (wait step, store) another PE reads after
    for s in range(n):
        floor[s] = last_gate
        k = kinds[s]
        if k == BARRIER:
            last_gate = s
        elif k == SEND and signal is not None:
            floor[s] = max(last_gate, signal[0])
            pairs.append((s, signal[1]))
        elif k == WAIT:
            c = cmds[s]
            post = issue_step.get(c)
            kind = kinds[post] if post is not None else LOAD
            if kind in (STORE, SEND):
                if kind == STORE:
                    store_waits.append((s, c))
                    if read_elsewhere(c):
                        signal = (s, c)
                continue
            if not prog.knows_reads:
                prog.first_use[s] = s
                pairs.append((s, c))
                continue
            later = [u for u in uses.get(c, ()) if u > s]
            use = later[0] if later else n
            if kind == RECV:
                # A received message may also say that data elsewhere is ready: a store
                # or send issued after its wait, and a load of bytes another PE stores,
                # stay after it.
                nxt = s + 1
                while nxt < n and not (
                    kinds[nxt] in (STORE, SEND, BARRIER)
                    or (kinds[nxt] == LOAD and foreign(cmds[nxt]))
                ):
                    nxt += 1
                if nxt < use and kinds[nxt] == LOAD:
                    gates_load.append((s, nxt, use))
                use = min(use, nxt)
                recv_need[s] = use
                last_gate = s
            prog.first_use[s] = use
    for s, use in recv_need.items():
        if use < n:
            pairs.append((use, cmds[s]))
    if recv_need:
        prog.signalled = _foreign_loads(prog, min(recv_need), addr, nbytes, stores)
    # Fences: a load reading back bytes of a store this PE issued before it.
    _fences(prog, store_waits, floor, addr, nbytes, times, outside)
    for s, load_step, data_use in gates_load:
        # The load a receive's wait gates may move down with the wait, to just before
        # what needs the message or the loaded data, waits the load, must itself stay
        # after the message, or stores over the bytes the load reads.
        load = cmds[load_step]
        loaded_use = [u for u in uses.get(load, ()) if u > load_step]
        limit = min(data_use, prog.overwritten_at.get(load, n), *loaded_use[:1])
        end = load_step + 1
        while end < limit and not (
            kinds[end] in (STORE, SEND, BARRIER)
            or (kinds[end] == WAIT and cmds[end] == load)
            or (kinds[end] == LOAD and foreign(cmds[end]))
        ):
            end += 1
        if end > load_step + 1:
            prog.carried[s] = (load_step, end)
    # Needs of a step, CSR.
    pairs = sorted(set(pairs))
    need_at = np.zeros(n + 1, dtype=np.int64)
    if pairs:
        steps = np.array([p[0] for p in pairs], dtype=np.int64)
        np.add.at(need_at, steps + 1, 1)
    prog.need_at = _ints(np.cumsum(need_at))
    prog.need = _ints(np.array([p[1] for p in pairs], dtype=np.int64))
    prog.floor = floor


def _foreign_loads(prog: Program, after: int, addr, nbytes, stores) -> frozenset[int]:
    """The loads of ``prog`` issued after step ``after`` that read bytes another PE stores
    (``stores``: first byte, end and PE of every store of the launch)."""
    lo_all, hi_all, pe_all = stores
    others = pe_all != prog.pe
    kinds = np.frombuffer(prog.kind, dtype=np.int8)[after:]
    cmds = np.frombuffer(prog.cmd, dtype=np.int64)[after:][kinds == LOAD]
    cmds = cmds[(cmds >= 0) & (cmds < len(addr))]
    if not len(cmds) or not others.any():
        return frozenset()
    # Stores sorted by first byte, with the furthest end among those starting so far: a
    # load overlaps one iff, of the stores starting before its end, one ends past its start.
    order = np.argsort(lo_all[others], kind="stable")
    starts = lo_all[others][order]
    reach = np.maximum.accumulate(hi_all[others][order])
    lo = np.asarray(addr, dtype=np.int64)[cmds]
    hi = lo + np.asarray(nbytes, dtype=np.int64)[cmds]
    before = np.searchsorted(starts, hi, side="left")
    hit = (before > 0) & (reach[np.maximum(before - 1, 0)] > lo) & (hi > lo)
    return frozenset(cmds[hit].tolist())


def send_producers(prog: Program, reads: list[tuple[int, int]], shape, dtype) -> None:
    """Fill ``prog.producer``: per send step that reads no loaded or received data, the
    latest compute or composite step before it whose output has the send's shape and
    dtype. The trace names only a command's loaded and received operands, not the
    compute that made a computed one; a send of anything else (a view of a computed
    tile, a host array) gets -1, and the bound keeps it where it was issued."""
    reading = {s for s, _ in reads}
    kinds, cmds = prog.kind, prog.cmd
    n_cmds = min(len(shape), len(dtype))
    latest: dict[tuple[int, int], int] = {}
    for s in range(len(prog)):
        k = kinds[s]
        c = cmds[s]
        if not 0 <= c < n_cmds:
            continue
        key = (int(shape[c]), int(dtype[c]))
        if k == COMPUTE or k == OPAQUE:
            latest[key] = s
        elif k == SEND and s not in reading:
            # Without what each command reads (before format 1.3) a send may carry loaded
            # data no compute made: it stays where it was issued.
            prog.producer[s] = latest.get(key, -1) if prog.knows_reads else -1


def _fences(prog, store_waits, floor, addr, nbytes, times=None, outside=frozenset()) -> None:
    """Loads that read back bytes an earlier store of this PE writes: each needs the store
    landed, and may not be issued above the store's wait (above its issue when the kernel
    did not wait it first: that pair is a hazard, and the load still follows the store).
    A store not waited before the load is a fence only when this run read its bytes
    after it landed (else the run read the old bytes, and no bound may assume otherwise).
    Also, per load or store, the first later store of this PE to overlapping bytes
    (``prog.overwritten_at``): a wait on the access may not move below it."""

    def span(c: int) -> tuple[int, int]:
        if c in outside:  # bytes it did not mean to touch: no order is built on them
            return -1, -1
        lo = int(addr[c]) if 0 <= c < len(addr) else -1
        return lo, lo + (int(nbytes[c]) if 0 <= c < len(nbytes) else 0)

    def landed_first(stores: np.ndarray, load: int) -> np.ndarray:
        """Per store of ``stores``: whether this run read ``load`` after it landed."""
        if times is None:
            return np.ones(len(stores), dtype=bool)
        landed, read = times
        if not 0 <= load < len(read):
            return np.zeros(len(stores), dtype=bool)
        ok = (stores >= 0) & (stores < len(landed))
        when = np.asarray(landed)[np.where(ok, stores, 0)]
        return ok & (when >= 0) & (when <= read[load])

    kinds, cmds = prog.kind, prog.cmd
    n = len(prog)
    wait_of: dict[int, int] = {}
    for w, c in store_waits:
        wait_of.setdefault(c, w)
    n_stores = sum(1 for k in kinds if k == STORE)
    if not n_stores:
        return
    if n_stores > MAX_RANGE_FENCES:
        # Too many to match by range: a load follows the last store waited before it.
        last_wait, last_store = -1, -1
        waits = sorted(store_waits)
        w_at = 0
        for s in range(n):
            while w_at < len(waits) and waits[w_at][0] < s:
                last_wait, last_store = waits[w_at]
                w_at += 1
            if kinds[s] == LOAD and last_store >= 0:
                prog.fences[cmds[s]] = (last_store,)
                floor[s] = max(floor[s], last_wait)
        return
    # Stores so far (forward) or later (backward), sorted by their first byte; an access's
    # candidates are those starting less than the longest store before its end.
    earlier = _Spans()
    for s in range(n):
        k = kinds[s]
        if k == LOAD:
            c = cmds[s]
            lo, hi = span(c)
            steps, stores, waits = earlier.overlapping(lo, hi)
            if not len(stores):
                continue
            waited = waits < s
            fenced = stores[waited | landed_first(stores, c)]
            if len(fenced):
                prog.fences[c] = tuple(fenced.tolist())
            floor[s] = max(floor[s], int(np.where(waited, waits, steps).max()))
        elif k == STORE:
            lo, hi = span(cmds[s])
            if lo >= 0:
                earlier.add(lo, hi, s, cmds[s], wait_of.get(cmds[s], n))
    later = _Spans()
    for s in range(n - 1, -1, -1):
        k = kinds[s]
        if k not in (LOAD, STORE):
            continue
        lo, hi = span(cmds[s])
        steps, _, _ = later.overlapping(lo, hi)
        if len(steps):
            prog.overwritten_at[cmds[s]] = int(steps.min())
        if k == STORE and lo >= 0:
            # A later store inside this one's bytes is never the first to overwrite
            # anything (this one comes first, over all its bytes): drop it.
            later.add(lo, hi, s, cmds[s], n, drop_inside=True)


class _Spans:
    """Byte ranges [lo, hi) of stores, each with its step, command and wait step, found
    by overlap: sorted by first byte, an access's candidates are those starting less than
    the longest range before its end."""

    def __init__(self) -> None:
        # Columns: first byte, end, step, command, wait step (one row per range).
        self.table = np.zeros((5, 0), dtype=np.int64)
        self.longest = 0

    def add(
        self, lo: int, hi: int, step: int, cmd: int, wait: int, drop_inside: bool = False
    ) -> None:
        """Add [lo, hi) (``drop_inside``: removing the ranges it covers)."""
        starts = self.table[0]
        i = int(np.searchsorted(starts, lo, side="left"))
        if drop_inside:
            end = int(np.searchsorted(starts, hi, side="left"))
            inside = np.flatnonzero(self.table[1, i:end] <= hi) + i
            if len(inside):
                self.table = np.delete(self.table, inside, axis=1)
        row = np.array([[lo], [hi], [step], [cmd], [wait]], dtype=np.int64)
        self.table = np.insert(self.table, i, row[:, 0], axis=1)
        self.longest = max(self.longest, hi - lo)

    def overlapping(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, commands, wait steps) of every range overlapping [lo, hi)."""
        starts = self.table[0]
        if lo < 0 or not len(starts):
            return _NONE, _NONE, _NONE
        first = int(np.searchsorted(starts, lo - self.longest, side="right"))
        last = int(np.searchsorted(starts, hi, side="left"))
        if first >= last:
            return _NONE, _NONE, _NONE
        rows = self.table[:, first:last]
        rows = rows[:, rows[1] > lo]
        return rows[2], rows[3], rows[4]


_NONE = np.zeros(0, dtype=np.int64)
