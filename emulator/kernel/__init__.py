"""The kernel-facing side: the tl API, futures, tensors and the greenlet runner."""

from emulator.kernel.futures import CompletionHandle, LoadFuture, RecvFuture
from emulator.kernel.runner import OpRecord, RunResult, run_kernel
from emulator.kernel.tensor import TensorHandle
from emulator.kernel.tl import TL

__all__ = [
    "TL",
    "CompletionHandle",
    "LoadFuture",
    "OpRecord",
    "RecvFuture",
    "RunResult",
    "TensorHandle",
    "run_kernel",
]
