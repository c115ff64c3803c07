"""The happens-before check behind hazards: every HBM access of a launch, the order the
kernels' waits and messages put between them, and the pairs of accesses to overlapping
bytes (at least one a store) that nothing orders.

When an access happens: a load reads HBM when its channel is granted (CHAN_GRANT), a
store's bytes land when it completes (COMPLETE). An access A is known to be over at a
point of its PE's program once A's future has been waited there (its WAIT_END); a
``tl.composite``'s own loads and stores once the composite call returns (its COMPLETE:
the call blocks until its last tile has landed). Access A is ordered before access B
(issued later) when A is over before B's issue in B's PE's program:

- on one PE: A's wait ends before B is issued (program order);
- across PEs: A's wait ends on PE q before some send of q whose receive B's PE p waited
  (``tl.wait`` of the ``tl.recv_async`` it matched) before B's issue, directly or
  through other PEs' messages in turn: a vector clock per PE holds, for each PE, the
  latest of its sends known to have been issued.

Nothing else orders two accesses: a store that happened to land before a load was
granted in this run is still unordered with it. Pairs are found by sorting the accesses
by address and sweeping (each access against those starting inside it), never all pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.replay.tables import TraceIndex

#: Ops that read HBM and ops that write it (a composite's own transfers included).
LOAD_OPS = ("load", "load_async", "composite.load")
STORE_OPS = ("store", "composite.store")
#: A composite call's own command (its transfers follow it on its PE).
COMPOSITE_OP = "composite"
#: Candidate pairs checked per numpy batch (bounds the memory of a dense overlap).
BATCH_PAIRS = 1 << 21
#: "Never" as an event index (an access never waited is never known to be over).
NEVER = np.iinfo(np.int64).max


@dataclass
class Accesses:
    """Every HBM access of the launch, one row each (arrays of one length)."""

    #: The command of the access.
    cmd: np.ndarray
    pe: np.ndarray
    #: True for a store.
    write: np.ndarray
    #: Bytes [lo, hi) it reads or writes.
    lo: np.ndarray
    hi: np.ndarray
    #: Its ISSUE's event index (its place in its PE's program).
    issue: np.ndarray
    #: The event where it touched HBM in this run (grant of a load, completion of a
    #: store), -1 if it never did (the run stopped first).
    happen: np.ndarray
    #: The event after which its PE's program knows it is over (its wait's end, its
    #: composite's completion), NEVER if it never is.
    over: np.ndarray
    #: The composite call it belongs to (its command), -1 for a tl call of its own.
    composite: np.ndarray

    def __len__(self) -> int:
        return len(self.cmd)


@dataclass
class Unordered:
    """The unordered pairs found (rows of Accesses; ``first`` as ``unordered_pairs``
    says), and for a pair across PEs, the latest send of ``first``'s PE issued after
    ``first`` that ``second``'s PE had waited for before issuing ``second`` (its command;
    -1 if none)."""

    first: np.ndarray
    second: np.ndarray
    known_send: np.ndarray


def accesses_of(index: TraceIndex) -> Accesses:
    """The loads and stores of the trace with their ranges, their place in the program,
    when they happened and when their PE's program knew them over."""
    cm, fu = index.commands, index.futures
    ops = {name: index.string_id(name) for name in (*LOAD_OPS, *STORE_OPS, COMPOSITE_OP)}
    load_ids = [ops[n] for n in LOAD_OPS if ops[n] >= 0]
    store_ids = [ops[n] for n in STORE_OPS if ops[n] >= 0]
    op = cm.op
    is_load, is_store = np.isin(op, load_ids), np.isin(op, store_ids)
    nbytes = cm.nbytes.astype(np.int64)
    keep = (is_load | is_store) & (cm.issue >= 0) & (cm.addr >= 0) & (nbytes > 0)
    cmd = np.flatnonzero(keep)
    write = is_store[cmd]
    lo = cm.addr[cmd].astype(np.int64)
    pe = cm.pe[cmd].astype(np.int64)
    issue = cm.issue[cmd].astype(np.int64)
    happen = np.where(write, cm.complete[cmd], cm.grant[cmd]).astype(np.int64)
    future = cm.future[cmd].astype(np.int64)
    over = np.full(len(cmd), NEVER, dtype=np.int64)
    own = future >= 0
    if own.any():
        ends = fu.wait_end[future[own]].astype(np.int64)
        over[own] = np.where(ends >= 0, ends, NEVER)
    composite = _enclosing_composite(index, ops[COMPOSITE_OP], cmd, pe, issue, ~own)
    inside = composite >= 0
    if inside.any():
        done = cm.complete[composite[inside]].astype(np.int64)
        over[inside] = np.where(done >= 0, done, NEVER)
    return Accesses(cmd, pe, write, lo, lo + nbytes[cmd], issue, happen, over, composite)


