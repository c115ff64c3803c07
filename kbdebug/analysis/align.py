"""Which line, and which tl call, of run B is which of run A, across edits of the sources.

Both traces embed the sources they ran. Files pair by path; a file of A whose path B
lacks pairs with B's most similar unpaired file (a rename), when at least
``RENAME_MIN_SIMILARITY`` of their lines (as multisets) are alike. Lines of a pair of
files align as :mod:`kbdebug.analysis.line_pairing` says: over their stripped lines
(re-indenting keeps the pairing), equal lines first, then the lines of a changed block
with their most similar counterparts (an edited call still pairs with itself), in
bounded time whatever the sources. A line deleted or added pairs with nothing. Files
neither trace embeds map to themselves, line for line. Inside two functions of different
names paired as one kernel's two versions (``LineMap.functions``), lines pair between
those functions rather than with themselves.

Used by ``kbdebug diff`` and meant for the app's compare mode::

    lines = LineMap(a.index, b.index)
    lines.b_line("qk.py", 28)     # ("qk.py", 29), or None when B has no such line
    lines.a_line("qk.py", 29)     # ("qk.py", 28)
    lines.b_file("old.py")        # "new.py" after a rename, None when B lacks it

Calls (ISSUE and WAIT_BEGIN events, a kernel's tl calls) pair by :class:`CallMap`: the
same PE, the same call site and the same occurrence number (the k-th time that PE made
that call). The site is the call's edit-proof identity
(:func:`~kbdebug.analysis.identity.call_identity`); when the runs made their calls from
functions of different names (two kernels of one file, paired by
:mod:`~kbdebug.analysis.function_pairing`), A's function name reads as B's; a call whose
identity B still lacks (its text was edited) takes the identity of the line ``LineMap``
pairs it with, and in a paired function, else, that of B's most alike call of the same
tl function no other call took::

    calls = CallMap(a.index, b.index, lines)
    calls.other("a", 1234)        # B's event of the call at A's event 1234, or None
    calls.key("a", 1234)          # CallKey(pe=0, site="qk.py::decode::tl.wait(kf)#0", occurrence=3)
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from emulator.trace.schema import Kind, SourceLoc
from kbdebug.analysis.function_pairing import FunctionPair, pair_functions
from kbdebug.analysis.identity import call_identity
from kbdebug.analysis.line_pairing import LINE_MIN_SIMILARITY, pair_lines

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
        #: Functions of different names whose lines pair (two kernels of one file).
        self.functions: list[FunctionPair] = pair_functions(
            a, b, self._files, self._a_lines, self._b_lines
        )

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
            found = pair_lines(self._a_lines[a_file], self._b_lines[self._files[a_file]])
            self._maps[a_file] = found
        return found

    def _in_function(self, run: str, file: str, line: int) -> tuple[str, int | None] | None:
        """Where a line inside a paired function is in the other run (its line None
        when it pairs with none), None when the line is in no paired function."""
        for pair in self.functions:
            here, span = (pair.a_file, pair.a_span) if run == "a" else (pair.b_file, pair.b_span)
            if here == file and span[0] <= line <= span[1]:
                maps = pair.maps(self._a_lines[pair.a_file], self._b_lines[pair.b_file])
                there = pair.b_file if run == "a" else pair.a_file
                return there, maps[0 if run == "a" else 1].get(line)
        return None

    def b_line(self, file: str, line: int) -> tuple[str, int] | None:
        """Where A's ``file:line`` is in B, None when B deleted or never had it."""
        moved = self._in_function("a", file, line)
        if moved is not None:
            return None if moved[1] is None else (moved[0], moved[1])
        b_file = self.b_file(file)
        if b_file is None:
            return None
        if file not in self._files:
            return (file, line)
        b = self._map(file)[0].get(line)
        return None if b is None else (b_file, b)

    def a_line(self, file: str, line: int) -> tuple[str, int] | None:
        """Where B's ``file:line`` is in A, None when it is new in B."""
        moved = self._in_function("b", file, line)
        if moved is not None:
            return None if moved[1] is None else (moved[0], moved[1])
        a_file = self.a_file(file)
        if a_file is None:
            return None
        if a_file not in self._files:
            return (file, line)
        a = self._map(a_file)[1].get(line)
        return None if a is None else (a_file, a)


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


def _pair_alike(
    a_sites: dict[int, str], a_locs: list, known: set[str], renames: list[tuple[str, str]]
) -> None:
    """Give each A call still without a counterpart in a renamed function the most alike
    call of the same tl function that B's counterpart makes and no A call has taken
    (``tl.load_async(k_ptr+j*T)`` in ``kernel_flawed``, ``tl.load_async(k_ptr+(j+1)*T)``
    in ``kernel_fixed``), at least ``LINE_MIN_SIMILARITY`` alike."""
    taken = set(a_sites.values()) & known
    for loc_id in sorted(a_sites):
        site, loc = a_sites[loc_id], a_locs[loc_id]
        if site in known or loc.caller is not None or "@" in site:
            continue
        for old, new in renames:
            if not site.startswith(old):
                continue
            text = site[len(old) :].rsplit("#", 1)[0]
            head = text.split("(", 1)[0]
            best, best_ratio = None, LINE_MIN_SIMILARITY
            for other in sorted(known - taken):
                if not other.startswith(new) or "@" in other:
                    continue
                other_text = other[len(new) :].rsplit("#", 1)[0]
                if other_text.split("(", 1)[0] != head:
                    continue
                ratio = difflib.SequenceMatcher(None, text, other_text, autojunk=False).ratio()
                if ratio > best_ratio:
                    best, best_ratio = other, ratio
            if best is not None:
                a_sites[loc_id] = best
                taken.add(best)
            break


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
        renames = [
            (f"{p.a_file}::{p.a_name}::", f"{p.b_file}::{p.b_name}::")
            for p in getattr(lines, "functions", ())
        ]
        kernel = _kernel_rename(a, b)
        renames += [kernel] if kernel is not None else []
        a_sites = {}
        for loc_id, loc in enumerate(a.locs):
            site = call_identity(a, loc)
            for old, new in renames if site not in known else ():
                if old in site and site.replace(old, new) in known:
                    site = site.replace(old, new)
                    break
            if site not in known:
                site = self._moved(lines, b, loc, b_at_line) or site
            a_sites[loc_id] = site
        _pair_alike(a_sites, a.locs, known, renames)
        for site in a_sites.values():
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
