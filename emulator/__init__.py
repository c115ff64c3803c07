"""A deterministic emulator of processing elements that runs Triton-style kernels."""

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
