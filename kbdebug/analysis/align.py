"""Which line, and which tl call, of run B is which of run A, across edits of the sources.

Both traces embed the sources they ran. Files pair by path; a file of A whose path B
lacks pairs with B's most similar unpaired file (a rename), when at least
``RENAME_MIN_SIMILARITY`` of their lines (as multisets) are alike. Lines of a pair of
files align over their stripped lines (so re-indenting, say under a new ``with``, keeps
the pairing), each hashed once: equal lines pair (a common start and end, then lines
unique in both files as anchors in order, patience-style, then the stretches between
anchors by a longest common subsequence when they are small), and in a changed block
lines pair in order with their most similar counterpart (at least
``LINE_MIN_SIMILARITY``, difflib's ratio of at most ``LINE_CAP`` characters: a longer
line compares as its start and end), so an edited call (``tl.wait(f)`` made
``tl.wait(f, ...)``) still pairs with itself. A line deleted or added pairs with
nothing; a line the in-order pass leaves alone then pairs with its most similar unpaired
counterpart of the same block, so a line moved within the block pairs too. Files
neither trace embeds map to themselves, line for line.

The cost is bounded, whatever the sources: aligning a pair of files of N lines and C
characters in all takes O(C + N log N) steps, at most ``DP_TOTAL`` cells of dynamic
programming and line comparisons worth at most ``COMPARE_BUDGET`` (a changed block too
large for what is left pairs its lines by position when both sides have as many); files of
more than ``HUGE_LINES`` lines in all pair only their common start and end, and the
middle by position. Two 60 KB kernels with edited 9,000-character lines, 30,000 blank
lines or one 16 MiB line align in well under a second each.

Used by ``kbdebug diff`` and meant for the app's compare mode::

    lines = LineMap(a.index, b.index)
    lines.b_line("qk.py", 28)     # ("qk.py", 29), or None when B has no such line
    lines.a_line("qk.py", 29)     # ("qk.py", 28)
    lines.b_file("old.py")        # "new.py" after a rename, None when B lacks it

Calls (ISSUE and WAIT_BEGIN events, a kernel's tl calls) pair by :class:`CallMap`: the
same PE, the same call site and the same occurrence number (the k-th time that PE made
that call). The site is the call's edit-proof identity
(:func:`~kbdebug.analysis.identity.call_identity`); when the runs launched kernels of
different names, A's kernel name reads as B's; a call whose identity B still lacks (its
text was edited) takes the identity of the line ``LineMap`` pairs it with::

    calls = CallMap(a.index, b.index, lines)
    calls.other("a", 1234)        # B's event of the call at A's event 1234, or None
    calls.key("a", 1234)          # CallKey(pe=0, site="qk.py::decode::tl.wait(kf)#0", occurrence=3)
"""

from __future__ import annotations

import difflib
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from emulator.trace.schema import Kind, SourceLoc
from kbdebug.analysis.identity import call_identity

__all__ = [
    "LINE_MIN_SIMILARITY",
    "RENAME_MIN_SIMILARITY",
    "CallKey",
    "CallMap",
    "LineMap",
    "call_events",
]

