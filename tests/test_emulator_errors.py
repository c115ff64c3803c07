"""Every emulator error: raised, never a hang, its message naming the PE, the line and the value.

Kernels mark the line expected in the message with a ``# <-`` comment;
``line_of`` finds it in their source.
"""

from __future__ import annotations

import inspect
import signal

import numpy as np
import pytest

import emulator
from emulator import (
    AddressError,
    DeadlockError,
    DoubleWaitError,
    DtypeError,
    EmulatorError,
    ForeignFutureError,
    HardwareConfig,
    InFlightRecycleError,
    KernelError,
    Memory,
    MemoryRecorder,
    RecycledBufferError,
    ScratchOverflowError,
    ShapeError,
    WaitError,
    run_kernel,
)
from emulator.trace.schema import Kind

FILE = "tests/test_emulator_errors.py"
CFG = HardwareConfig(
    hbm_bytes_per_cycle=64, hbm_latency=100, issue_cycles=4, ipcq_bytes_per_cycle=32
)
PAIR = CFG.replace(mesh_rows=1, mesh_cols=2)


@pytest.fixture(autouse=True)
def no_hang():
    """Fail, rather than hang, any test here that runs longer than 10 s."""

    def timeout(signum, frame):
        raise TimeoutError("test hung")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def line_of(func, marker: str = "# <-") -> int:
    """The line of ``func``'s source that carries ``marker``."""
    lines, start = inspect.getsourcelines(func)
    (offset,) = [i for i, text in enumerate(lines) if marker in text]
    return start + offset


def raised(cls, kernel, *args, grid=(1,), config=CFG, memory=None):
    """Run ``kernel`` expecting ``cls``; the error and the recorder that saw the run."""
    rec = MemoryRecorder()
    memory = memory if memory is not None else Memory(1 << 16)
    with pytest.raises(cls) as info:
        run_kernel(kernel, args, grid, memory, config, recorder=rec)
    return info.value, rec


def assert_names(error, pe, kernel, marker="# <-"):
    line = line_of(kernel, marker)
    assert error.pe == pe
    assert (error.loc.file, error.loc.line) == (FILE, line)
    assert str(error).startswith(f"PE {pe}, {FILE}:{line}: ")


@pytest.mark.parametrize(
    "cls",
    [
        AddressError,
        DtypeError,
        ShapeError,
        ScratchOverflowError,
        InFlightRecycleError,
        RecycledBufferError,
        WaitError,
        ForeignFutureError,
        DoubleWaitError,
        KernelError,
        DeadlockError,
        emulator.ConfigError,
    ],
)
def test_every_error_is_an_emulator_error(cls):
    assert issubclass(cls, EmulatorError)


def test_load_outside_hbm_raises_address_error_naming_the_range():
    def kernel(tl):
        tl.load(65536 - 16, (16,), "f16")  # <-

    error, rec = raised(AddressError, kernel)
    assert_names(error, 0, kernel)
    assert "[65520, 65552) is outside HBM of 65536 bytes" in str(error)
    assert rec.footer["status"] == "error"
    assert rec.footer["error_loc"] == error.loc


def test_negative_address_raises_address_error():
    def kernel(tl):
        tl.load_async(-64, (4,), "f32")  # <-

    error, _ = raised(AddressError, kernel)
    assert_names(error, 0, kernel)
    assert "[-64, -48)" in str(error)


def test_store_outside_hbm_raises_address_error():
    def kernel(tl):
        tl.store(1 << 20, np.zeros(4, np.float32))  # <-

    error, _ = raised(AddressError, kernel)
    assert_names(error, 0, kernel)
    assert "[1048576, 1048592)" in str(error)


def test_unknown_dtype_raises_dtype_error_naming_it():
    def kernel(tl):
        tl.load(0, (4, 4), "f17")  # <-

    error, _ = raised(DtypeError, kernel)
    assert_names(error, 0, kernel)
    assert "unknown dtype 'f17'" in str(error)


