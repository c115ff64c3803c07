"""The hazard check against its definition: on random programs of 3 PEs (stores, loads
of partly overlapping ranges, waits in any order, messages both ways, receives waited
at once or later), the unordered pairs it finds are exactly those a naive check finds
by comparing every pair against vector clocks replayed event by event."""

from __future__ import annotations

import random

import numpy as np
import pytest

from emulator import HardwareConfig, Memory, run_kernel
from emulator.trace.schema import Kind
from kbdebug.analysis.hazard_order import Accesses, accesses_of, meets_stores, unordered_pairs
from kbdebug.replay import Replay

PES, REGION = 3, 256


def interpreter(tl, base, programs):
    """Runs this PE's program: ("store"|"load", offset, bytes), ("wait", k),
    ("send", direction), ("recv", direction, wait at once)."""
    pending = []
    for op in programs[tl.program_id(0)]:
        if op[0] == "store":
            pending.append(tl.store(base + op[1], tl.zeros((op[2] // 4,), "f32")))
        elif op[0] == "load":
            pending.append(tl.load_async(base + op[1], (op[2] // 4,), "f32"))
        elif op[0] == "wait" and pending:
            tl.wait(pending.pop(op[1] % len(pending)))
        elif op[0] == "send":
            pending.append(tl.send(op[1], tl.zeros((4,), "f32")))
        elif op[0] == "recv":
            future = tl.recv_async(op[1], (4,), "f32")
            if op[2]:
                tl.wait(future)
            else:
                pending.append(future)
    for handle in pending:
        tl.wait(handle)


def programs_of(seed: int) -> list[list[tuple]]:
    """Rounds of random local work, then a message to each neighbour (all sends of a
    round before any of its waits, so no program deadlocks)."""
    rng = random.Random(seed)
    out = []
    for pid in range(PES):
        ops: list[tuple] = []
        for _ in range(4):
            for _ in range(rng.randint(1, 5)):
                roll = rng.random()
                if roll < 0.45:
                    size = 16 * rng.randint(1, 4)
                    offset = 16 * rng.randint(0, (REGION - size) // 16)
                    ops.append((rng.choice(("store", "load")), offset, size))
                else:
                    ops.append(("wait", rng.randint(0, 7)))
            sides = [d for d, ok in (("right", pid < PES - 1), ("left", pid > 0)) if ok]
            ops += [("send", d) for d in sides]
            ops += [("recv", d, rng.random() < 0.7) for d in sides]
        out.append(ops)
    return out


def naive_unordered(replay: Replay) -> set[tuple[int, int]]:
    """Every pair (by command) of conflicting overlapping accesses that the vector
    clocks, replayed event by event, do not order."""
    index = replay.index
    acc = accesses_of(index)
    c, cm = index.columns, index.commands
    clock = [[-1] * PES for _ in range(PES)]
    stamps: dict[int, list[int]] = {}
    recv_of = {int(c.fut[i]): int(c.cmd[i]) for i in np.flatnonzero(c.kind == Kind.IPCQ_RECV)}
    send_op = index.string_id("send")
    at_issue = {}
    rows_by_cmd = {int(cmd): i for i, cmd in enumerate(acc.cmd)}
    for e in range(index.n_events):
        kind, pe = int(c.kind[e]), int(c.pe[e])
        if kind == Kind.ISSUE:
            cmd = int(c.cmd[e])
            if int(cm.op[cmd]) == send_op:
                stamp = list(clock[pe])
                stamp[pe] = e
                stamps[cmd] = stamp
            if cmd in rows_by_cmd:
                at_issue[rows_by_cmd[cmd]] = list(clock[pe])
        elif kind == Kind.WAIT_END and int(c.fut[e]) in recv_of:
            stamp = stamps[recv_of[int(c.fut[e])]]
            clock[pe] = [max(x, y) for x, y in zip(clock[pe], stamp, strict=True)]
    out = set()
    for i in range(len(acc)):
        for j in range(i + 1, len(acc)):
            if not (acc.write[i] or acc.write[j]):
                continue
            if acc.lo[i] >= acc.hi[j] or acc.lo[j] >= acc.hi[i]:
                continue
            a, b = (i, j) if acc.issue[i] < acc.issue[j] else (j, i)
            if acc.pe[a] == acc.pe[b]:
                ordered = acc.over[a] < acc.issue[b]
            else:
                ordered = acc.over[a] < at_issue[b][int(acc.pe[a])]
            if not ordered:
                out.add(tuple(sorted((int(acc.cmd[a]), int(acc.cmd[b])))))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_the_check_finds_exactly_the_unordered_pairs(tmp_path, seed):
    memory = Memory(size_bytes=REGION + (1 << 12))
    base = memory.alloc(REGION)
    config = HardwareConfig(mesh_rows=1, mesh_cols=PES)
    path = tmp_path / "random.kbt"
    run_kernel(interpreter, (base, programs_of(seed)), (PES,), memory, config, trace=path)
    replay = Replay.open(path, cache=False)
    acc = accesses_of(replay.index)
    found = unordered_pairs(replay.index, acc)
    pairs = {
        tuple(sorted((int(acc.cmd[a]), int(acc.cmd[b]))))
        for a, b in zip(found.first, found.second, strict=True)
    }
    assert len(pairs) == len(found.first)  # each pair once
    assert pairs == naive_unordered(replay)


def test_which_accesses_meet_a_store_is_what_every_pair_says():
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(1, 12))
        lo = rng.integers(0, 40, n).astype(np.int64)
        hi = lo + rng.integers(1, 12, n)
        write = rng.random(n) < 0.4
        none = np.zeros(n, dtype=np.int64)
        acc = Accesses(none, none, write, lo, hi, none, none, none, none - 1)
        meets = [[write[j] and lo[j] < hi[i] and lo[i] < hi[j] for j in range(n)] for i in range(n)]
        want = [any(row) for row in meets]
        assert list(meets_stores(acc)) == want, (lo, hi, write)
