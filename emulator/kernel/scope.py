"""Scope: what ``tl.scope()`` returns; it recycles the scratch buffers allocated inside."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emulator.kernel.tensor import Buffer
    from emulator.kernel.tl import TL


class Scope:
    """A context manager (a class: a generator-based one costs several times more,
    and kernels enter one per tile). On exit it recycles the buffers allocated
    inside, except those whose load or receive has not been waited yet: the scope
    that waits on one adopts it (ADR-0063: in-flight prefetch buffers are never
    recycled)."""

    __slots__ = ("_tl", "_frame")

    def __init__(self, tl: TL):
        self._tl = tl
        #: The buffers allocated inside and not recycled yet, by id, once entered.
        self._frame: dict[int, Buffer] = {}

    def __enter__(self) -> None:
        self._frame = {}
        self._tl._scopes.append(self._frame)

    def __exit__(self, *exc_info: object) -> None:
        tl = self._tl
        tl._scopes.pop()
        if tl.closed:
            return
        for buffer in self._frame.values():
            # The frame is closing: recycling must not remove the buffer from it mid-loop.
            buffer.frame = None
            if buffer.future is not None:
                buffer.orphan = True
            else:
                tl._free(buffer)
        self._frame = {}
