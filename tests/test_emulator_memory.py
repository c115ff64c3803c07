"""What a long run keeps: nothing of a load or message the kernel has recycled and dropped.

Every check runs with the cyclic garbage collector off, so data kept alive by a
reference cycle (a buffer and its future pointing at each other) counts as kept:
on a long run such cycles pile up between full collections.
"""

from __future__ import annotations

import gc
import tracemalloc
import weakref
from contextlib import contextmanager

import numpy as np

from emulator import HardwareConfig, MemoryRecorder, run_kernel
from emulator.memory import Memory
from emulator.recorder import NullRecorder
from emulator.trace.writer import TraceWriter

RING = HardwareConfig(mesh_rows=1, mesh_cols=4, mesh_wrap=True)
BLOCK = (32, 64)  # 4 KiB of f16


@contextmanager
def no_cyclic_gc():
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def ring_kernel(steps: int, seen: dict[int, list[weakref.ref]] | None, scoped: bool):
    """Each PE passes a block right ``steps`` times, frees each block it held once it is
    sent on, and notes (weakly, in ``seen``) the array each received block arrived in."""

    def note(pe, block):
        if seen is not None:
            seen[pe].append(weakref.ref(block._values()))

    def kernel(tl, ptr):
        pe = tl.program_id(0)
        block = tl.load(ptr, BLOCK, "f16")
        note(pe, block)
        for _ in range(steps):
            tl.send("right", block)
            future = tl.recv_async("left", BLOCK, "f16")
            if scoped:
                with tl.scope():
                    block = tl.wait(future)
                    tl.send("right", block)  # sent again, then dropped with the scope
                    future = tl.recv_async("left", BLOCK, "f16")
            tl.free(block)
            block = tl.wait(future)
            note(pe, block)
        tl.free(block)

    return kernel


def run_ring(steps: int, *, scoped: bool, recorder=None) -> dict[int, list[weakref.ref]]:
    seen: dict[int, list[weakref.ref]] = {pe: [] for pe in range(4)}
    alive_during: list[int] = []
    kernel = ring_kernel(steps, seen, scoped)

    def checking(tl, ptr):
        kernel(tl, ptr)
        # At the end of PE 0's kernel: every block it received but its last is gone.
        if tl.program_id(0) == 0:
            alive_during.append(sum(ref() is not None for ref in seen[0][:-1]))

    memory = Memory(1 << 16)
    ptr = memory.put(np.ones(BLOCK, np.float16))
    with no_cyclic_gc():
        run_kernel(checking, (ptr,), (4,), memory, RING, recorder=recorder)
    assert alive_during == [0], f"{alive_during[0]} recycled blocks still referenced"
    return seen


def test_received_blocks_the_kernel_freed_and_dropped_are_not_kept():
    seen = run_ring(40, scoped=False)
    assert all(len(refs) == 41 for refs in seen.values())


def test_blocks_received_in_scopes_are_not_kept_after_their_scope(tmp_path):
    with TraceWriter(tmp_path / "ring.kbt") as writer:
        run_ring(40, scoped=True, recorder=writer)


def test_loaded_tiles_recycled_by_their_scope_are_not_kept():
    refs: list[weakref.ref] = []
    alive: list[int] = []

    def kernel(tl, ptr):
        for _ in range(50):
            with tl.scope():
                future = tl.load_async(ptr, BLOCK, "f16")
                tile = tl.wait(future)
                refs.append(weakref.ref(tile.data))
                tl.exp(tile)
            alive.append(sum(ref() is not None for ref in refs[:-1]))

    memory = Memory(1 << 16)
    ptr = memory.put(np.ones(BLOCK, np.float16))
    with no_cyclic_gc():
        run_kernel(kernel, (ptr,), (1,), memory, HardwareConfig(), recorder=MemoryRecorder())
    assert max(alive) == 0


def test_sends_never_waited_are_not_kept_once_delivered():
    handles: list[weakref.ref] = []
    peak: list[int] = []

    def kernel(tl):
        if tl.program_id(0) == 0:
            for _ in range(1000):
                handles.append(weakref.ref(tl.send("right", np.ones(8, np.float16))))
                tl.exp(np.ones(8, np.float32))  # time for the message to land
            peak.append(sum(ref() is not None for ref in handles))
        else:
            for _ in range(1000):
                tl.free(tl.wait(tl.recv_async("left", (8,), "f16")))

    config = HardwareConfig(mesh_rows=1, mesh_cols=2)
    with no_cyclic_gc():
        run_kernel(kernel, (), (2,), None, config)
    # A few dozen in flight or not yet dropped, never one per send.
    assert peak[0] <= 200


def test_a_long_ring_run_peaks_no_higher_than_a_short_one():
    """Traced, 400 steps of the ring (1,600 messages of 4 KiB: 6.4 MB if kept) peak less
    than 48 bytes a command above 25 steps: what grows with the run is the op log (16
    bytes a command, its arrays' growth by reallocation included)."""

    def peak(steps: int) -> int:
        memory = Memory(1 << 16)
        ptr = memory.put(np.ones(BLOCK, np.float16))
        kernel = ring_kernel(steps, None, scoped=False)
        recorder = CountingRecorder()
        tracemalloc.start()
        try:
            with no_cyclic_gc():
                run_kernel(kernel, (ptr,), (4,), memory, RING, recorder=recorder)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    short, long = peak(25), peak(400)
    more_commands = (400 - 25) * 4 * 2
    assert long - short < 48 * more_commands, (short, long)


class CountingRecorder(NullRecorder):
    """Counts events and keeps none (a recorder that keeps them would grow with the run)."""

    count = 0

    def emit(self, kind, time, pe, *fields) -> None:
        self.count += 1
