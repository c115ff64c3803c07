"""What to suggest when a file given to kbdebug is not what the command takes."""

from __future__ import annotations

import ast
from pathlib import Path

from kbdebug.commands import launch_file

#: Bytes of a Python file read to list its functions (a launcher is a small file).
PYTHON_READ_BYTES = launch_file.MAX_LAUNCH_BYTES
#: Function names listed in one message at most.
MAX_LISTED = 8


def scenario_functions(path: Path) -> list[str] | None:
    """Top-level functions of the Python file ``path`` that could build a Scenario, in order.

    Read and parsed, never run. Functions whose first parameter is ``tl`` are
    kernels, not launchers: they are listed only when there is nothing else.
    None when the file cannot be read or parsed.
    """
    tree = launch_file.parse(path)
    if tree is None:
        return None
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    launchers = [f.name for f in functions if not _is_kernel(f)]
    return launchers or [f.name for f in functions]


def _is_kernel(function: ast.FunctionDef) -> bool:
    params = function.args.posonlyargs + function.args.args
    return bool(params) and params[0].arg == "tl"


def listed(names: list[str]) -> str:
    """``a, b, c`` (the first MAX_LISTED, then how many more)."""
    shown = ", ".join(names[:MAX_LISTED])
    more = len(names) - MAX_LISTED
    return f"{shown} and {more} more" if more > 0 else shown


def syntax_error(path: Path) -> str | None:
    """``line N: invalid syntax`` when the Python file ``path`` does not decode or compile
    (an expression nested too deeply too), else None (None too when it cannot be read)."""
    problem = launch_file.problem(path)
    if problem is None or problem.stage == "read":
        return None
    return f"line {problem.line}: {problem.detail}" if problem.line else problem.detail


def run_hint(path: Path) -> str:
    """How to run the Python file ``path`` with `kbdebug run`, naming its functions."""
    functions = scenario_functions(path)
    if functions is None:
        broken = syntax_error(path)
        if broken is not None:
            return f"it does not parse ({broken}); fix it, then: kbdebug run {path}:FUNCTION"
        return f"to record a kernel: kbdebug run {path}:FUNCTION"
    if not functions:
        return (
            f"{path} defines no function; kbdebug run takes FILE.py:FUNCTION, a function "
            "that returns an emulator.scenarios.Scenario"
        )
    first = functions[0]
    return f"record it with: kbdebug run {path}:{first} (functions there: {listed(functions)})"


def not_a_trace_hint(path: Path, head: bytes) -> str:
    """What the file that is not a kbt trace looks like and what to do with it ('' if unknown)."""
    start = head.lstrip()[:1]
    if path.suffix == ".py":
        return run_hint(path)
    if path.suffix == ".json" or (start in (b"{", b"[") and b"traceEvents" in head[:4096]):
        return (
            "it looks like Chrome trace JSON (what kbdebug export writes): open it at "
            "https://ui.perfetto.dev; kbdebug itself opens .kbt traces"
        )
    return ""
