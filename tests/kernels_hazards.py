"""Small kernels with a hazard of each class, on one PE and across PEs, and their fenced
twins. Lines a test looks for carry ``# mark: NAME``; ``record`` runs one to a trace.

``*_bug`` kernels have exactly one pair of lines left unordered; ``*_fenced`` twins put
the wait (and the message) that orders it, or keep the ranges disjoint.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np

from emulator import HardwareConfig, Memory, run_kernel

SHAPE = (8, 16)
TILE = 8 * 16 * 4  # bytes of one f32 tile


# --- one PE ----------------------------------------------------------------------------


def raw_bug(tl, x, buf, out):
    t = tl.load(x, SHAPE, "f32")
    tl.store(buf, t * 2)  # mark: first
    back = tl.wait(tl.load_async(buf, SHAPE, "f32"))  # mark: second
    tl.wait(tl.store(out, back))


def raw_fenced(tl, x, buf, out):
    t = tl.load(x, SHAPE, "f32")
    stored = tl.store(buf, t * 2)
    tl.wait(stored)
    back = tl.wait(tl.load_async(buf, SHAPE, "f32"))
    tl.wait(tl.store(out, back))


def raw_lucky(tl, x, buf, out):
    """The store lands before the read-back in this run (a blocking load between), yet
    nothing orders them."""
    t = tl.load(x, SHAPE, "f32")
    tl.store(buf, t * 2)  # mark: first
    tl.load(x, SHAPE, "f32")
    back = tl.wait(tl.load_async(buf, SHAPE, "f32"))  # mark: second
    tl.wait(tl.store(out, back))


def raw_behind_fenced_stores(tl, x, buf, out):
    """A store never waited, then many stores each waited, then the load: the first
    store is unordered with every later access however many ordered ones come between."""
    t = tl.load(x, SHAPE, "f32")
    tl.store(buf, t)  # mark: first
    for _ in range(12):
        tl.wait(tl.store(buf, t))  # mark: loop
    back = tl.wait(tl.load_async(buf, SHAPE, "f32"))  # mark: second
    tl.wait(tl.store(out, back))


def _put(tl, ptr, t):
    return tl.store(ptr, t)  # mark: first


def _get(tl, ptr):
    return tl.load_async(ptr, SHAPE, "f32")  # mark: second


def helpers_bug(tl, x, buf, out):
    """The store and the read-back each in a helper, the store waited after."""
    t = tl.load(x, SHAPE, "f32")
    stored = _put(tl, buf, t)
    pending = _get(tl, buf)  # mark: get
    tl.wait(stored)
    tl.wait(tl.store(out, tl.wait(pending)))


def raw_late_wait(tl, x, buf, out):
    """The store is waited, but only after the load that reads it back."""
    t = tl.load(x, SHAPE, "f32")
    stored = tl.store(buf, t * 2)  # mark: first
    pending = tl.load_async(buf, SHAPE, "f32")  # mark: second
    tl.wait(stored)  # mark: late
    tl.wait(tl.store(out, tl.wait(pending)))


def war_bug(tl, x, buf, out):
    pending = tl.load_async(buf, SHAPE, "f32")  # mark: first
    t = tl.load(x, SHAPE, "f32")
    tl.wait(tl.store(buf, t))  # mark: second
    tl.wait(tl.store(out, tl.wait(pending)))


def war_fenced(tl, x, buf, out):
    pending = tl.load_async(buf, SHAPE, "f32")
    t = tl.load(x, SHAPE, "f32")
    old = tl.wait(pending)
    tl.wait(tl.store(buf, t))
    tl.wait(tl.store(out, old))


def waw_bug(tl, x, buf, out):
    t = tl.load(x, SHAPE, "f32")
    first = tl.store(buf, t)  # mark: first
    second = tl.store(buf, t * 3)  # mark: second
    tl.wait(first)
    tl.wait(second)


def waw_fenced(tl, x, buf, out):
    t = tl.load(x, SHAPE, "f32")
    tl.wait(tl.store(buf, t))
    tl.wait(tl.store(buf, t * 3))


def adjacent_fenced(tl, x, buf, out):
    """A store and a load of the bytes just after it: adjacent, not overlapping."""
    t = tl.load(x, SHAPE, "f32")
    tl.store(buf, t)
    after = tl.wait(tl.load_async(buf + TILE, SHAPE, "f32"))
    tl.wait(tl.store(out, after))


# --- across PEs (a 1 x n row; PE 0 on the left) ----------------------------------------


def raw_across_bug(tl, x, buf, out):
    """PE 0 stores and tells PE 1 before its store is waited."""
    if tl.program_id(0) == 0:
        t = tl.load(x, SHAPE, "f32")
        stored = tl.store(buf, t)  # mark: first
        tl.wait(tl.send("right", t))  # mark: send
        tl.wait(stored)
    else:
        tl.wait(tl.recv_async("left", SHAPE, "f32"))
        back = tl.wait(tl.load_async(buf, SHAPE, "f32"))  # mark: second
        tl.wait(tl.store(out, back))


def raw_across_fenced(tl, x, buf, out):
    """PE 0 waits its store, then tells PE 1, which waits the message before loading."""
    if tl.program_id(0) == 0:
        t = tl.load(x, SHAPE, "f32")
        tl.wait(tl.store(buf, t))
        tl.wait(tl.send("right", t))
    else:
        tl.wait(tl.recv_async("left", SHAPE, "f32"))
        back = tl.wait(tl.load_async(buf, SHAPE, "f32"))
        tl.wait(tl.store(out, back))


def raw_across_unsent(tl, x, buf, out):
    """PE 1 loads what PE 0 stores, with no message at all."""
    if tl.program_id(0) == 0:
        t = tl.load(x, SHAPE, "f32")
        tl.wait(tl.store(buf, t))  # mark: first
    else:
        back = tl.wait(tl.load_async(buf, SHAPE, "f32"))  # mark: second
        tl.wait(tl.store(out, back))


def war_across_bug(tl, x, buf, out):
    """PE 0 tells PE 1 it may overwrite before PE 0's load of the bytes is waited."""
    if tl.program_id(0) == 0:
        pending = tl.load_async(buf, SHAPE, "f32")  # mark: first
        tl.wait(tl.send("right", tl.zeros(SHAPE, "f32")))
        tl.wait(tl.store(out, tl.wait(pending)))
    else:
        t = tl.load(x, SHAPE, "f32")
        tl.wait(tl.recv_async("left", SHAPE, "f32"))
        tl.wait(tl.store(buf, t))  # mark: second


