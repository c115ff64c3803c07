"""A deterministic emulator of processing elements that runs Triton-style kernels."""

from __future__ import annotations

import importlib
from typing import Any

# Where each public name lives. They are imported on first use (PEP 562), so a reader
# of traces (the replay, the app) that only needs emulator.trace does not pay for the
# kernel runtime (SimPy, greenlet) it never runs.
_HOMES = {
    "HardwareConfig": "emulator.config",
    "Memory": "emulator.memory",
    "MemoryRecorder": "emulator.recorder",
    "Recorder": "emulator.recorder",
    **{
        name: "emulator.errors"
        for name in (
            "AddressError",
            "ConfigError",
            "DeadlockError",
            "DoubleWaitError",
            "DtypeError",
            "EmulatorError",
            "ForeignFutureError",
            "InFlightRecycleError",
            "KernelError",
            "RecycledBufferError",
            "ScratchError",
            "ScratchOverflowError",
            "ShapeError",
            "WaitError",
        )
    },
    **{
        name: "emulator.kernel"
        for name in (
            "CompletionHandle",
            "LoadFuture",
            "OpRecord",
            "RecvFuture",
            "RunResult",
            "TensorHandle",
            "run_kernel",
        )
    },
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'emulator' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