#: How alike two files must be (the share of their lines both have) to pair as a rename.
RENAME_MIN_SIMILARITY = 0.5
#: How alike two lines of a changed block must be to pair.
LINE_MIN_SIMILARITY = 0.6
#: Characters of a line a comparison reads: a longer line is its first and last halves.
LINE_CAP = 120
#: Line comparisons a changed block may take (beyond, only same-sized blocks pair).
MAX_PAIRINGS = 40_000
#: What the comparisons of one pair of files may cost in all: comparing lines x and y
#: costs len(x) * len(y) + COMPARE_OVERHEAD (difflib's worst is some 90 ns each, so
#: about 2 s at most; a block whose in-order pass could cost more than is left pairs
#: as beyond MAX_PAIRINGS, and the pass for moved lines stops when it runs out).
COMPARE_BUDGET = 20_000_000
COMPARE_OVERHEAD = 400
#: Cells of a longest common subsequence between two anchors (a larger stretch looks for
#: anchors unique in it), and of all of them in one pair of files.
DP_CELLS = 10_000
DP_TOTAL = 1_000_000
#: Lines a stretch's search for anchors may count, per line of the pair of files.
ANCHOR_WORK = 32
#: Lines of a pair of files (both together) beyond which they align by position only.
HUGE_LINES = 200_000
#: Distinct lines the search for renamed files may compare in all.
RENAME_WORK = 4_000_000


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
        self._maps: dict[str, tuple[Any, Any]] = {}

    # --- files ----------------------------------------------------------------------

    def _pair_files(self) -> dict[str, str]:
        pairs = {f: f for f in self._a_lines if f in self._b_lines}
        only_a = [f for f in self._a_lines if f not in pairs]
        only_b = [f for f in self._b_lines if f not in pairs]
        counts: dict[tuple[str, str], Counter[str]] = {}

        def count(run: str, file: str) -> Counter[str]:
            found = counts.get((run, file))
            if found is None:
                lines = self._a_lines[file] if run == "a" else self._b_lines[file]
                found = counts[(run, file)] = Counter(lines)
            return found

        scored = []
        work = RENAME_WORK
        for fa in only_a:
            for fb in only_b:
                n, m = len(self._a_lines[fa]), len(self._b_lines[fb])
                if n + m and 2 * min(n, m) / (n + m) < RENAME_MIN_SIMILARITY:
                    continue
                small, large = sorted((count("a", fa), count("b", fb)), key=len)
                work -= len(small)
                if work < 0:
                    break
                both = sum(min(k, large[line]) for line, k in small.items() if line in large)
                ratio = 2 * both / (n + m) if n + m else 1.0
                if ratio >= RENAME_MIN_SIMILARITY:
                    scored.append((-ratio, fa, fb))
            if work < 0:
                break
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

    def _map(self, a_file: str) -> tuple[Any, Any]:
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


def _align(a: list[str], b: list[str]) -> tuple[Any, Any]:
    """(A line -> B line, B line -> A line), 1-based, each with ``get(line)``."""
    if len(a) + len(b) > HUGE_LINES:
        return _align_by_position(a, b)
    ids: dict[str, int] = {}
    a_ids = [ids.setdefault(line, len(ids)) for line in a]
    b_ids = [ids.setdefault(line, len(ids)) for line in b]
    forward: dict[int, int] = {}
    budget = [COMPARE_BUDGET]
    i0 = j0 = 0
    # Lines of code count most, blank lines half; of two ways to pair as many, the one
    # that pairs more text (a line moved past a shorter one pairs rather than that one).
    weights = [256 + min(len(line), 64) if line else 128 for line in ids]
    for i, j in [*_equal_pairs(a_ids, b_ids, weights), (len(a), len(b))]:
        if i > i0 and j > j0:
            _pair_changed(a, b, (i0, i), (j0, j), forward, budget)
        if i < len(a):
            forward[i + 1] = j + 1
        i0, j0 = i + 1, j + 1
    return forward, {v: k for k, v in forward.items()}


def _equal_pairs(
    a: list[int], b: list[int], weights: list[int] | None = None
) -> list[tuple[int, int]]:
    """The (i, j) of A's and B's equal lines (hashed: ``a`` and ``b`` are their ids) that
    pair, increasing in both: the common start and end of every stretch, then a longest
    common subsequence of a small stretch, or the lines unique in both halves of a large
    one in order (patience), which split it into smaller stretches. Linear in the lines
    but for the anchors' ordering (N log N) and the bounded dynamic programming.
    ``weights[id]`` is what a line counts in a subsequence (1 each without)."""
    pairs: list[tuple[int, int]] = []
    work, cells = ANCHOR_WORK * (len(a) + len(b)), DP_TOTAL
    stack = [(0, len(a), 0, len(b))]
    while stack:
        i1, i2, j1, j2 = stack.pop()
        while i1 < i2 and j1 < j2 and a[i1] == b[j1]:
            pairs.append((i1, j1))
            i1, j1 = i1 + 1, j1 + 1
        while i1 < i2 and j1 < j2 and a[i2 - 1] == b[j2 - 1]:
            i2, j2 = i2 - 1, j2 - 1
            pairs.append((i2, j2))
        n, m = i2 - i1, j2 - j1
        if not n or not m:
            continue
        if n * m <= min(DP_CELLS, cells):
            cells -= n * m
            pairs += _common_subsequence(a[i1:i2], b[j1:j2], i1, j1, weights)
            continue
        work -= n + m
        if work < 0:
            continue  # a changed block: its lines pair by similarity or position
        anchors = _unique_anchors(a, b, (i1, i2), (j1, j2))
        if not anchors:
            continue  # nothing unique in both: a changed block
        pairs += anchors
        for (pi, pj), (ni, nj) in pairwise([(i1 - 1, j1 - 1), *anchors, (i2, j2)]):
            if ni > pi + 1 and nj > pj + 1:
                stack.append((pi + 1, ni, pj + 1, nj))
    pairs.sort()
    return pairs


