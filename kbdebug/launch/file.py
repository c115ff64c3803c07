"""A user's launch file (FILE.py of `kbdebug run FILE.py:FUNCTION`): read, compiled, run, listed.

Read as input files are (emulator.input_files): a regular file only, at most
MAX_LAUNCH_BYTES, never a FIFO or a device. Decoded as Python decodes source
(UTF-8 unless a coding line says otherwise), and compiled before any of it
runs, so a file Python cannot compile (a syntax error, or an expression nested
too deeply: RecursionError or MemoryError in the compiler) is one line naming
the file and the line. Run with its directory first on sys.path, and sys.path
put back as it was once it has run: its builder is called on the same path
again (``search_path``), and nothing it added outlives the launch.
"""

from __future__ import annotations

import ast
import errno
import importlib.util
import io
import sys
import textwrap
import tokenize
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, ModuleType

from emulator.input_files import InputFileError, read_input_file
from kbdebug.errors import UserError

#: Bytes of a launch file read at most (a launcher is a small file).
MAX_LAUNCH_BYTES = 1 << 20
#: Function names listed in one message at most.
MAX_LISTED = 8


class LaunchFileError(UserError):
    """The launch file cannot be read, decoded or compiled (``stage``): ``detail`` says
    what is wrong, ``line`` where, when known."""

    def __init__(self, path: Path, detail: str, line: int | None = None, *, stage: str):
        where = f"line {line}: " if line is not None else ""
        what = "does not compile: " if stage == "compile" else ""
        super().__init__(f"{path}: {where}{what}{detail}")
        self.detail = detail
        self.line = line
        self.stage = stage


def read(path: Path) -> bytes:
    """The bytes of the launch file ``path``; LaunchFileError if it cannot be read."""
    try:
        return read_input_file(path, MAX_LAUNCH_BYTES, "a launch file")
    except InputFileError as e:
        problem = "no such file" if e.errno == errno.ENOENT else str(e)
        raise LaunchFileError(path, problem, stage="read") from None


