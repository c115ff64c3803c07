"""A deterministic emulator of processing elements that runs Triton-style kernels."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

__all__ = [
    "AddressError",
    "CompletionHandle",
    "ConfigError",
    "DeadlockError",
    "DoubleWaitError",
    "DtypeError",
    "EmulatorError",
    "ForeignFutureError",
    "HardwareConfig",
    "InFlightRecycleError",
    "KernelError",
    "LoadFuture",
    "Memory",
    "MemoryRecorder",
    "OpRecord",
    "Recorder",
    "RecvFuture",
    "RecycledBufferError",
    "RunResult",
    "ScratchError",
    "ScratchOverflowError",
    "ShapeError",
    "TensorHandle",
    "WaitError",
    "run_kernel",
]
assert sorted(__all__) == sorted(_HOMES)

if TYPE_CHECKING:
    from emulator.config import HardwareConfig
    from emulator.errors import (
        AddressError,
        ConfigError,
        DeadlockError,
        DoubleWaitError,
        DtypeError,
        EmulatorError,
        ForeignFutureError,
        InFlightRecycleError,
        KernelError,
        RecycledBufferError,
        ScratchError,
        ScratchOverflowError,
        ShapeError,
        WaitError,
    )
    from emulator.kernel import (
        CompletionHandle,
        LoadFuture,
        OpRecord,
        RecvFuture,
        RunResult,
        TensorHandle,
        run_kernel,
    )
    from emulator.memory import Memory
    from emulator.recorder import MemoryRecorder, Recorder


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'emulator' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