def _unique_anchors(
    a: list[int], b: list[int], rows: tuple[int, int], cols: tuple[int, int]
) -> list[tuple[int, int]]:
    """The longest run, increasing in both, of the lines that occur once in each half."""
    in_a, in_b = Counter(a[rows[0] : rows[1]]), Counter(b[cols[0] : cols[1]])
    at_b = {x: j for j, x in enumerate(b[cols[0] : cols[1]], cols[0]) if in_b[x] == 1}
    candidates = [
        (i, at_b[x]) for i, x in enumerate(a[rows[0] : rows[1]], rows[0])
        if in_a[x] == 1 and x in at_b
    ]  # fmt: skip
    # Patience sorting: tails[k] is the smallest B line ending an increasing run of k + 1.
    tails: list[int] = []
    ends: list[int] = []  # the candidate ending each of those runs
    before = [-1] * len(candidates)
    for k, (_, j) in enumerate(candidates):
        at = bisect_left(tails, j)
        before[k] = ends[at - 1] if at else -1
        if at == len(tails):
            tails.append(j)
            ends.append(k)
        else:
            tails[at], ends[at] = j, k
    run = []
    k = ends[-1] if ends else -1
    while k >= 0:
        run.append(candidates[k])
        k = before[k]
    return run[::-1]