def decode(path: Path, source: bytes) -> str:
    """``source`` as text, decoded as Python decodes it (a coding line, else UTF-8)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    except SyntaxError as e:  # an unknown coding, or a first line that is not UTF-8
        line = _bad_utf8_line(source)
        if line is not None:
            raise _not_utf8(path, source, line) from None
        raise LaunchFileError(path, e.msg, e.lineno or None, stage="decode") from None
    try:
        return source.decode(encoding)
    except UnicodeDecodeError as e:
        line = source.count(b"\n", 0, e.start) + 1
        raise _not_utf8(path, source, line, e.start, encoding) from None


def compile_source(path: Path, text: str, filename: str | None = None) -> CodeType:
    """The code of the launch file's ``text``; LaunchFileError if Python cannot compile it.

    ``filename`` is the code's file name (what tracebacks and the trace's source
    locations name), ``path`` by default.
    """
    try:
        return compile(text, filename or str(path), "exec", dont_inherit=True)
    except SyntaxError as e:  # IndentationError and TabError too
        line = e.lineno or _nul_line(text)  # a NUL byte has no line in Python's error
        raise LaunchFileError(path, e.msg, line, stage="compile") from None
    except (RecursionError, MemoryError) as e:
        # Python's parser and compiler give up on deep nesting without saying where.
        raise LaunchFileError(
            path,
            f"an expression nested too deeply ({type(e).__name__})",
            _too_deep_line(text),
            stage="compile",
        ) from None
    except ValueError as e:  # a NUL byte, in the Pythons that raise ValueError for it
        raise LaunchFileError(path, str(e), _nul_line(text), stage="compile") from None


def problem(path: Path) -> LaunchFileError | None:
    """Why the launch file ``path`` cannot be read or compiled, or None if it can."""
    try:
        compile_source(path, decode(path, read(path)))
    except LaunchFileError as e:
        return e
    return None


def parse(path: Path) -> ast.Module | None:
    """The syntax tree of the launch file ``path``, None if it cannot be read or parsed."""
    try:
        return ast.parse(decode(path, read(path)), str(path))
    except (LaunchFileError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def load(path: Path, module_name: str) -> tuple[ModuleType, list[str]]:
    """Run the launch file ``path`` as the module ``module_name``: the module, and the
    sys.path it ran with (its directory first, and whatever it added itself).

    sys.path is as it was once this returns; ``search_path`` puts the returned one
    back while the launch builds (a builder may import beside it). LaunchFileError if
    it cannot be read or compiled; UserError, in one line, for whatever running it raises.
    """
    code_text = decode(path, read(path))
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{path}: cannot be imported as Python")
    # The file name the import system would give its code: tracebacks and the trace's
    # source locations name the file as they always have.
    code = compile_source(path, code_text, spec.origin)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    with search_path([str(path.resolve().parent), *sys.path]):
        try:
            exec(code, module.__dict__)
        except Exception as e:  # the user's file: report it in one line
            raise UserError(f"{path}: {type(e).__name__}: {e}") from None
        return module, list(sys.path)


@contextmanager
def search_path(entries: Sequence[str]) -> Iterator[None]:
    """sys.path is ``entries`` inside the block and what it was before once it ends."""
    saved = sys.path[:]
    sys.path[:] = entries
    try:
        yield
    finally:
        sys.path[:] = saved


def scenario_functions(path: Path) -> list[str] | None:
    """Top-level functions of the Python file ``path`` that could build a Scenario, in order.

    Read and parsed, never run. Functions whose first parameter is ``tl`` are
    kernels, not launchers: they are listed only when there is nothing else. Private
    names (``_launch``: a helper the launchers call, taking a kernel) never are.
    None when the file cannot be read or parsed.
    """
    tree = parse(path)
    if tree is None:
        return None
    functions = [
        n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
    ]
    launchers = [f.name for f in functions if not _is_kernel(f)]
    return launchers or [f.name for f in functions]


def scenario_builders(path: Path) -> list[str] | None:
    """Top-level public functions of ``path`` that visibly build a Scenario, in order:
    annotated ``-> Scenario``, or with a ``return Scenario(...)`` of their own (not in a
    nested function). Read and parsed, never run; None when it cannot be parsed."""
    tree = parse(path)
    if tree is None:
        return None
    return [
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef)
        and not n.name.startswith("_")
        and (_names_scenario(n.returns) or _returns_scenario(n))
    ]


def builder_hint(path: Path, shown: str, given: str = "") -> str:
    """Which function of the launch file ``path`` (``shown`` as the user typed it) to
    give instead of ``given``: one that visibly returns a Scenario, else the public
    non-kernels."""
    builders = [name for name in scenario_builders(path) or [] if name != given]
    if builders:
        more = f" (or {listed(builders[1:])})" if len(builders) > 1 else ""
        return f"e.g. {shown}:{builders[0]}{more}"
    tree = parse(path)
    others = (
        []
        if tree is None
        else [
            n.name
            for n in tree.body
            if isinstance(n, ast.FunctionDef)
            and not n.name.startswith("_")
            and not _is_kernel(n)
            and n.name != given
        ]
    )
    none = f"no {'other ' if given else ''}function in {shown} visibly does"
    if others:
        return f"{none}; functions there not kernels: {listed(others)}"
    return f"{none}: write one, as the README's first kernel does"


def listed(names: list[str]) -> str:
    """``a, b, c`` (the first MAX_LISTED, then how many more)."""
    shown = ", ".join(names[:MAX_LISTED])
    more = len(names) - MAX_LISTED
    return f"{shown} and {more} more" if more > 0 else shown


def syntax_error(path: Path) -> str | None:
    """``line N: invalid syntax`` when the Python file ``path`` does not decode or compile
    (an expression nested too deeply too), else None (None too when it cannot be read)."""
    found = problem(path)
    if found is None or found.stage == "read":
        return None
    return f"line {found.line}: {found.detail}" if found.line else found.detail


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
            f"{path} defines no public function; kbdebug run takes FILE.py:FUNCTION, a "
            "function that returns an emulator.scenarios.Scenario"
        )
    first = functions[0]
    return f"record it with: kbdebug run {path}:{first} (functions there: {listed(functions)})"


def _names_scenario(node: ast.expr | None) -> bool:
    """Whether ``node`` is ``Scenario``, ``scenarios.Scenario`` or the string "Scenario"."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.rpartition(".")[2] == "Scenario"
    if isinstance(node, ast.Attribute):
        return node.attr == "Scenario"
    return isinstance(node, ast.Name) and node.id == "Scenario"


