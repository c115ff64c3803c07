"""The emulator's error classes; each message names the PE, the source line and the bad value."""

from __future__ import annotations

from emulator.trace.schema import SourceLoc


class EmulatorError(Exception):
    """Anything the emulator refuses; ``pe`` and ``loc`` say where, when known."""

    def __init__(self, message: str, *, pe: int | None = None, loc: SourceLoc | None = None):
        self.pe = pe
        self.loc = loc
        self.detail = message
        where = []
        if pe is not None:
            where.append(f"PE {pe}")
        if loc is not None:
            where.append(f"{loc.file}:{loc.line}")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(prefix + message)


class ConfigError(EmulatorError, ValueError):
    """A HardwareConfig field has a bad value (the message names the field)."""


class AddressError(EmulatorError):
    """An HBM access falls outside the memory."""


class DtypeError(EmulatorError):
    """A dtype name the emulator does not know."""


class ShapeError(EmulatorError):
    """A shape that does not match the data or the other operand."""


class ScratchError(EmulatorError):
    """A misuse of the on-chip scratch buffer."""


class ScratchOverflowError(ScratchError):
    """An allocation that does not fit in the remaining scratch capacity."""


class InFlightRecycleError(ScratchError):
    """A buffer freed while the load that fills it is still in flight."""


class RecycledBufferError(ScratchError):
    """A tensor used after its scratch buffer was recycled."""


class WaitError(EmulatorError):
    """A tl.wait on something that cannot be waited here."""


class ForeignFutureError(WaitError):
    """A future waited on by a PE other than the one that issued it."""


class DoubleWaitError(WaitError):
    """A future waited on a second time."""


class KernelError(EmulatorError):
    """An exception raised by kernel code; the original is ``__cause__``, its traceback kept."""

    def __init__(
        self,
        message: str,
        *,
        pe: int | None = None,
        loc: SourceLoc | None = None,
        kernel_traceback: str = "",
    ):
        super().__init__(message, pe=pe, loc=loc)
        self.kernel_traceback = kernel_traceback


class DeadlockError(EmulatorError):
    """No event is left while kernels still wait; ``blocked`` lists (pe, what, loc)."""

    def __init__(self, message: str, *, blocked: list[tuple[int, str, SourceLoc | None]]):
        super().__init__(message)
        self.blocked = blocked