def _common_subsequence(
    a: list[int], b: list[int], i0: int, j0: int, weights: list[int] | None
) -> list[tuple[int, int]]:
    """A heaviest common subsequence of ``a`` and ``b`` (len(a) * len(b) cells), as pairs
    offset by ``i0`` and ``j0``; line ``x`` weighs ``weights[x]``."""
    n, m = len(a), len(b)
    below = [0] * (m + 1)
    rows = [below]
    for i in range(n - 1, -1, -1):
        row = [0] * (m + 1)
        x = a[i]
        weight = weights[x] if weights is not None else 1
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + weight if x == b[j] else max(below[j], row[j + 1])
        rows.append(row)
        below = row
    rows.reverse()  # rows[i][j]: the longest common subsequence of a[i:] and b[j:]
    pairs = []
    i = j = 0
    while i < n and j < m:
        if a[i] == b[j]:
            pairs.append((i0 + i, j0 + j))
            i, j = i + 1, j + 1
        elif rows[i + 1][j] >= rows[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _key(line: str) -> str:
    """What a comparison reads of ``line``: at most LINE_CAP characters."""
    if len(line) <= LINE_CAP:
        return line
    half = LINE_CAP // 2
    return line[:half] + line[-half:]


def _ratio(x: str, y: str, floor: float) -> float:
    """difflib's ratio of ``x`` and ``y``, or -1 when its upper bounds are below ``floor``."""
    matcher = difflib.SequenceMatcher(None, x, y, autojunk=False)
    if matcher.real_quick_ratio() < floor or matcher.quick_ratio() < floor:
        return -1.0
    return matcher.ratio()


def _pair_changed(
    a: list[str],
    b: list[str],
    rows: tuple[int, int],
    cols: tuple[int, int],
    forward: dict[int, int],
    budget: list[int],
) -> None:
    """Pair the lines of a changed block (no equal lines pair across it): in order, each
    A line with its most similar B line after the last pair, then those left alone in
    any order. A block of more than MAX_PAIRINGS line pairs, or whose in-order pass
    could cost more than is left of ``budget[0]``, pairs only by position, when both
    sides have as many lines."""
    (i1, i2), (j1, j2) = rows, cols
    a_keys = {i: _key(a[i]) for i in range(i1, i2)}
    b_keys = {j: _key(b[j]) for j in range(j1, j2)}
    size = (i2 - i1) * (j2 - j1)
    cost = sum(map(len, a_keys.values())) * sum(map(len, b_keys.values()))
    cost += COMPARE_OVERHEAD * size
    if size > MAX_PAIRINGS or cost > budget[0]:
        if i2 - i1 == j2 - j1:
            for k in range(i2 - i1):
                forward[i1 + k + 1] = j1 + k + 1
        return
    j = j1
    for i in range(i1, i2):
        best, best_ratio = None, LINE_MIN_SIMILARITY
        key = a_keys[i]
        for jj in range(j, j2):
            budget[0] -= len(key) * len(b_keys[jj]) + COMPARE_OVERHEAD
            ratio = _ratio(key, b_keys[jj], best_ratio)
            if ratio > best_ratio or (best is None and ratio >= best_ratio):
                best, best_ratio = jj, ratio
        if best is not None:
            forward[i + 1] = best + 1
            j = best + 1
    _pair_moved(a_keys, b_keys, forward, budget)


def _pair_moved(
    a_keys: dict[int, str], b_keys: dict[int, str], forward: dict, budget: list[int]
) -> None:
    """Pair the lines of a changed block the in-order pass left alone with their most
    similar unpaired counterpart, in any order: a line moved within the block (a wait
    now above the load that used to precede it) still pairs with itself. Stops when
    a line's comparisons would cost more than is left of ``budget[0]``."""
    taken = {forward[i + 1] - 1 for i in a_keys if i + 1 in forward}
    for i, key in a_keys.items():
        if i + 1 in forward or not key:
            continue
        others = [(jj, other) for jj, other in b_keys.items() if jj not in taken and other]
        cost = len(key) * sum(len(other) for _, other in others)
        cost += COMPARE_OVERHEAD * len(others)
        if cost > budget[0]:
            return
        budget[0] -= cost
        best, best_ratio = None, LINE_MIN_SIMILARITY
        for jj, other in others:
            ratio = _ratio(key, other, best_ratio)
            if ratio > best_ratio:
                best, best_ratio = jj, ratio
        if best is not None:
            forward[i + 1] = best + 1
            taken.add(best)


class _Runs:
    """A line map as runs of consecutive lines (``get`` as a dict's): huge files'."""

    def __init__(self, runs: list[tuple[int, int, int]]):
        self._starts = [start for start, _, _ in runs]
        self._runs = runs

    def get(self, line: int, default: int | None = None) -> int | None:
        k = bisect_right(self._starts, line) - 1
        if k < 0:
            return default
        start, there, length = self._runs[k]
        return there + line - start if line < start + length else default


def _common_run(a: list[str], b: list[str], limit: int, *, from_end: bool = False) -> int:
    """How many first (or last) lines of ``a`` and ``b``, at most ``limit``, are equal,
    compared a chunk at a time."""
    n, step = 0, 4096

    def same(lo: int, hi: int) -> bool:  # lines lo..hi-1 from the start or the end
        if from_end:
            return a[len(a) - hi : len(a) - lo] == b[len(b) - hi : len(b) - lo]
        return a[lo:hi] == b[lo:hi]

    while n < limit:
        k = min(step, limit - n)
        if same(n, n + k):
            n += k
        elif k == 1:
            break
        else:
            step = max(1, k // 8)
    return n


def _align_by_position(a: list[str], b: list[str]) -> tuple[_Runs, _Runs]:
    """Huge files: their common start and end pair, and the middle line by line when
    both sides of it have as many lines."""
    if len(a) == len(b):
        runs = [(1, 1, len(a))]
    else:
        start = _common_run(a, b, min(len(a), len(b)))
        end = _common_run(a, b, min(len(a), len(b)) - start, from_end=True)
        runs = [(1, 1, start)] if start else []
        if end:
            runs.append((len(a) - end + 1, len(b) - end + 1, end))
    return _Runs(runs), _Runs([(there, line, n) for line, there, n in runs])


# --- calls ----------------------------------------------------------------------------


def call_events(index: Any) -> tuple[np.ndarray, np.ndarray]:
    """(sorted event indices of every tl call, the loc id of each): ISSUE and WAIT_BEGIN
    events, an ISSUE's loc taken from its command."""
    c, k = index.columns, index.commands
    events = np.flatnonzero((c.kind == Kind.ISSUE) | (c.kind == Kind.WAIT_BEGIN))
    locs = c.loc[events].astype(np.int64)
    issues = c.kind[events] == Kind.ISSUE
    cmds = c.cmd[events[issues]]
    ok = (cmds >= 0) & (cmds < len(k.loc))
    issue_locs = np.full(len(cmds), -1, dtype=np.int64)
    issue_locs[ok] = k.loc[cmds[ok]]
    locs[issues] = issue_locs
    return events, locs


@dataclass(frozen=True)
class CallKey:
    """What makes a tl call the same in two runs."""

    pe: int
    #: The call's edit-proof identity in B's terms (A's own when B has no counterpart).
    site: str
    #: How many times the PE made this call before (0 for the first).
    occurrence: int

    def __str__(self) -> str:
        return f"{self.site} #{self.occurrence}" + (f" on PE {self.pe}" if self.pe else "")


class _Calls:
    """One run's tl calls with a site code and an occurrence number each."""

    def __init__(self, index: Any, codes_of_locs: np.ndarray, n_codes: int):
        self.events, locs = call_events(index)
        self.pe = index.columns.pe[self.events].astype(np.int64)
        codes = codes_of_locs[locs + 1]  # loc -1 (unknown) is slot 0
        key = self.pe * max(n_codes, 1) + codes
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        n = len(key)
        starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]]) if n else key
        sizes = np.diff(np.r_[starts, n])
        occurrence = np.empty(n, dtype=np.int64)
        occurrence[order] = np.arange(n) - np.repeat(starts, sizes)
        self.code, self.key, self.occurrence = codes, key, occurrence
        #: The calls sorted by (PE, site), stable: a group's k-th is its occurrence k.
        self.order, self.sorted_key = order, sorted_key
        self._per_pe: dict[int, np.ndarray] = {}

    def of_pe(self, pe: int) -> np.ndarray:
        """The sorted events of ``pe``'s calls."""
        found = self._per_pe.get(pe)
        if found is None:
            found = self._per_pe[pe] = self.events[self.pe == pe]
        return found

    def call_at(self, event: int) -> int | None:
        """The call number of tl-call event ``event``, None when it is no tl call."""
        k = int(np.searchsorted(self.events, event))
        return k if k < len(self.events) and int(self.events[k]) == event else None

    def find(self, key: int, occurrence: int) -> int | None:
        """The event of the ``occurrence``-th call with ``key``, None if there is none."""
        lo = int(np.searchsorted(self.sorted_key, key, side="left"))
        hi = int(np.searchsorted(self.sorted_key, key, side="right"))
        if not 0 <= occurrence < hi - lo:
            return None
        return int(self.events[self.order[lo + occurrence]])


