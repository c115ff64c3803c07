"""Kernels with a loop that calls a helper, for the source-level stepping tests.

Lines a test looks for carry a ``# mark: NAME`` comment; ``line(NAME)`` finds them.
"""

from __future__ import annotations

from pathlib import Path

from emulator import run_kernel


def scaled(tl, x):
    """A helper with two tl calls."""
    y = tl.exp(x)  # mark: helper-exp
    return tl.dot(y, y)  # mark: helper-dot


def looped(tl, ptr, n):  # mark: def
    """Load once, then per step: load, wait, call the helper; one call after the loop."""
    first = tl.load(ptr, (8, 8), "f16")  # mark: first
    for j in range(n):
        f = tl.load_async(ptr + 128 * j, (8, 8), "f16")  # mark: issue
        x = tl.wait(f)  # mark: wait
        scaled(tl, x)  # mark: call
    return tl.exp(first)  # mark: after


def chained(tl, ptr, n):  # mark: chained-def
    """The helper called again and again from one line, no tl call of the kernel's between."""
    x = tl.load(ptr, (8, 8), "f16")  # mark: chained-load
    for _ in range(n):
        scaled(tl, x)  # mark: chained-call


def line(name: str) -> int:
    """The line of this file marked ``# mark: NAME``."""
    for number, text in enumerate(Path(__file__).read_text().splitlines(), 1):
        if text.endswith(f"# mark: {name}"):
            return number
    raise KeyError(name)


def record(path: Path, steps: int = 3, kernel=looped) -> Path:
    """Record ``kernel`` with ``steps`` loop steps on one PE into ``path``."""
    run_kernel(kernel, (0, steps), (1,), trace=path)
    return path