def _enclosing_composite(index, composite_op, cmd, pe, issue, candidates) -> np.ndarray:
    """Per access, the composite call on its PE it belongs to (-1 for none): the latest
    composite issued on that PE before it, for the accesses without a future."""
    out = np.full(len(cmd), -1, dtype=np.int64)
    if composite_op < 0 or not candidates.any():
        return out
    cm = index.commands
    calls = np.flatnonzero((cm.op == composite_op) & (cm.issue >= 0))
    if not len(calls):
        return out
    span = np.int64(index.n_events + 1)
    keys = cm.pe[calls].astype(np.int64) * span + cm.issue[calls].astype(np.int64)
    order = np.argsort(keys, kind="stable")
    keys, calls = keys[order], calls[order]
    rows = np.flatnonzero(candidates)
    at = np.searchsorted(keys, pe[rows] * span + issue[rows], side="right") - 1
    ok = at >= 0
    found = calls[np.where(ok, at, 0)]
    ok &= cm.pe[found].astype(np.int64) == pe[rows]
    out[rows[ok]] = found[ok]
    return out


def overlapping_pairs(acc: Accesses):
    """Batches of (x, y): rows of every pair of accesses to overlapping bytes, at least
    one a store, each pair once. Sorted by start address, an access overlaps exactly
    the later-sorted accesses that start before its end."""
    n = len(acc)
    if n < 2:
        return
    order = np.lexsort((acc.issue, acc.lo))
    lo, hi, write = acc.lo[order], acc.hi[order], acc.write[order]
    end = np.searchsorted(lo, hi, side="left")  # sorted positions < end start inside
    start = np.arange(1, n + 1)
    stores = np.flatnonzero(write)
    # A store meets every access after it; a load only the stores after it.
    count = np.where(
        write,
        np.maximum(end - start, 0),
        np.maximum(np.searchsorted(stores, end) - np.searchsorted(stores, start - 1, "right"), 0),
    )
    rows = np.flatnonzero(count)
    if not len(rows):
        return
    cum = np.cumsum(count[rows])
    first = 0
    while first < len(rows):
        base = cum[first - 1] if first else 0
        last = int(np.searchsorted(cum, base + BATCH_PAIRS, side="right"))
        last = max(last, first + 1)
        chunk = rows[first:last]
        counts = count[chunk]
        x = np.repeat(chunk, counts)
        offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        from_store = np.repeat(write[chunk], counts)
        # For a store, its k-th follower; for a load, its k-th following store.
        load_first = np.searchsorted(stores, np.repeat(chunk, counts), side="right")
        y = np.where(
            from_store,
            x + 1 + offsets,
            stores[np.minimum(load_first + offsets, max(len(stores) - 1, 0))],
        )
        yield order[x], order[y]
        first = last


