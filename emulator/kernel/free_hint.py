"""Why ``tl.free(x)`` cannot free ``x``: the argument as written, what made it, what can be freed.

Only on the error path: it reads the calling line's source and the calling
function's syntax tree, which the hot path never does.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from types import FrameType
from typing import Any

from emulator.kernel.futures import CompletionHandle
from emulator.kernel.tensor import TensorHandle
from emulator.trace.schema import SourceLoc

#: Characters of the argument's text shown at most.
MAX_ARGUMENT = 60
#: What can be freed, said after every refusal.
FREEABLE = (
    "only tiles from tl.load, or from tl.wait on a tl.load_async or tl.recv_async, can be freed"
)


def not_freeable(x: Any, frame: FrameType | None, loc: SourceLoc) -> str:
    """The one line for ``tl.free(x)`` called from ``frame`` (at ``loc``) on an ``x`` with
    no scratch buffer: ``tl.free(d): d is the result of tl.dot at k.py:27, ...``."""
    argument = _argument_text(frame)
    name = argument or "x"
    if isinstance(x, TensorHandle):
        made = _made_by(frame, argument, loc)
        what = (
            f"the result of {made}"
            if made
            else "a computed tile (of tl.dot, tl.zeros, tl.full, arithmetic, a reduction, .to())"
        )
        return f"tl.free({name}): {name} is {what}, which owns no scratch buffer; {FREEABLE}"
    if isinstance(x, CompletionHandle):
        what = "the handle of a tl.store or tl.send, which owns no scratch buffer"
    elif x is None:
        what = "None, not a tile"
    else:
        what = f"{_with_article(type(x).__name__)}, not a tile"
    return f"tl.free({name}): {name} is {what}; {FREEABLE}"


def _with_article(noun: str) -> str:
    """``noun`` after 'a' or 'an' by its first letter: an int, a float, an ndarray."""
    return f"{'an' if noun[:1].lower() in 'aeiou' or noun == 'ndarray' else 'a'} {noun}"


def _argument_text(frame: FrameType | None) -> str | None:
    """The text of the first argument of the call ``frame`` is making, None if unknown."""
    call = _call_node(frame)
    if call is None or len(call.args) != 1 or call.keywords:
        return None
    text = ast.unparse(call.args[0])
    if not text.isprintable():
        return None
    return text if len(text) <= MAX_ARGUMENT else text[: MAX_ARGUMENT - 3] + "..."


def _call_node(frame: FrameType | None) -> ast.Call | None:
    """The call expression ``frame`` is executing, from its code's column positions."""
    if frame is None:
        return None
    code = frame.f_code
    try:
        positions = list(code.co_positions())[frame.f_lasti // 2]
    except (IndexError, ValueError):
        return None
    line, end_line, column, end_column = positions
    if line is None or line != end_line or column is None or end_column is None:
        return None
    source = linecache.getline(code.co_filename, line)
    try:
        node = ast.parse(source.encode()[column:end_column].decode(), mode="eval").body
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    return node if isinstance(node, ast.Call) else None


def _made_by(frame: FrameType | None, argument: str | None, loc: SourceLoc) -> str | None:
    """``tl.dot at k.py:27`` when the variable ``argument`` is bound once in the calling
    function, by ``NAME = tl.OP(...)``; None when that cannot be said for sure."""
    if frame is None or argument is None or not argument.isidentifier():
        return None
    try:
        lines, first = inspect.getsourcelines(frame.f_code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return None
    function = tree.body[0] if tree.body else None
    if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    parameters = function.args.posonlyargs + function.args.args + function.args.kwonlyargs
    if any(p.arg == argument for p in parameters):
        return None
    binds = [
        n
        for n in ast.walk(function)
        if isinstance(n, ast.Name) and n.id == argument and not isinstance(n.ctx, ast.Load)
    ]
    declared = any(
        isinstance(n, ast.Global | ast.Nonlocal) and argument in n.names for n in ast.walk(function)
    )
    if len(binds) != 1 or declared:
        return None
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and node.targets == [binds[0]]:
            value = node.value
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and isinstance(value.func.value, ast.Name)
                and value.func.value.id == "tl"
            ):
                line = first + node.lineno - 1
                return f"tl.{value.func.attr} at {loc.file}:{line}"
    return None
