"""What each step of a program needs: first uses, receive gates, store fences, floors.

From what each command reads (format 1.3) and the program's order, fills a
:class:`~kbdebug.analysis.model.Program`'s ``need_at``/``need`` (per step, the
commands whose data it needs), ``first_use`` (per wait, the step that first needs
its value), ``fences`` (per load, the waited stores of its PE it reads back),
``floor`` (per step, the last step no issue may move above) and ``producer`` (per send
of computed data, the compute that produced it).
"""

from __future__ import annotations

import bisect
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


def dependencies(prog: Program, reads: list[tuple[int, int]], addr, nbytes, stores) -> None:
    """Fill ``prog``'s needs, first uses, fences and floors from what its steps read.
    ``stores``: (first byte, end, PE) of every store of the launch."""
    lo_all, hi_all, pe_all = stores

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
    for s in range(n):
        floor[s] = last_gate
        k = kinds[s]
        if k == BARRIER:
            last_gate = s
        elif k == WAIT:
            c = cmds[s]
            post = issue_step.get(c)
            kind = kinds[post] if post is not None else LOAD
            if kind in (STORE, SEND):
                if kind == STORE:
                    store_waits.append((s, c))
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
                use = min(use, nxt)
                recv_need[s] = use
                last_gate = s
            prog.first_use[s] = use
    for s, use in recv_need.items():
        if use < n:
            pairs.append((use, cmds[s]))
    # Fences: a load reading back bytes of a store this PE waited before issuing it.
    if store_waits:
        _fences(prog, store_waits, floor, addr, nbytes)
    # Needs of a step, CSR.
    pairs = sorted(set(pairs))
    need_at = np.zeros(n + 1, dtype=np.int64)
    if pairs:
        steps = np.array([p[0] for p in pairs], dtype=np.int64)
        np.add.at(need_at, steps + 1, 1)
    prog.need_at = _ints(np.cumsum(need_at))
    prog.need = _ints(np.array([p[1] for p in pairs], dtype=np.int64))
    prog.floor = floor


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


def _fences(prog, store_waits, floor, addr, nbytes) -> None:
    """Loads that read back a store's bytes after its wait: each needs the store landed
    and may not be issued above that wait."""

    def span(c: int) -> tuple[int, int]:
        lo = int(addr[c]) if 0 <= c < len(addr) else -1
        return lo, lo + (int(nbytes[c]) if 0 <= c < len(nbytes) else 0)

    kinds, cmds = prog.kind, prog.cmd
    by_range = len(store_waits) <= MAX_RANGE_FENCES
    # Waited stores so far, sorted by their first byte; a load's candidates are those
    # starting less than the longest store before its end.
    starts: list[int] = []
    rows: list[tuple[int, int, int, int]] = []  # (lo, hi, wait step, store)
    longest = 0
    last_wait, last_store = -1, -1
    waits = sorted(store_waits)
    w_at = 0
    for s in range(len(prog)):
        while w_at < len(waits) and waits[w_at][0] < s:
            w, c = waits[w_at]
            lo, hi = span(c)
            w_at += 1
            last_wait, last_store = w, c
            if lo < 0:
                continue
            i = bisect.bisect_left(starts, lo)
            starts.insert(i, lo)
            rows.insert(i, (lo, hi, w, c))
            longest = max(longest, hi - lo)
        if kinds[s] != LOAD or w_at == 0:
            continue
        c = cmds[s]
        if not by_range:
            prog.fences[c] = (last_store,)
            floor[s] = max(floor[s], last_wait)
            continue
        lo, hi = span(c)
        first = bisect.bisect_right(starts, lo - longest)
        last = bisect.bisect_left(starts, hi)
        hit = [(w, st) for a, b, w, st in rows[first:last] if a < hi and b > lo]
        if hit:
            prog.fences[c] = tuple(st for _, st in hit)
            floor[s] = max(floor[s], max(w for w, _ in hit))
