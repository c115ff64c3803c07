"""Kernels with a loop that calls a helper, for the source-level stepping tests.

Lines a test looks for carry a ``# mark: NAME`` comment; ``line(NAME)`` finds them.
"""

from __future__ import annotations

from pathlib import Path

from emulator import run_kernel

TILE = (8, 8)


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


def pair(tl, ptr, j):
    """A helper called from a helper: two loads issued on one line."""
    return tl.load_async(ptr + 64 * j, TILE, "f16"), tl.load_async(ptr, TILE, "f16")  # mark: pair


def outer(tl, ptr, n):
    """Loads a pair one step ahead through ``pair``, and waits and works per step."""
    pending = [pair(tl, ptr, 0)]
    for j in range(n):
        fk, fv = pending.pop(0)
        k = tl.wait(fk)  # mark: outer-wait-k
        v = tl.wait(fv)  # mark: outer-wait-v
        if j + 1 < n:
            pending.append(pair(tl, ptr, j + 1))
        tl.exp(tl.dot(k, v))  # mark: outer-work


def nested(tl, ptr, n):  # mark: nested-def
    """The kernel calls ``outer``, which calls ``pair``: the trace records line 'nested-call'
    as the caller of both."""
    outer(tl, ptr, n)  # mark: nested-call


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