def test_dot_shape_mismatch_raises_shape_error_naming_both_shapes():
    def kernel(tl):
        tl.dot(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32))  # <-

    error, _ = raised(ShapeError, kernel)
    assert_names(error, 0, kernel)
    assert "got (2, 3) @ (4, 5)" in str(error)


def test_received_shape_mismatch_raises_shape_error_on_the_receiver():
    def kernel(tl):
        if tl.program_id(0) == 0:
            tl.send("right", np.ones(4, np.float16))
        else:
            f = tl.recv_async("left", (8,), "f16")
            tl.wait(f)  # <-

    error, _ = raised(ShapeError, kernel, grid=(2,), config=PAIR)
    assert_names(error, 1, kernel)
    assert "received (4,) f16 from the left neighbour" in str(error)
    assert "expected (8,) f16" in str(error)


def test_scratch_overflow_names_pe_line_and_bytes():
    def kernel(tl):
        tl.load(0, (256,), "f32")  # 1024 bytes on every PE
        if tl.program_id(0) == 1:
            tl.load(1024, (512,), "f32")  # <-

    error, _ = raised(
        ScratchOverflowError, kernel, grid=(2,), config=PAIR.replace(scratch_bytes=2048)
    )
    assert_names(error, 1, kernel)
    assert "2048 bytes requested with 1024 of 2048 in use" in str(error)


def test_free_of_load_in_flight_names_future_and_where_it_was_issued():
    def kernel(tl):
        f = tl.load_async(0, (16,), "f16")  # <- issue
        tl.free(f)  # <-

    error, _ = raised(InFlightRecycleError, kernel)
    assert_names(error, 0, kernel, "# <-\n")
    assert f"future 0 (issued at {FILE}:{line_of(kernel, '# <- issue')})" in str(error)


def test_use_after_recycle_names_the_line_of_the_use():
    def kernel(tl):
        with tl.scope():
            x = tl.load(0, (16,), "f16")
        y = x + 1  # <-
        return y

    error, _ = raised(RecycledBufferError, kernel)
    assert_names(error, 0, kernel)
    assert "tensor (16,) f16" in str(error)


def test_wait_on_something_not_waitable_raises_wait_error():
    def kernel(tl):
        tl.wait(42)  # <-

    error, _ = raised(WaitError, kernel)
    assert_names(error, 0, kernel)
    assert "got int" in str(error)


def test_future_waited_on_another_pe_raises_foreign_future_error():
    shared = []

    def kernel(tl):
        if tl.program_id(0) == 0:
            shared.append(tl.load_async(0, (16,), "f16"))  # <- issue
            tl.exp(np.zeros(64, np.float32))
            tl.wait(shared[0])
        else:
            tl.exp(np.zeros(128 * 10, np.float32))  # PE 0 has issued by now
            tl.wait(shared[0])  # <-

    error, rec = raised(ForeignFutureError, kernel, grid=(2,), config=PAIR)
    assert_names(error, 1, kernel, "# <-\n")
    issued = line_of(kernel, "# <- issue")
    assert f"future 0 was issued by PE 0 at {FILE}:{issued}" in str(error)
    assert rec.footer["status"] == "error"


def test_waiting_twice_raises_double_wait_error_naming_both_waits():
    def kernel(tl):
        f = tl.load_async(0, (16,), "f16")
        tl.wait(f)  # <- first
        tl.wait(f)  # <-

    error, _ = raised(DoubleWaitError, kernel)
    assert_names(error, 0, kernel, "# <-\n")
    assert f"already waited at {FILE}:{line_of(kernel, '# <- first')}" in str(error)


def divide(a, b):
    return a / b  # <-


