"""Handles a kernel can tl.wait on: LoadFuture, RecvFuture, CompletionHandle."""

from __future__ import annotations

from typing import Any

import simpy

from emulator.trace.schema import SourceLoc


class Waitable:
    """Something issued by one PE that resolves when its command completes."""

    __slots__ = (
        "id",
        "pe",
        "cmd",
        "event",
        "loc",
        "waited_at",
        "result",
        "__weakref__",
    )

    kind = "handle"

    def __init__(self, fid: int, pe: int, cmd: int, event: simpy.Event, loc: SourceLoc):
        #: Future id, unique within a launch (what traces and the debugger show).
        self.id = fid
        #: The PE that issued it (only that PE may wait on it).
        self.pe = pe
        self.cmd = cmd
        #: Fires when the command completes.
        self.event = event
        #: Where it was issued.
        self.loc = loc
        #: Where it was waited, once it has been.
        self.waited_at: SourceLoc | None = None
        #: What tl.wait returns, once it has been waited.
        self.result: Any = None

    @property
    def done(self) -> bool:
        """Whether the command has completed (a wait would not stall)."""
        return self.event.triggered  # a processed event has triggered too

    def __repr__(self) -> str:
        state = "waited" if self.waited_at else ("done" if self.done else "pending")
        return f"<{type(self).__name__} {self.id} pe={self.pe} {state} issued at {self.loc}>"


class LoadFuture(Waitable):
    """An HBM load in flight; tl.wait returns its TensorHandle."""

    __slots__ = ("buffer", "shape", "dtype")

    kind = "load"

    def __init__(self, fid, pe, cmd, event, loc, *, buffer, shape, dtype):
        super().__init__(fid, pe, cmd, event, loc)
        #: The scratch buffer the data lands in.
        self.buffer = buffer
        self.shape = shape
        self.dtype = dtype


class RecvFuture(Waitable):
    """An IPCQ receive; tl.wait returns the received TensorHandle."""

    __slots__ = ("buffer", "shape", "dtype", "direction")

    kind = "recv"

    def __init__(self, fid, pe, cmd, event, loc, *, buffer, shape, dtype, direction):
        super().__init__(fid, pe, cmd, event, loc)
        self.buffer = buffer
        self.shape = shape
        self.dtype = dtype
        self.direction = direction


class CompletionHandle(Waitable):
    """A store or send in flight; tl.wait returns None once it has landed."""

    __slots__ = ()

    kind = "completion"
