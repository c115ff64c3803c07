"""Which line of run B is which line of run A, across edits of the kernel sources.

Both traces embed the sources they ran. Files pair by path; a file of A whose path B
lacks pairs with B's most similar unpaired file (a rename), when they are at least
``RENAME_MIN_SIMILARITY`` alike. Lines of a pair of files align with difflib over
their stripped lines (so re-indenting, say under a new ``with``, keeps the pairing):
equal lines pair, and in a changed block lines pair in order with their most similar
counterpart (at least ``LINE_MIN_SIMILARITY``), so an edited call (``tl.wait(f)`` made
``tl.wait(f, ...)``) still pairs with itself. A line deleted or added pairs with
nothing. Files neither trace embeds map to themselves, line for line.

Used by ``kbdebug diff`` and meant for the app's compare mode::

    lines = LineMap(a.index, b.index)
    lines.b_line("qk.py", 28)     # ("qk.py", 29), or None when B has no such line
    lines.a_line("qk.py", 29)     # ("qk.py", 28)
    lines.b_file("old.py")        # "new.py" after a rename, None when B lacks it
"""

from __future__ import annotations

import difflib
from typing import Any

__all__ = ["LINE_MIN_SIMILARITY", "RENAME_MIN_SIMILARITY", "LineMap"]

#: How alike two files must be (difflib ratio of their lines) to pair as a rename.
RENAME_MIN_SIMILARITY = 0.5
#: How alike two lines of a changed block must be to pair.
LINE_MIN_SIMILARITY = 0.6
#: Line comparisons a changed block may take (beyond, only same-sized blocks pair).
MAX_PAIRINGS = 40_000


def _sources(index: Any) -> dict[str, str]:
    sources = getattr(index, "sources", index)
    return sources if isinstance(sources, dict) else {}


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


class LineMap:
    """The alignment of the lines of run A's sources with run B's.

    ``a`` and ``b`` are ``TraceIndex`` objects (anything with ``sources``) or the
    ``{file: source}`` dicts themselves. Lines are 1-based, as in a ``SourceLoc``.
    """

    def __init__(self, a: Any, b: Any):
        self._a, self._b = _sources(a), _sources(b)
        self._a_lines = {f: _lines(s) for f, s in self._a.items() if isinstance(s, str)}
        self._b_lines = {f: _lines(s) for f, s in self._b.items() if isinstance(s, str)}
        self._files = self._pair_files()
        self._files_back = {b: a for a, b in self._files.items()}
        self._maps: dict[str, tuple[dict[int, int], dict[int, int]]] = {}

    # --- files ----------------------------------------------------------------------

    def _pair_files(self) -> dict[str, str]:
        pairs = {f: f for f in self._a_lines if f in self._b_lines}
        only_a = [f for f in self._a_lines if f not in pairs]
        only_b = [f for f in self._b_lines if f not in pairs]
        scored = []
        for fa in only_a:
            for fb in only_b:
                matcher = difflib.SequenceMatcher(
                    None, self._a_lines[fa], self._b_lines[fb], autojunk=False
                )
                if matcher.real_quick_ratio() < RENAME_MIN_SIMILARITY:
                    continue
                ratio = matcher.ratio()
                if ratio >= RENAME_MIN_SIMILARITY:
                    scored.append((-ratio, fa, fb))
        taken_b: set[str] = set()
        for _, fa, fb in sorted(scored):
            if fa not in pairs and fb not in taken_b:
                pairs[fa] = fb
                taken_b.add(fb)
        return pairs

    @property
    def files(self) -> dict[str, str]:
        """A's files that pair with one of B's: A's path -> B's path."""
        return dict(self._files)

    @property
    def renamed(self) -> dict[str, str]:
        """The pairs whose paths differ."""
        return {a: b for a, b in self._files.items() if a != b}

    def b_file(self, file: str) -> str | None:
        """B's path of A's ``file``; itself when neither run embeds it; None if B lacks it."""
        if file in self._files:
            return self._files[file]
        if file not in self._a_lines and file not in self._b_lines:
            return file
        return None

    def a_file(self, file: str) -> str | None:
        """A's path of B's ``file`` (the reverse of :meth:`b_file`)."""
        if file in self._files_back:
            return self._files_back[file]
        if file not in self._a_lines and file not in self._b_lines:
            return file
        return None

    # --- lines ----------------------------------------------------------------------

    def _map(self, a_file: str) -> tuple[dict[int, int], dict[int, int]]:
        found = self._maps.get(a_file)
        if found is None:
            found = _align(self._a_lines[a_file], self._b_lines[self._files[a_file]])
            self._maps[a_file] = found
        return found

    def b_line(self, file: str, line: int) -> tuple[str, int] | None:
        """Where A's ``file:line`` is in B, None when B deleted or never had it."""
        b_file = self.b_file(file)
        if b_file is None:
            return None
        if file not in self._files:
            return (file, line)
        b = self._map(file)[0].get(line)
        return None if b is None else (b_file, b)

    def a_line(self, file: str, line: int) -> tuple[str, int] | None:
        """Where B's ``file:line`` is in A, None when it is new in B."""
        a_file = self.a_file(file)
        if a_file is None:
            return None
        if a_file not in self._files:
            return (file, line)
        a = self._map(a_file)[1].get(line)
        return None if a is None else (a_file, a)


def _align(a: list[str], b: list[str]) -> tuple[dict[int, int], dict[int, int]]:
    """(A line -> B line, B line -> A line), 1-based."""
    forward: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                forward[i1 + k + 1] = j1 + k + 1
        elif tag == "replace" and (i2 - i1) * (j2 - j1) > MAX_PAIRINGS:
            # A rewrite too large to pair line by line: pair only same-sized blocks.
            if i2 - i1 == j2 - j1:
                for k in range(i2 - i1):
                    forward[i1 + k + 1] = j1 + k + 1
        elif tag == "replace":
            # In order, each A line with its most similar B line after the last pair.
            j = j1
            for i in range(i1, i2):
                best, best_ratio = None, LINE_MIN_SIMILARITY
                for jj in range(j, j2):
                    ratio = difflib.SequenceMatcher(None, a[i], b[jj], autojunk=False).ratio()
                    if ratio > best_ratio or (best is None and ratio >= best_ratio):
                        best, best_ratio = jj, ratio
                if best is not None:
                    forward[i + 1] = best + 1
                    j = best + 1
    return forward, {v: k for k, v in forward.items()}
