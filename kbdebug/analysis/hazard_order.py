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

from dataclasses import dataclass, fields

import numpy as np

from kbdebug.analysis.hazard_clocks import SendClocks
from kbdebug.replay.tables import TraceIndex

#: Ops that read HBM and ops that write it (a composite's own transfers included).
LOAD_OPS = ("load", "load_async", "composite.load")
STORE_OPS = ("store", "composite.store")
#: A composite call's own command (its transfers follow it on its PE).
COMPOSITE_OP = "composite"
#: Earlier accesses of one PE to the same bytes an access is paired with when unordered:
#: the earliest, and the unordered among the MAX_EARLIER latest (a racy loop pairs each
#: store with every earlier one; the lines are named by the first few).
MAX_EARLIER = 8
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
    addr = cm.addr.astype(np.int64)
    keep = (is_load | is_store) & (cm.issue >= 0) & (addr >= 0) & (nbytes > 0)
    # A range past the int64 addresses (only a forged trace has one) is no access.
    keep &= addr <= np.iinfo(np.int64).max - np.maximum(nbytes, 0)
    cmd = np.flatnonzero(keep)
    write = is_store[cmd]
    lo = addr[cmd]
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


def without(acc: Accesses, cmds) -> Accesses:
    """The accesses but those of ``cmds`` (commands): an access outside its tensor (KB204)
    is the bug itself, never half of a race on the bytes it happened to reach."""
    if not len(cmds):
        return acc
    keep = ~np.isin(acc.cmd, np.fromiter(cmds, dtype=np.int64))
    return Accesses(*(getattr(acc, f.name)[keep] for f in fields(Accesses)))


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


def _incidences(acc: Accesses) -> tuple[np.ndarray, np.ndarray]:
    """(segment, access row) of every access over every elementary segment it covers
    (the address space cut at every access's ends), only for segments that a store and
    at least one other access cover: where a hazard can be. Sorted by segment.

    Only the accesses that meet some store's bytes are cut (the loads of read-only data,
    most of a trace's, never are)."""
    near = np.flatnonzero(meets_stores(acc))
    bounds = np.unique(np.concatenate([acc.lo[near], acc.hi[near]]))
    first = np.searchsorted(bounds, acc.lo[near])
    count = np.searchsorted(bounds, acc.hi[near]) - first
    rows = np.repeat(near, count)
    first = np.repeat(first, count)
    seg = first + _ramps(count)
    n_seg = len(bounds)
    stores = np.bincount(seg, weights=acc.write[rows], minlength=n_seg)
    touches = np.bincount(seg, minlength=n_seg)
    keep = (stores[seg] > 0) & (touches[seg] > 1)
    return seg[keep], rows[keep]


def meets_stores(acc: Accesses) -> np.ndarray:
    """Per access, whether its bytes overlap those of some store (its own, for a store)."""
    stores = np.flatnonzero(acc.write)
    if not len(stores):
        return np.zeros(len(acc), dtype=bool)
    # The stores' bytes as disjoint sorted spans: the running end of the stores sorted by
    # start; a span closes where the next store starts past it.
    order = stores[np.argsort(acc.lo[stores], kind="stable")]
    lo, end = acc.lo[order], np.maximum.accumulate(acc.hi[order])
    opens = np.r_[True, lo[1:] >= end[:-1]]
    span_lo = lo[opens]
    span_hi = end[np.r_[np.flatnonzero(opens)[1:] - 1, len(lo) - 1]]
    # The last span starting before an access's end meets it if it ends after its start.
    at = np.searchsorted(span_lo, acc.hi, side="left") - 1
    return (at >= 0) & (span_hi[np.maximum(at, 0)] > acc.lo)


