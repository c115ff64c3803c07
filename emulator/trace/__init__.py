"""The .kbt trace: schema shared by both sides, the streaming writer, the validating reader."""

from emulator.trace.errors import TraceFormatError

__all__ = ["TraceFormatError"]
