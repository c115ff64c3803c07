"""numpy's floating-point warnings while a kernel runs: the kernel's own arithmetic is
told at the kernel's line, the emulator's digests of NaN and Inf data tell nothing."""

from __future__ import annotations

import inspect
import warnings

import numpy as np

from emulator import Memory, run_kernel


def overflowing(tl, x_ptr, out_ptr):
    """Loads a tile holding NaN and Inf, then overflows an exp on it."""
    x = tl.wait(tl.load_async(x_ptr, (16, 16), "f32"))
    y = tl.exp(x * 1000.0)  # mark: exp
    tl.store(out_ptr, y)


def recorded_warnings(tmp_path) -> list[warnings.WarningMessage]:
    x = np.linspace(-1, 1, 256, dtype=np.float32).reshape(16, 16)
    x[0, 0], x[0, 1], x[1, 0] = np.nan, np.inf, -np.inf
    memory = Memory(size_bytes=1 << 14)
    x_ptr = memory.put(x)
    out_ptr = memory.alloc(x.nbytes)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_kernel(overflowing, (x_ptr, out_ptr), (1,), memory, trace=tmp_path / "w.kbt")
    return [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_kernel_overflow_is_told_at_the_kernel_line_and_digests_are_silent(tmp_path):
    caught = recorded_warnings(tmp_path)
    lines, first = inspect.getsourcelines(overflowing)
    exp_line = first + next(i for i, t in enumerate(lines) if t.rstrip().endswith("# mark: exp"))
    assert caught, "the kernel's exp overflows: the user hears of it"
    assert {(w.filename, w.lineno) for w in caught} == {(__file__, exp_line)}, [
        (w.filename, w.lineno, str(w.message)) for w in caught
    ]
