"""Vector clocks of messages: for a PE at a point of its program, the latest send of each
other PE it knows was issued (it waited that send's receive, or a message sent after
such a wait, in turn), which is what orders accesses across PEs for the hazard check.

Only waited receives carry knowledge (a posted receive not yet waited orders nothing),
and only the columns asked for are kept, so the clocks of a large mesh stay small.
"""

from __future__ import annotations

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.replay.tables import TraceIndex


class SendClocks:
    """Per PE asked for, its clock after each receive it waited: the event index of the
    latest known send issue of each PE of ``columns`` (-1: none known)."""

    def __init__(self, index: TraceIndex, pes: np.ndarray, columns: np.ndarray):
        n_pes = max(index.n_pes, 1)
        self._span = np.int64(index.n_events + 1)
        self._column = np.full(n_pes, -1, dtype=np.int64)
        self._column[columns] = np.arange(len(columns))
        wanted = np.zeros(n_pes, dtype=bool)
        wanted[pes] = True
        keys, rows = _propagate(index, self._column, wanted, len(columns), self._span)
        self._keys, self._rows = keys, rows

    def latest_send(self, pe: np.ndarray, before: np.ndarray, of: np.ndarray) -> np.ndarray:
        """Per query, the event index of the latest send issued by PE ``of`` that PE ``pe``
        knew of before event ``before`` (-1 when none; ``of`` must be a column)."""
        out = np.full(len(pe), -1, dtype=np.int64)
        if not len(self._keys) or not len(pe):
            return out
        at = np.searchsorted(self._keys, pe * self._span + before, side="left") - 1
        ok = at >= 0
        at = np.where(ok, at, 0)
        ok &= self._keys[at] // self._span == pe
        col = self._column[of]
        ok &= col >= 0
        out[ok] = self._rows[at[ok], col[ok]]
        return out


def _propagate(index, column, wanted, width, span):
    """(sorted keys pe * span + event, clock rows) after each waited receive of a wanted PE."""
    c, cm, fu = index.columns, index.commands, index.futures
    matched = np.flatnonzero(c.kind == Kind.IPCQ_RECV)
    send_cmd = c.cmd[matched].astype(np.int64)
    recv_fut = c.fut[matched].astype(np.int64)
    waited = fu.wait_end[recv_fut].astype(np.int64) if len(recv_fut) else recv_fut
    ok = (waited >= 0) & (cm.issue[send_cmd] >= 0) if len(send_cmd) else waited >= 0
    send_cmd, recv_fut, waited = send_cmd[ok], recv_fut[ok], waited[ok]
    n = len(send_cmd)
    when = np.concatenate([cm.issue[send_cmd].astype(np.int64), waited])
    where = np.concatenate([cm.pe[send_cmd].astype(np.int64), fu.pe[recv_fut].astype(np.int64)])
    which = np.concatenate([send_cmd, send_cmd])
    order = np.argsort(when, kind="stable")
    empty = np.full(width, -1, dtype=np.int64)
    clocks: dict[int, np.ndarray] = {}
    in_flight: dict[int, np.ndarray] = {}
    keys: list[int] = []
    rows: list[np.ndarray] = []
    for i in order.tolist():
        pe, cmd = int(where[i]), int(which[i])
        clock = clocks.get(pe, empty)
        if i < n:  # a send issued: its message carries the sender's clock
            stamp = clock.copy()
            col = int(column[pe])
            if col >= 0:
                stamp[col] = int(when[i])
            in_flight[cmd] = stamp
        else:  # its receive waited: the receiver knows all the sender knew
            stamp = in_flight.pop(cmd, None)
            if stamp is None:
                continue
            clock = np.maximum(clock, stamp)
            clocks[pe] = clock
            if wanted[pe]:
                keys.append(pe * int(span) + int(when[i]))
                rows.append(clock)
    if not rows:
        return np.empty(0, dtype=np.int64), np.empty((0, width), dtype=np.int64)
    keys_arr = np.array(keys, dtype=np.int64)
    sort = np.argsort(keys_arr, kind="stable")
    return keys_arr[sort], np.stack(rows)[sort]
