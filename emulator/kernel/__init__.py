"""The kernel-facing side: the tl API, futures, tensors and the greenlet runner."""

from emulator.kernel.futures import CompletionHandle, LoadFuture, RecvFuture
from emulator.kernel.oplog import OpLog, OpRecord
from emulator.kernel.runner import RunResult, run_kernel
from emulator.kernel.tensor import TensorHandle
from emulator.kernel.tl import TL

__all__ = [
    "TL",
    "CompletionHandle",
    "LoadFuture",
    "OpLog",
    "OpRecord",
    "RecvFuture",
    "RunResult",
    "TensorHandle",
    "run_kernel",
]