def test_exception_in_kernel_becomes_kernel_error_with_cause_and_traceback():
    def kernel(tl):
        tl.exp(np.zeros(4, np.float32))
        return 1 / 0  # <-

    error, rec = raised(KernelError, kernel)
    assert_names(error, 0, kernel)
    assert isinstance(error.__cause__, ZeroDivisionError)
    assert "raised ZeroDivisionError: division by zero" in str(error)
    assert "in kernel" in error.kernel_traceback
    assert f"line {line_of(kernel)}" in error.kernel_traceback
    assert rec.footer["status"] == "error"
    assert rec.footer["error_loc"] == error.loc
    errors = [e for e in rec.events if e[0] is Kind.KERNEL_ERROR]
    assert errors == [(Kind.KERNEL_ERROR, 1, 0, "ZeroDivisionError: division by zero", error.loc)]


def test_kernel_error_loc_is_the_innermost_kernel_frame():
    def kernel(tl):
        divide(1, 0)

    error, _ = raised(KernelError, kernel)
    assert (error.loc.file, error.loc.line, error.loc.function) == (FILE, line_of(divide), "divide")


def test_kernel_error_on_one_pe_ends_the_launch():
    def kernel(tl):
        if tl.program_id(0) == 1:
            raise ValueError("bad tile")  # <-
        f = tl.recv_async("left", (4,), "f16")
        tl.wait(f)

    error, rec = raised(KernelError, kernel, grid=(2,), config=PAIR)
    assert_names(error, 1, kernel)
    assert isinstance(error.__cause__, ValueError)
    assert rec.footer["status"] == "error"


def test_recv_that_never_comes_is_a_deadlock_naming_each_blocked_pe():
    def kernel(tl):
        f = tl.recv_async("right", (4,), "f16")
        tl.wait(f)  # <-

    error, rec = raised(DeadlockError, kernel, grid=(2,), config=PAIR)
    line = line_of(kernel)
    assert str(error) == (
        f"deadlock at cycle 4: PE 0 waits on receive future 0 at {FILE}:{line}; "
        f"PE 1 waits on receive future 1 at {FILE}:{line}"
    )
    assert [(pe, what, loc.line) for pe, what, loc in error.blocked] == [
        (0, "receive future 0", line),
        (1, "receive future 1", line),
    ]
    deadlocks = [(t, pe, f[0], f[1].line) for k, t, pe, *f in rec.events if k is Kind.DEADLOCK]
    assert deadlocks == [(4, 0, 0, line), (4, 1, 1, line)]
    assert rec.footer["status"] == "deadlock"
    assert rec.footer["end_time"] == 4


def test_deadlock_lists_only_the_pes_still_blocked():
    def kernel(tl):
        if tl.program_id(0) == 0:
            tl.wait(tl.recv_async("left", (4,), "f16"))  # <-
        else:
            tl.send("left", np.ones(4, np.float16))  # arrives from PE 0's right, not its left

    error, rec = raised(DeadlockError, kernel, grid=(2,), config=PAIR)
    assert [(pe, what) for pe, what, _loc in error.blocked] == [(0, "receive future 0")]
    assert f"PE 0 waits on receive future 0 at {FILE}:{line_of(kernel)}" in str(error)
    assert "PE 1" not in str(error)
    assert rec.footer["status"] == "deadlock"


def test_error_in_a_tl_call_records_error_footer_and_kernel_error_event():
    def kernel(tl):
        tl.load(1 << 20, (4,), "f16")  # <-

    error, rec = raised(AddressError, kernel)
    (event,) = [e for e in rec.events if e[0] is Kind.KERNEL_ERROR]
    assert event[3] == error.detail and event[4] == error.loc
    assert rec.footer["status"] == "error"
    assert rec.footer["error"] == str(error)


def test_unknown_ipcq_direction_is_an_emulator_error():
    def kernel(tl):
        tl.send("sideways", np.ones(4, np.float16))  # <-

    error, _ = raised(EmulatorError, kernel, grid=(2,), config=PAIR)
    assert_names(error, 0, kernel)
    assert "unknown IPCQ direction 'sideways'" in str(error)
