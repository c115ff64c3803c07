"""Scratch: the PE's on-chip buffer, with a capacity that allocations may not exceed."""

from __future__ import annotations

from emulator.errors import ScratchOverflowError
from emulator.recorder import Recorder, emitter
from emulator.trace.schema import Kind

# Kind members as module constants: reading Kind.X costs a descriptor lookup per event.
_SCRATCH_ALLOC = Kind.SCRATCH_ALLOC
_SCRATCH_FREE = Kind.SCRATCH_FREE


class Scratch:
    """Tracks the bytes of each live buffer on one PE and records every alloc and free."""

    __slots__ = ("env", "_emit", "pe", "capacity", "in_use", "peak", "buffers")

    def __init__(self, env, recorder: Recorder | None, *, pe: int, capacity: int):
        self.env = env
        #: ``recorder.emit``, None when nothing is recorded.
        self._emit = emitter(recorder)
        self.pe = pe
        self.capacity = capacity
        #: Bytes currently allocated.
        self.in_use = 0
        #: Highest ``in_use`` seen.
        self.peak = 0
        #: Live buffers: id -> bytes.
        self.buffers: dict[int, int] = {}

    def check(self, nbytes: int) -> None:
        """Raise ScratchOverflowError unless ``nbytes`` more would fit."""
        if self.in_use + nbytes > self.capacity:
            raise ScratchOverflowError(
                f"scratch overflow: {nbytes} bytes requested with {self.in_use} of "
                f"{self.capacity} in use"
            )

    def alloc(self, buffer: int, nbytes: int, *, record: bool = True) -> None:
        """Reserve ``nbytes`` as ``buffer``; ScratchOverflowError if they do not fit.

        ``record=False``: the caller records the SCRATCH_ALLOC event itself (in a
        compound record with the command that allocates).
        """
        self.check(nbytes)
        self.buffers[buffer] = nbytes
        self.in_use += nbytes
        if self.in_use > self.peak:
            self.peak = self.in_use
        if record and self._emit is not None:
            self._emit(_SCRATCH_ALLOC, self.env.now, self.pe, buffer, nbytes, self.in_use)

    def free(self, buffer: int) -> None:
        """Release ``buffer`` (ignored if it is not live)."""
        nbytes = self.buffers.pop(buffer, None)
        if nbytes is None:
            return
        self.in_use -= nbytes
        if self._emit is not None:
            self._emit(_SCRATCH_FREE, self.env.now, self.pe, buffer, nbytes, self.in_use)