def war_across_fenced(tl, x, buf, out):
    if tl.program_id(0) == 0:
        old = tl.wait(tl.load_async(buf, SHAPE, "f32"))
        tl.wait(tl.send("right", tl.zeros(SHAPE, "f32")))
        tl.wait(tl.store(out, old))
    else:
        t = tl.load(x, SHAPE, "f32")
        tl.wait(tl.recv_async("left", SHAPE, "f32"))
        tl.wait(tl.store(buf, t))


def waw_across_bug(tl, x, buf, out):
    """Both PEs store the same tile, nothing between them."""
    t = tl.load(x, SHAPE, "f32")
    tl.wait(tl.store(buf, t + tl.program_id(0)))  # mark: both


def chain_fenced(tl, x, buf, out):
    """PE 0 stores and waits, then a message goes PE 0 -> 1 -> 2; PE 2 loads after it."""
    pid = tl.program_id(0)
    if pid == 0:
        t = tl.load(x, SHAPE, "f32")
        tl.wait(tl.store(buf, t))
        tl.send("right", t)
    elif pid == 1:
        t = tl.wait(tl.recv_async("left", SHAPE, "f32"))
        tl.send("right", t)
    else:
        tl.wait(tl.recv_async("left", SHAPE, "f32"))
        back = tl.wait(tl.load_async(buf, SHAPE, "f32"))
        tl.wait(tl.store(out, back))


def chain_bug(tl, x, buf, out):
    """As chain_fenced, but PE 1 passes the message on before waiting what it got."""
    pid = tl.program_id(0)
    if pid == 0:
        t = tl.load(x, SHAPE, "f32")
        tl.wait(tl.store(buf, t))  # mark: first
        tl.send("right", t)
    elif pid == 1:
        got = tl.recv_async("left", SHAPE, "f32")
        tl.send("right", tl.zeros(SHAPE, "f32"))
        tl.wait(got)
    else:
        tl.wait(tl.recv_async("left", SHAPE, "f32"))
        back = tl.wait(tl.load_async(buf, SHAPE, "f32"))  # mark: second
        tl.wait(tl.store(out, back))


def composite_bug(tl, x, buf, out):
    """A composite reads as its A operand what a store not yet waited writes."""
    t = tl.load(x, SHAPE, "f32")
    tl.store(buf, t.to("f16"))  # mark: first
    tl.composite(buf, (8, 16), x, (16, 8), out, tile=8, dtype="f16")  # mark: second


def composite_fenced(tl, x, buf, out):
    t = tl.load(x, SHAPE, "f32")
    tl.wait(tl.store(buf, t.to("f16")))
    tl.composite(buf, (8, 16), x, (16, 8), out, tile=8, dtype="f16")
    back = tl.wait(tl.load_async(out, (8, 8), "f32"))
    tl.wait(tl.store(out + TILE, back))


def composite_across_bug(tl, x, buf, out):
    """PE 0's composite writes out; PE 1 reads it with no message between."""
    if tl.program_id(0) == 0:
        tl.composite(x, (8, 16), x, (16, 8), out, tile=8, dtype="f16")  # mark: first
    else:
        back = tl.wait(tl.load_async(out, (8, 8), "f32"))  # mark: second
        tl.wait(tl.store(buf, back))


def composite_across_fenced(tl, x, buf, out):
    """PE 0 sends once its composite has returned; PE 1 reads after that message."""
    if tl.program_id(0) == 0:
        tl.composite(x, (8, 16), x, (16, 8), out, tile=8, dtype="f16")
        tl.wait(tl.send("right", tl.zeros(SHAPE, "f32")))
    else:
        tl.wait(tl.recv_async("left", SHAPE, "f32"))
        back = tl.wait(tl.load_async(out, (8, 8), "f32"))
        tl.wait(tl.store(buf, back))


def record(kernel, path: Path, pes: int = 1) -> Path:
    """Run ``kernel`` on a row of ``pes`` PEs (x: one tile of data, buf: two tiles, out:
    a tile per PE) and write its trace to ``path``."""
    memory = Memory(size_bytes=16 * TILE + (1 << 12))
    x = memory.put(np.arange(8 * 16, dtype=np.float32).reshape(SHAPE))
    buf = memory.alloc(2 * TILE)
    memory.name("buf", buf, (16, 16), "f32")  # two tiles of 8 rows
    out = memory.alloc(pes * TILE)
    memory.name("out", out, (pes * 8, 16), "f32")
    config = HardwareConfig(mesh_rows=1, mesh_cols=pes)
    run_kernel(kernel, (x, buf, out), (pes,), memory, config, trace=path)
    return path


def line_of(kernel, mark: str) -> int:
    """The line of ``kernel``'s source carrying ``# mark: NAME``."""
    lines, first = inspect.getsourcelines(kernel)
    for i, text in enumerate(lines):
        if f"# mark: {mark}" in text:
            return first + i
    raise LookupError(mark)