def unordered_pairs(index: TraceIndex, acc: Accesses) -> Unordered:
    """Every pair of conflicting accesses that neither waits nor messages order.

    ``first`` is the access whose issue is known to precede the other's (program order,
    or a message waited after it); of two issued concurrently on two PEs, the store of a
    store and a load (the load may read its old bytes or its new ones), else the one
    issued first in this run."""
    firsts, seconds = [], []
    for x, y in overlapping_pairs(acc):
        swap = acc.issue[y] < acc.issue[x]
        a, b = np.where(swap, y, x), np.where(swap, x, y)
        # On one PE, a is ordered before b once its wait ends before b is issued.
        keep = (acc.over[a] > acc.issue[b]) | (acc.pe[a] != acc.pe[b])
        same = acc.composite[a] >= 0
        keep &= ~(same & (acc.composite[a] == acc.composite[b]))
        firsts.append(a[keep])
        seconds.append(b[keep])
    first = np.concatenate(firsts) if firsts else np.empty(0, dtype=np.int64)
    second = np.concatenate(seconds) if seconds else np.empty(0, dtype=np.int64)
    known = np.full(len(first), -1, dtype=np.int64)
    across = np.flatnonzero(acc.pe[first] != acc.pe[second])
    if len(across):
        a, b = first[across], second[across]
        sends = known_sends(index, acc, a, b)
        sent = np.where(sends >= 0, index.commands.issue[np.maximum(sends, 0)], -1)
        # Ordered through messages: a was over before the latest send b's PE knew of.
        ordered = (sends >= 0) & (acc.over[a] < sent)
        # a's issue known to b's PE (a send after it): a then b; else concurrent.
        issued_before = (sends >= 0) & (acc.issue[a] < sent)
        known[across] = np.where(issued_before, sends, -1)
        swap = ~issued_before & ~acc.write[a] & acc.write[b]
        first[across[swap]], second[across[swap]] = b[swap], a[swap]
        drop = np.zeros(len(first), dtype=bool)
        drop[across[ordered]] = True
        first, second, known = first[~drop], second[~drop], known[~drop]
    return Unordered(first, second, known)


def known_sends(index: TraceIndex, acc: Accesses, first: np.ndarray, second: np.ndarray):
    """Per pair across PEs, the command of the latest send of ``first``'s PE that
    ``second``'s PE knew issued (waited its message, or one sent after it in turn)
    when it issued ``second``; -1 if none. Vector clocks restricted to the PEs asked."""
    asked = np.unique(acc.pe[first])
    column = {int(q): i for i, q in enumerate(asked)}
    c, cm, fu = index.columns, index.commands, index.futures
    matched = np.flatnonzero(c.kind == Kind.IPCQ_RECV)
    send_cmd = c.cmd[matched].astype(np.int64)
    recv_fut = c.fut[matched].astype(np.int64)
    waited = fu.wait_end[recv_fut].astype(np.int64) if len(recv_fut) else recv_fut
    ok = waited >= 0
    send_cmd, recv_fut, waited = send_cmd[ok], recv_fut[ok], waited[ok]
    send_issue = cm.issue[send_cmd].astype(np.int64)
    send_pe = cm.pe[send_cmd].astype(np.int64)
    recv_pe = fu.pe[recv_fut].astype(np.int64)
    # Three streams in event order: 0 a send issued, 1 a receive waited, 2 a question.
    n_q = len(first)
    when = np.concatenate([send_issue, waited, acc.issue[second]])
    what = np.concatenate(
        [np.zeros(len(send_cmd), np.int64), np.ones(len(send_cmd), np.int64), np.full(n_q, 2)]
    )
    where = np.concatenate([send_pe, recv_pe, acc.pe[second]])
    which = np.concatenate([send_cmd, send_cmd, np.arange(n_q)])
    order = np.argsort(when, kind="stable")
    width = len(asked)
    clocks: dict[int, np.ndarray] = {}
    snapshot: dict[int, np.ndarray] = {}
    answer = np.full(n_q, -1, dtype=np.int64)
    want = np.array([column[int(q)] for q in acc.pe[first]], dtype=np.int64)
    empty = np.full(width, -1, dtype=np.int64)
    for i in order.tolist():
        kind, pe, item = int(what[i]), int(where[i]), int(which[i])
        clock = clocks.get(pe, empty)
        if kind == 0:
            stamp = clock.copy()
            if pe in column:
                stamp[column[pe]] = item
            snapshot[item] = stamp
        elif kind == 1:
            stamp = snapshot.pop(item, None)
            if stamp is not None:
                clocks[pe] = np.maximum(clock, stamp)
        else:
            answer[item] = clock[want[item]]
    return answer