def _kernel_rename(a: Any, b: Any) -> tuple[str, str] | None:
    """``("::old::", "::new::")`` when the two runs launched kernels of different names
    (a kernel renamed, or its fixed copy under a new name), else None."""
    names = []
    for index in (a, b):
        launch = getattr(index, "header", {}).get("launch")
        name = launch.get("kernel") if isinstance(launch, dict) else None
        names.append(name if isinstance(name, str) and name.isidentifier() else None)
    if None in names or names[0] == names[1]:
        return None
    return f"::{names[0]}::", f"::{names[1]}::"


class CallMap:
    """The pairing of run A's tl calls with run B's (see the module's docstring).

    Built once in a few vectorised passes (a million events: well under a second);
    each look-up is two bisections.
    """

    def __init__(self, a: Any, b: Any, lines: LineMap | None = None):
        lines = lines if lines is not None else LineMap(a, b)
        b_sites = {loc_id: call_identity(b, loc) for loc_id, loc in enumerate(b.locs)}
        # B's identity of each of B's (file, line, caller site): what an A call moves to.
        b_at_line: dict[tuple[str, int, str], str] = {}
        for loc_id, loc in enumerate(b.locs):
            caller = call_identity(b, loc.caller) if loc.caller is not None else ""
            b_at_line.setdefault((loc.file, loc.line, caller), b_sites[loc_id])
        vocabulary: dict[str, int] = {"<unknown>": 0}
        for site in b_sites.values():
            vocabulary.setdefault(site, len(vocabulary))
        known = set(b_sites.values())
        renamed = _kernel_rename(a, b)
        a_sites = {}
        for loc_id, loc in enumerate(a.locs):
            site = call_identity(a, loc)
            if site not in known and renamed is not None:
                site = site.replace(*renamed)
            if site not in known:
                site = self._moved(lines, b, loc, b_at_line) or site
            a_sites[loc_id] = site
            vocabulary.setdefault(site, len(vocabulary))
        self._names = list(vocabulary)
        n = len(vocabulary)
        a_codes = np.zeros(len(a.locs) + 1, dtype=np.int64)
        a_codes[1:] = [vocabulary[a_sites[i]] for i in range(len(a.locs))]
        b_codes = np.zeros(len(b.locs) + 1, dtype=np.int64)
        b_codes[1:] = [vocabulary[b_sites[i]] for i in range(len(b.locs))]
        self._runs = {"a": _Calls(a, a_codes, n), "b": _Calls(b, b_codes, n)}
        self.lines = lines

    @staticmethod
    def _moved(
        lines: LineMap, b: Any, loc: SourceLoc, b_at_line: dict[tuple[str, int, str], str]
    ) -> str | None:
        """B's identity of the line A's ``loc`` moved to, when the call's text changed."""
        there = lines.b_line(loc.file, loc.line)
        if there is None:
            return None
        caller = ""
        if loc.caller is not None:
            caller_there = lines.b_line(loc.caller.file, loc.caller.line)
            if caller_there is None:
                return None
            caller_loc = SourceLoc(caller_there[0], caller_there[1], loc.caller.function)
            caller = call_identity(b, caller_loc)
        return b_at_line.get((there[0], there[1], caller))

    def last_call(self, run: str, pe: int, event: int) -> int | None:
        """``pe``'s latest tl call at or before ``event`` in ``run``, None if none."""
        calls = self._runs[run]
        mine = calls.of_pe(pe)
        k = int(np.searchsorted(mine, event, side="right"))
        return int(mine[k - 1]) if k else None

    def calls_of(self, run: str, pe: int) -> np.ndarray:
        """The sorted event indices of ``pe``'s tl calls in ``run``."""
        return self._runs[run].of_pe(pe)

    def calls(self, run: str) -> np.ndarray:
        """The sorted event indices of ``run``'s ("a" or "b") tl calls."""
        return self._runs[run].events

    def key(self, run: str, event: int) -> CallKey | None:
        """The identity of ``run``'s tl call at ``event``; None when it is no tl call."""
        calls = self._runs[run]
        k = calls.call_at(event)
        if k is None:
            return None
        return CallKey(int(calls.pe[k]), self._names[int(calls.code[k])], int(calls.occurrence[k]))

    def other(self, run: str, event: int) -> int | None:
        """The event of the same call in the other run, None when it has no such call
        (or ``event`` is no tl call)."""
        calls = self._runs[run]
        k = calls.call_at(event)
        if k is None:
            return None
        other = self._runs["b" if run == "a" else "a"]
        return other.find(int(calls.key[k]), int(calls.occurrence[k]))

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(A events, B events) of every call both runs made, in A's order."""
        a, b = self._runs["a"], self._runs["b"]
        lo = np.searchsorted(b.sorted_key, a.key, side="left")
        hi = np.searchsorted(b.sorted_key, a.key, side="right")
        both = a.occurrence < hi - lo
        return a.events[both], b.events[b.order[(lo + a.occurrence)[both]]]