def unordered_pairs(index: TraceIndex, acc: Accesses) -> Unordered:
    """Every pair of conflicting accesses that neither waits nor messages order.

    ``first`` is the access whose issue is known to precede the other's (program order,
    or a message waited after it); of two issued concurrently on two PEs, the store of a
    store and a load (the load may read its old bytes or its new ones), else the one
    issued first in this run.

    Per elementary segment, the accesses of each PE and kind are a run in issue order
    with the running maximum of when each is known over; an access B is checked against
    a run of PE q at once (the latest point of q's program B knows of, against that
    maximum), and the pairs are listed only where the check fails.
    """
    empty = np.empty(0, dtype=np.int64)
    seg, row = _incidences(acc)
    if not len(row):
        return Unordered(empty, empty, empty)
    n, n_pes = np.int64(index.n_events), np.int64(max(index.n_pes, 1))
    order = np.lexsort((acc.issue[row], acc.write[row], acc.pe[row], seg))
    seg, row = seg[order], row[order]
    pe, write, issue = acc.pe[row], acc.write[row].astype(np.int64), acc.issue[row]
    over = np.minimum(acc.over[row], n + 1)
    run_key = (seg * n_pes + pe) * 2 + write
    starts_run = np.r_[True, run_key[1:] != run_key[:-1]]
    run = np.cumsum(starts_run) - 1
    run_start, run_keys = np.flatnonzero(starts_run), run_key[starts_run]
    # The running maximum of `over` within each run (runs offset apart so one pass does,
    # and the offset maxima increase through the runs: searchsorted finds in them).
    running = np.maximum.accumulate(run * (n + 2) + over)
    prefix_over = running - run * (n + 2)
    position = run * (n + 1) + issue  # increasing: runs in order, issues within them

    b, q, kind = _questions(seg, pe, write, n_pes)
    key = (seg[b] * n_pes + q) * 2 + kind
    r = np.minimum(np.searchsorted(run_keys, key), len(run_keys) - 1)
    exists = run_keys[r] == key
    before = np.searchsorted(position, r * (n + 1) + issue[b]) - run_start[r]
    asked = exists & (before > 0)
    b, q, r, before = b[asked], q[asked], r[asked], before[asked]
    latest = prefix_over[run_start[r] + before - 1]
    # What B's PE knows of q's program at B's issue: on its own PE, everything before
    # B; on another, up to the latest send of q whose message it waited.
    known = issue[b].copy()
    across = q != pe[b]
    if across.any():
        clocks = SendClocks(index, np.unique(pe[b][across]), np.unique(q[across]))
        known[across] = clocks.latest_send(pe[b][across], issue[b][across], q[across])
    failed = latest > known
    b, r, before, known = b[failed], r[failed], before[failed], known[failed]
    # The accesses of the run before B not over by then: the earliest (where the running
    # maximum first passes what B knows) and those among the latest MAX_EARLIER.
    take = np.minimum(before, MAX_EARLIER)
    owner = np.concatenate([np.repeat(np.arange(len(b)), take), np.arange(len(b))])
    earliest = np.searchsorted(running, r * (n + 2) + known, side="right")
    at = np.concatenate([np.repeat(run_start[r] + before - take, take) + _ramps(take), earliest])
    late = over[at] > known[owner]
    a_row, b_row, known = row[at[late]], row[b[owner[late]]], known[owner[late]]
    # A pair over several segments is found in each: keep one.
    _, unique = np.unique(a_row * np.int64(len(acc)) + b_row, return_index=True)
    a_row, b_row, known = a_row[unique], b_row[unique], known[unique]
    keep = ~((acc.composite[a_row] >= 0) & (acc.composite[a_row] == acc.composite[b_row]))
    return _directed(index, acc, a_row[keep], b_row[keep], known[keep])


def _ramps(count: np.ndarray) -> np.ndarray:
    """0, 1, ..., count[0] - 1, 0, 1, ..., count[1] - 1, ...: offsets within repeats."""
    return np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)


def _questions(seg, pe, write, n_pes):
    """(incidence B, PE q, kind of access asked for) for every incidence against every
    PE present in its segment: a store against both kinds, a load against stores."""
    seg_pe = np.unique(seg * n_pes + pe)
    seg_of = seg_pe // n_pes
    segs, first, count = np.unique(seg_of, return_index=True, return_counts=True)
    slot = np.searchsorted(segs, seg)
    per = count[slot]
    b = np.repeat(np.arange(len(seg)), per)
    q = seg_pe[np.repeat(first[slot], per) + _ramps(per)] % n_pes
    stores = write[b] == 1
    b = np.concatenate([b, b[stores]])
    q = np.concatenate([q, q[stores]])
    kind = np.concatenate([np.ones(len(stores), np.int64), np.zeros(int(stores.sum()), np.int64)])
    return b, q, kind


def _directed(index, acc, a, b, known) -> Unordered:
    """The pairs with ``first`` as ``unordered_pairs`` says, and each cross-PE pair's
    send that would order it (the latest one of ``first``'s PE after ``first``)."""
    send = np.full(len(a), -1, dtype=np.int64)
    across = np.flatnonzero(acc.pe[a] != acc.pe[b])
    if len(across):
        sent = known[across]
        issued_before = (sent >= 0) & (acc.issue[a[across]] < sent)
        cmds = index.columns.cmd[np.maximum(sent, 0)].astype(np.int64)
        send[across] = np.where(issued_before, cmds, -1)
        swap = ~issued_before & ~acc.write[a[across]] & acc.write[b[across]]
        flip = across[swap]
        a[flip], b[flip] = b[flip], a[flip].copy()
    return Unordered(a, b, send)
