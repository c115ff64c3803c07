"""Edit-proof identities of tl calls and findings, from the trace alone.

A trace records where each tl call was made as ``file:line``, and lines move with
every edit above them. The identity of a call is instead::

    FILE::FUNCTION::TEXT#ORDINAL

``FILE`` is the path the trace records (relative to the launch's root, the nearest
folder above the launch file with a project marker, so the same from any working
directory; see traces/FORMAT.md, *Sources*; an older trace's path is taken as it
recorded it), ``FUNCTION`` the enclosing function,
``TEXT`` the call as written with whitespace, comments and line breaks removed
(``tl.wait(kf)``, ``tl.load_async(k_ptr+j*K,(64,128),"f16")``; one space stays
between two words, ``return x``; quotes are made double so a selector fits in single
quotes), and ``ORDINAL`` counts the call sites with the same text before it in the
function (0 for the first). It is computed from
the kernel sources the trace embeds, so an unrelated edit (a comment, a new line
anywhere, another function) leaves it alone, while changing the call itself
changes it.

Which text stands for a line: the outermost call that starts on the line (a line
inside a call spanning several lines is that call); a line with no call (an
operator on tensors, ``s * 0.01``) stands for itself, comments and whitespace
removed; a function's ``def`` line (and its decorators) is ``def``. Texts longer
than ``MAX_TEXT`` characters keep their start and a short hash of the whole.

A location whose file is not embedded, or not Python that parses, or outside it,
falls back to ``FILE:LINE``. A call inside a helper adds ``@`` and the identity of
the kernel's call into the helper (one helper line called from two kernel lines is
two sites). Finding ids prefix the rule and suffix ``:peN`` for
PE N > 0: ``KB102:qk.py::decode::tl.wait(kf)#1:pe3``.
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
import tokenize
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from emulator.trace.schema import SourceLoc

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from kbdebug.analysis.findings import Finding

__all__ = ["MAX_TEXT", "call_identity", "finding_id", "id_text", "line_id", "with_stable_ids"]

#: Longest call text kept whole; a longer one is cut and given a hash of the whole.
MAX_TEXT = 64

# Whitespace, and whether it separates two word characters (kept as one space there:
# ``return x``, ``not y``).
_SPACE = re.compile(r"(\w?)\s+(?=(\w?))")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _sources(index: Any) -> Mapping[str, str]:
    sources = getattr(index, "sources", None)
    return sources if isinstance(sources, dict) else {}


def call_identity(index: Any, loc: SourceLoc | None) -> str:
    """The edit-proof identity of the tl call at ``loc`` (``FILE::FUNCTION::TEXT#N``).

    ``index`` is anything with the trace's embedded ``sources`` (a ``TraceIndex``).
    Falls back to ``FILE:LINE`` when the source is not embedded or does not parse.
    """
    if loc is None:
        return "<unknown>:0"
    source = _sources(index).get(loc.file)
    site = _sites(source)(loc.line) if isinstance(source, str) else None
    if site is None:
        own = f"{loc.file}:{loc.line}"
    else:
        scope, text, ordinal = site
        own = f"{loc.file}::{loc.function or scope}::{text}#{ordinal}"
    caller = getattr(loc, "caller", None)
    return own if caller is None else f"{own}@{call_identity(index, caller)}"


def finding_id(rule: str, index: Any, loc: SourceLoc | None, pe: int) -> str:
    """``RULE:IDENTITY``, ``:peN`` appended for PE N > 0 (see :func:`call_identity`)."""
    return f"{rule}:{call_identity(index, loc)}" + (f":pe{pe}" if pe else "")


def line_id(rule: str, loc: SourceLoc | None, pe: int) -> str:
    """The line form ``RULE:FILE:LINE[:peN]``, for humans and older selectors."""
    where = f"{loc.file}:{loc.line}" if loc is not None else "<unknown>:0"
    return f"{rule}:{where}" + (f":pe{pe}" if pe else "")


def with_stable_ids(index: Any, findings: Iterable[Finding]) -> list[Finding]:
    """``findings`` with ``id`` the edit-proof form and ``line_id`` the line form.

    Idempotent: findings that already carry them come back equal.
    """
    out = []
    for f in findings:
        stable = finding_id(f.rule, index, f.loc, f.pe)
        lined = f.line_id or line_id(f.rule, f.loc, f.pe)
        out.append(
            f if (f.id, f.line_id) == (stable, lined) else replace(f, id=stable, line_id=lined)
        )
    return out


# --- the sites of one source file ------------------------------------------------------


@dataclass
class _Scope:
    name: str
    #: (first, last) lines of the scope, inclusive.
    first: int
    last: int
    #: Lines of its def header (decorators to the line before its body).
    header: tuple[int, int]


def _space(match: re.Match[str]) -> str:
    return match.group(1) + (" " if match.group(1) and match.group(2) else "")


def _normalise(text: str) -> str:
    text = _SPACE.sub(_space, text.strip().replace("'", '"'))
    if len(text) > MAX_TEXT:
        digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        text = f"{text[: MAX_TEXT - 10]}~{digest}"
    return text


def id_text(text: str) -> str:
    """A call's text as an id spells it (a selector typed in full matches the cut form);
    an id's own text comes back unchanged."""
    return _normalise(text)


def _strip_comment(line: str) -> str:
    """One source line without its comment (tokenised, so a ``#`` in a string stays)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return line.split("#", 1)[0]
    parts = [t.string for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL)]
    return " ".join(p for p in parts if p.strip())


@lru_cache(maxsize=64)
def _sites(source: str):
    """line -> (scope name, text, ordinal) for one file's source; None where unknown."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return lambda line: None
    lines = source.splitlines()
    n = len(lines)
    # Innermost scope of every line (0 = module); scopes[0] is the module.
    scopes = [_Scope("<module>", 1, n, (0, -1))]
    owner = [0] * (n + 2)
    # Text of the outermost call starting on each line, and the line of the innermost
    # call covering each line.
    call_text: dict[int, tuple[int, str]] = {}
    covering: dict[int, tuple[int, int]] = {}

    def visit(node: ast.AST, scope: int, depth: int) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, _SCOPES):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                last = child.end_lineno or child.lineno
                body = child.body[0].lineno if child.body else last + 1
                if isinstance(child, ast.ClassDef):
                    header = (0, -1)
                else:
                    header = (first, max(first, body - 1))
                scopes.append(_Scope(child.name, first, last, header))
                inner = len(scopes) - 1
                for line in range(first, min(last, n) + 1):
                    owner[line] = inner
            elif isinstance(child, ast.Call):
                start, end = child.lineno, child.end_lineno or child.lineno
                span = (end - start, child.col_offset)
                text = call_text.get(start)
                if text is None or span[0] > text[0]:
                    try:
                        call_text[start] = (span[0], _normalise(ast.unparse(child)))
                    except (ValueError, RecursionError):
                        pass
                for line in range(start, end + 1):
                    best = covering.get(line)
                    if best is None or depth > best[1]:
                        covering[line] = (start, depth)
            visit(child, inner, depth + 1)

    try:
        visit(tree, 0, 0)
    except RecursionError:
        return lambda line: None

    def text_of(line: int) -> tuple[int, str] | None:
        """(site line, text) of a line, None for a blank or comment-only line."""
        scope = scopes[owner[line]]
        if scope.header[0] <= line <= scope.header[1]:
            return scope.header[0], "def"
        if line in call_text:
            return line, call_text[line][1]
        if line in covering:
            start = covering[line][0]
            return start, call_text[start][1] if start in call_text else _normalise(
                lines[start - 1]
            )
        text = _normalise(_strip_comment(lines[line - 1]))
        return (line, text) if text else None

    ordinals: dict[int, dict[int, int]] = {}

    def ordinals_of(scope: int) -> dict[int, int]:
        """site line -> ordinal among the same texts, for every site of a scope."""
        table = ordinals.get(scope)
        if table is None:
            table, seen = {}, {}
            s = scopes[scope]
            for line in range(s.first, s.last + 1):
                if owner[line] != scope:
                    continue
                site = text_of(line)
                if site is None or site[0] != line:
                    continue
                table[line] = seen.get(site[1], 0)
                seen[site[1]] = table[line] + 1
            ordinals[scope] = table
        return table

    def site(line: int) -> tuple[str, str, int] | None:
        if not 1 <= line <= n:
            return None
        found = text_of(line)
        if found is None:
            return None
        at, text = found
        scope = owner[at]
        return scopes[scope].name, text, ordinals_of(scope).get(at, 0)

    return site
