"""Which function of run B is which of run A when the runs made their tl calls from
functions of different names: ``launch_flawed`` runs ``kernel_flawed`` and
``launch_fixed`` runs ``kernel_fixed``, both kept in one file.

Comparing such runs line for line pairs ``kernel_flawed``'s lines with themselves in
B, where nothing ran. Instead, a function only A calls tl from pairs with a function
only B calls tl from (in files that pair, or in files neither run shares): the one
each when a pair of files has one of each, else the most alike by their lines (at
least ``FUNCTION_MIN_SIMILARITY`` of them in common). The lines of a pair of
functions then align as two versions of one function (:func:`pair_lines`).
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kbdebug.analysis.line_pairing import pair_lines

__all__ = ["FUNCTION_MIN_SIMILARITY", "FunctionPair", "pair_functions", "tl_functions"]

#: How alike two functions' lines must be (the share both have) to pair among several.
FUNCTION_MIN_SIMILARITY = 0.3


@dataclass
class FunctionPair:
    """A function of A and its counterpart in B, with their lines (1-based, inclusive)."""

    a_file: str
    a_name: str
    a_span: tuple[int, int]
    b_file: str
    b_name: str
    b_span: tuple[int, int]
    _maps: tuple[Any, Any] | None = None

    def maps(self, a_lines: list[str], b_lines: list[str]) -> tuple[Any, Any]:
        """(A line -> B line, B line -> A line) inside the pair, file-relative lines."""
        if self._maps is None:
            (a1, a2), (b1, b2) = self.a_span, self.b_span
            forward, _ = pair_lines(a_lines[a1 - 1 : a2], b_lines[b1 - 1 : b2])
            there = {a1 + i - 1: b1 + j - 1 for i, j in forward.items()}
            self._maps = there, {v: k for k, v in there.items()}
        return self._maps


def tl_functions(index: Any) -> set[tuple[str, str]]:
    """The (file, function) of every tl call of a run, and of each helper's callers."""
    out: set[tuple[str, str]] = set()
    for loc in getattr(index, "locs", ()) or ():
        while loc is not None:
            if loc.function:
                out.add((loc.file, loc.function))
            loc = loc.caller
    return out


@lru_cache(maxsize=64)
def _defs(source: str) -> dict[str, list[tuple[int, int]]]:
    """name -> (first, last) line of every function defined in ``source``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    out: dict[str, list[tuple[int, int]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.setdefault(node.name, []).append((node.lineno, node.end_lineno or node.lineno))
    return out


def _span(source: object, name: str) -> tuple[int, int] | None:
    """The lines of the one function called ``name`` (None if none, or several)."""
    if not isinstance(source, str):
        return None
    spans = _defs(source).get(name, [])
    return spans[0] if len(spans) == 1 else None


def _likeness(a: list[str], b: list[str]) -> float:
    """The share of lines ``a`` and ``b`` have in common (as multisets)."""
    if not a and not b:
        return 1.0
    common = sum((Counter(a) & Counter(b)).values())
    return 2 * common / (len(a) + len(b))


def pair_functions(
    a: Any,
    b: Any,
    files: dict[str, str],
    a_lines: dict[str, list[str]],
    b_lines: dict[str, list[str]],
) -> list[FunctionPair]:
    """The pairs of functions only A and only B call tl from (see the module's
    docstring); ``files`` pairs A's files with B's, ``*_lines`` are their stripped lines."""
    a_funcs, b_funcs = tl_functions(a), tl_functions(b)
    back = {fb: fa for fa, fb in files.items()}
    only_a = sorted((f, n) for f, n in a_funcs if (files.get(f, f), n) not in b_funcs)
    only_b = sorted((f, n) for f, n in b_funcs if (back.get(f, f), n) not in a_funcs)
    a_sources = getattr(a, "sources", {}) or {}
    b_sources = getattr(b, "sources", {}) or {}

    def group(file: str, run: str) -> str:
        """What the pairing groups by: B's name of the file, or 'elsewhere'."""
        if run == "a":
            return files.get(file, "") if file in files else "\0unpaired"
        return file if file in back else "\0unpaired"

    candidates = []
    for fa, na in only_a:
        span_a = _span(a_sources.get(fa), na)
        if span_a is None or fa not in a_lines:
            continue
        for fb, nb in only_b:
            span_b = _span(b_sources.get(fb), nb)
            if span_b is None or fb not in b_lines or group(fa, "a") != group(fb, "b"):
                continue
            body_a = a_lines[fa][span_a[0] : span_a[1]]  # without the def line
            body_b = b_lines[fb][span_b[0] : span_b[1]]
            candidates.append((_likeness(body_a, body_b), (fa, na, span_a), (fb, nb, span_b)))
    per_group = Counter(group(fa, "a") for _, (fa, _, _), _ in candidates)
    pairs, taken_a, taken_b = [], set(), set()
    for score, (fa, na, span_a), (fb, nb, span_b) in sorted(candidates, key=lambda c: -c[0]):
        alone = per_group[group(fa, "a")] == 1  # the only candidate pair of its files
        if (fa, na) in taken_a or (fb, nb) in taken_b:
            continue
        if not alone and score < FUNCTION_MIN_SIMILARITY:
            continue
        taken_a.add((fa, na))
        taken_b.add((fb, nb))
        pairs.append(FunctionPair(fa, na, span_a, fb, nb, span_b))
    return pairs