def _returns_scenario(function: ast.FunctionDef) -> bool:
    """Whether ``function`` holds a ``return Scenario(...)`` outside nested functions."""
    stack = list(ast.iter_child_nodes(function))
    while stack:  # not recursive: a parsed file may nest deeper than Python recurses
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.Return):
            value = node.value
            if isinstance(value, ast.Call) and _names_scenario(value.func):
                return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _is_kernel(function: ast.FunctionDef) -> bool:
    params = function.args.posonlyargs + function.args.args
    return bool(params) and params[0].arg == "tl"


def _not_utf8(
    path: Path, source: bytes, line: int, start: int | None = None, encoding: str = "utf-8"
) -> LaunchFileError:
    if start is None:
        start = _bad_utf8_offset(source)
    column = start - source.rfind(b"\n", 0, start)
    name = "UTF-8" if encoding.replace("-", "").lower() in ("utf8", "utf8sig") else encoding
    return LaunchFileError(
        path,
        f"not {name} (byte 0x{source[start]:02x} at column {column}); save it as UTF-8 or "
        "declare its encoding on its first line (# -*- coding: latin-1 -*-)",
        line,
        stage="decode",
    )


def _bad_utf8_offset(source: bytes) -> int:
    try:
        source.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    return 0


def _bad_utf8_line(source: bytes) -> int | None:
    """The line of the first byte that is not UTF-8, None if every byte is."""
    try:
        source.decode("utf-8")
    except UnicodeDecodeError as e:
        return source.count(b"\n", 0, e.start) + 1
    return None


def _nul_line(text: str) -> int | None:
    at = text.find("\0")
    return None if at < 0 else text.count("\n", 0, at) + 1


def _too_deep_line(text: str) -> int | None:
    """The first line of the first statement Python cannot compile alone for its depth.

    Each logical line (a statement, or a compound statement's header) is compiled
    by itself; None when none fails that way (or the text does not tokenize).
    """
    lines = text.splitlines(keepends=True)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, RecursionError, MemoryError):
        return None
    start = None
    for token in tokens:
        if token.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            continue
        if start is None:
            start = token.start[0]
        if token.type not in (tokenize.NEWLINE, tokenize.ENDMARKER):
            continue
        statement = textwrap.dedent("".join(lines[start - 1 : token.end[0]]))
        if statement.rstrip().endswith(":"):
            statement += "\n    pass\n"  # a compound statement's header
        if _too_deep(statement):
            return start
        start = None
    return None


def _too_deep(statement: str) -> bool:
    try:
        compile(statement, "<statement>", "exec", dont_inherit=True)
    except (RecursionError, MemoryError):
        return True
    except Exception:  # out of its context (a return, an else:): not what failed
        return False
    return False


__all__ = [
    "MAX_LAUNCH_BYTES",
    "MAX_LISTED",
    "LaunchFileError",
    "builder_hint",
    "compile_source",
    "decode",
    "listed",
    "load",
    "parse",
    "problem",
    "read",
    "run_hint",
    "scenario_builders",
    "scenario_functions",
    "search_path",
    "syntax_error",
]
