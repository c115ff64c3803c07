"""Floating-point warnings of a kernel's arithmetic, told at the kernel's own line.

numpy warns where its call is made: for ``tl.exp`` that is the emulator's module, so an
overflow in a user's kernel read as a fault of the emulator's file. Inside a kernel,
numpy's divide, overflow and invalid errors call :func:`warn_at_kernel_line`, which
warns at the innermost frame outside the emulator and numpy (the kernel's line).
"""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np

_OURS = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    os.path.dirname(os.path.abspath(np.__file__)) + os.sep,
)


def warn_at_kernel_line(kind: str, flag: int) -> None:
    """numpy's error callback (``np.errstate(call=...)``): a RuntimeWarning at the kernel's
    line, once per line as Python's default filter shows it."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_OURS):
        frame = frame.f_back
    message = f"{kind} encountered in the kernel's arithmetic"
    if frame is None:
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return
    warnings.warn_explicit(
        message,
        RuntimeWarning,
        frame.f_code.co_filename,
        frame.f_lineno,
        registry=frame.f_globals.setdefault("__warningregistry__", {}),
    )


def kernel_errstate() -> np.errstate:
    """numpy's error handling while a kernel runs: as numpy's defaults (underflow
    ignored), each warning told at the kernel's line."""
    return np.errstate(divide="call", over="call", invalid="call", call=warn_at_kernel_line)
