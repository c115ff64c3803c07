"""How the lines of two versions of a source file pair (``align.LineMap``'s), in bounded time.

Lines align over their stripped text (so re-indenting, say under a new ``with``, keeps
the pairing), each hashed once: equal lines pair (a common start and end, then lines
unique in both files as anchors in order, patience-style, then the stretches between
anchors by a longest common subsequence when they are small), and in a changed block
lines pair in order with their most similar counterpart (at least
``LINE_MIN_SIMILARITY``, difflib's ratio of at most ``LINE_CAP`` characters: a longer
line compares as its start and end), so an edited call (``tl.wait(f)`` made
``tl.wait(f, ...)``) still pairs with itself. A line deleted or added pairs with
nothing; a line the in-order pass leaves alone then pairs with its most similar unpaired
counterpart of the same block, so a line moved within the block pairs too.

The cost is bounded, whatever the sources: aligning a pair of files of N lines and C
characters in all takes O(C + N log N) steps, at most ``DP_TOTAL`` cells of dynamic
programming and line comparisons worth at most ``COMPARE_BUDGET`` (a changed block too
large for what is left pairs its lines by position when both sides have as many); files of
more than ``HUGE_LINES`` lines in all pair only their common start and end, and the
middle by position. Two 60 KB kernels with edited 9,000-character lines, 30,000 blank
lines or one 16 MiB line align in well under a second each.
"""

from __future__ import annotations

import difflib
from bisect import bisect_left, bisect_right
from collections import Counter
from itertools import pairwise
from typing import Any

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


def pair_lines(a: list[str], b: list[str]) -> tuple[Any, Any]:
    """(A line -> B line, B line -> A line), 1-based, each with ``get(line)``, for the
    stripped lines ``a`` and ``b`` of two versions of a file."""
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
