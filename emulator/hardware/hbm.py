"""HbmStack: the bandwidth of one HBM stack, shared by the DMA transfers of its PEs."""

from __future__ import annotations

import math


class HbmStack:
    """Serves the transfers of its PEs one after another at its own rate, in grant order.

    A transfer granted its DMA channel at cycle ``t`` gets the stack's next free
    slot: from ``max(t, free_at)`` for ``nbytes / bytes_per_cycle`` cycles. Its
    channel is held until the later of its own transfer time and the end of that
    slot, so PEs that together ask for less than the stack moves run at their
    channels' rate, and PEs that ask for more share it: the stack never moves
    more than ``bytes_per_cycle`` on average. Everything is decided at the grant,
    in the order SimPy grants, so runs stay exactly repeatable.
    """

    __slots__ = ("index", "bytes_per_cycle", "free_at", "busy_cycles")

    def __init__(self, index: int, bytes_per_cycle: int):
        if bytes_per_cycle < 1:
            raise ValueError(f'"bytes_per_cycle" must be >= 1, got {bytes_per_cycle!r}')
        #: Position in the mesh's stack table (what trace events name).
        self.index = index
        self.bytes_per_cycle = bytes_per_cycle
        #: Cycle from which no transfer holds the stack's bandwidth.
        self.free_at = 0
        #: Cycles of slots given out in total.
        self.busy_cycles = 0

    def reserve(self, now: int, nbytes: int) -> tuple[int, int]:
        """Give a transfer of ``nbytes`` granted at ``now`` the next slot: (cycles it
        waits for the slot to start, cycles the slot lasts)."""
        slot = max(1, math.ceil(nbytes / self.bytes_per_cycle))
        start = self.free_at if self.free_at > now else now
        self.free_at = start + slot
        self.busy_cycles += slot
        return start - now, slot
