"""Questions the screen asks of a trace, answered from the public Replay and index API.

Pure functions, no Textual: the future an event is about, event
search, ``:`` targets, why a continue stopped, the breakpoints in a few words, the
banner of a trace that did not end well, findings in the order to fix them, and
compact number formats.
"""

from __future__ import annotations

import re

import numpy as np

from emulator.trace.schema import Kind, SourceLoc
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.select import incomplete
from kbdebug.replay import Hit, Replay, SourceLine, StalledWait
from kbdebug.replay.values import Values

NONE = -1


def kernel_def(replay: Replay, pe: int) -> tuple[str, int] | None:
    """(file, line) of the ``def`` of the kernel ``pe`` ran (its KERNEL_START's line)."""
    index = replay.index
    if not 0 <= pe < len(index.pe_status_events):
        return None
    c = index.columns
    events = index.pe_status_events[pe]
    starts = events[c.kind[events] == Kind.KERNEL_START]
    if not len(starts):
        return None
    loc = index.loc(int(c.loc[starts[0]]))
    return None if loc is None else (loc.file, loc.line)


def next_event(events: np.ndarray, position: int, reverse: bool = False) -> int | None:
    """The first of the sorted ``events`` after the current event (``position - 1``),
    or the last one before it when ``reverse``; None if there is none."""
    current = position - 1
    if reverse:
        k = int(np.searchsorted(events, current, side="left"))
        return int(events[k - 1]) if k else None
    k = int(np.searchsorted(events, current, side="right"))
    return int(events[k]) if k < len(events) else None


def future_of_event(replay: Replay, i: int) -> int:
    """The future event ``i`` is about (its own, or its command's), else -1."""
    if not 0 <= i < replay.n_events:
        return NONE
    c, k = replay.index.columns, replay.index.commands
    fut = int(c.fut[i])
    if fut >= 0:
        return fut
    cmd = int(c.cmd[i])
    if 0 <= cmd < len(k.future):
        return int(k.future[cmd])
    return NONE


def parse_goto(text: str) -> tuple[str, int]:
    """``:`` input as ``("event", n)`` (``1234``, ``#1234``) or ``("cycle", t)`` (``t5000``).

    Raises ValueError naming what was wrong.
    """
    text = text.strip().lstrip(":").strip().replace("_", "").replace(",", "")
    match = re.fullmatch(r"(#|e)?(\d+)|(t|@)(\d+)", text, flags=re.IGNORECASE)
    if not match:
        raise ValueError(f"cannot go to {text!r}: give an event number (1234) or a cycle (t5000)")
    if match.group(2) is not None:
        return "event", int(match.group(2))
    return "cycle", int(match.group(4))


_KINDS = {kind.name.lower(): kind for kind in Kind}


def event_matches(replay: Replay, query: str) -> np.ndarray:
    """A boolean mask over all events of those matching every word of ``query``.

    Words: an event kind (``wait_begin``), ``pe2``, ``future 12`` / ``f12``,
    ``cmd 7``, ``file.py:86`` or ``:86``, ``t>5000``; any other word matches
    events whose op, name, category or message contains it.
    Raises ValueError for an empty query.
    """
    index = replay.index
    c = index.columns
    words = query.lower().split()
    if not words:
        raise ValueError("empty search")
    mask = np.ones(index.n_events, dtype=bool)
    k = index.commands
    i = 0
    while i < len(words):
        word = words[i]
        number = words[i + 1] if i + 1 < len(words) and words[i + 1].isdigit() else None
        if word in _KINDS:
            mask &= c.kind == int(_KINDS[word])
        elif m := re.fullmatch(r"pe(\d+)", word):
            mask &= c.pe == int(m.group(1))
        elif word in ("pe", "future", "cmd") and number is not None:
            mask &= _id_mask(replay, word, int(number))
            i += 1
        elif m := re.fullmatch(r"(f|cmd)(\d+)", word):
            mask &= _id_mask(replay, "future" if m.group(1) == "f" else "cmd", int(m.group(2)))
        elif m := re.fullmatch(r"([^:\s]*):(\d+)", word):
            wanted = np.array(
                [
                    loc.line == int(m.group(2)) and loc.file.lower().endswith(m.group(1))
                    for loc in index.locs
                ]
                + [False]
            )
            loc_of = c.loc.copy()
            issues = (c.kind == Kind.ISSUE) & (c.cmd >= 0)
            loc_of[issues] = k.loc[c.cmd[issues]]
            mask &= wanted[np.where(loc_of >= 0, loc_of, len(index.locs))]
        elif m := re.fullmatch(r"t([<>]=?)(\d+)", word):
            op, t = m.group(1), int(m.group(2))
            mask &= {
                "<": c.time < t,
                "<=": c.time <= t,
                ">": c.time > t,
                ">=": c.time >= t,
            }[op]
        else:
            ids = [n for n, s in enumerate(index.strings) if word in s.lower()]
            if not ids:
                mask[:] = False
            else:
                strings = np.array(ids)
                mask &= np.isin(c.op, strings) | ((c.kind == Kind.OP_LOG) & np.isin(c.aux, strings))
        i += 1
    return mask


def _id_mask(replay: Replay, what: str, value: int) -> np.ndarray:
    c, k = replay.index.columns, replay.index.commands
    if what == "pe":
        return c.pe == value
    if what == "cmd":
        return c.cmd == value
    fut_of_cmd = np.where(c.cmd >= 0, 0, NONE)
    if len(k.future):
        inside = (c.cmd >= 0) & (c.cmd < len(k.future))
        fut_of_cmd = np.where(inside, k.future[np.where(inside, c.cmd, 0)], NONE)
    return (c.fut == value) | (fut_of_cmd == value)


def search(replay: Replay, query: str, position: int, reverse: bool = False) -> int | None:
    """The next event matching ``query`` after the current one (wrapping), or None."""
    hits = np.flatnonzero(event_matches(replay, query))
    if not len(hits):
        return None
    found = next_event(hits, position, reverse)
    if found is None:
        found = int(hits[-1] if reverse else hits[0])
    return found


def banner(replay: Replay) -> str | None:
    """One line for a run that did not complete, worded as ``report``, ``diff`` and the
    compare header word it (``did not complete: deadlock on PEs 0, 1 at cycle 4: ...``),
    else None."""
    reason = incomplete(replay)
    return None if reason is None else f"did not complete: {reason}"


def short_loc(loc: SourceLoc | None) -> str:
    """``attention.py:86`` for a SourceLoc (the file's base name)."""
    if loc is None:
        return "?"
    return f"{loc.file.rsplit('/', 1)[-1]}:{loc.line}"


def cycles(n: int, width: int = 6) -> str:
    """A cycle count in at most ``width`` characters when it can: 842, 26944, 27k, 1.17M."""
    text = str(int(n))
    if len(text) <= width:
        return text
    for scale, suffix in ((1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")):
        value = n / scale
        if abs(value) < 999.5:
            for digits in (3, 2):
                short = f"{value:.{digits}g}{suffix}"
                if len(short) <= width and "e" not in short:
                    return short
            return f"{value:.0f}{suffix}"
    return text


_PATH = re.compile(r" at (?:[^ ]*/)?([^ /]+:\d+)$")


def event_text(replay: Replay, i: int) -> str:
    """Event ``i`` without its number and cycle, file paths shortened:
    ``PE 0 issue load_async cmd 4 future 1 ... at attention.py:85``."""
    _, _, pe, rest = (replay.describe(i) + " ").split(" ", 3)
    rest = _PATH.sub(r" at \1", rest.rstrip())
    return f"PE {pe[2:]} {rest}"


def tl_call_text(replay: Replay, i: int, place: bool = True) -> str:
    """What the tl call at event ``i`` (an ISSUE or a WAIT_BEGIN) is, for the status line:
    ``PE 0 tl.wait on future 1 at attention.py:86: stalls 842 cycles (event #33)``;
    without the line and the event number unless ``place``."""
    index = replay.index
    c = index.columns
    pe = int(c.pe[i])
    if Kind(int(c.kind[i])) == Kind.WAIT_BEGIN:
        future = int(c.fut[i])
        loc = index.loc(int(c.loc[i]))
        where = f" at {short_loc(loc)}" if loc is not None and place else ""
        if blocking_load(replay, future):
            text = f"PE {pe} blocking tl.load future {future}{where}"
        else:
            text = f"PE {pe} tl.wait on future {future}{where}"
        f = index.futures
        if 0 <= future < len(f.stall):
            if f.wait_end[future] < 0:
                text += ": never resolves"
            elif f.stall[future] > 0:
                text += f": stalls {int(f.stall[future]):,} cycles"
            else:
                text += ": data already there, no stall"
    else:
        text = event_text(replay, i)
        # "issue load cmd 0 future 0 addr 0x0 8x128 ..." -> "tl.load future 0, 8x128 ..."
        m = re.fullmatch(r"(PE \d+) issue (\S+) cmd \d+( future \d+)?(?: addr \S+)? (.*)", text)
        if m:
            pe_text, op, future, rest = m.groups()
            name = op if "." in op else f"tl.{op}"  # a composite's own commands are op.part
            text = f"{pe_text} {name}{future or ''}, {rest}"
        if not place:
            text = _PATH.sub("", text)
    return f"{text} (event #{i})" if place else text


def future_text(replay: Replay, future: int) -> str:
    """A future picked in the table: what it is, and the keys that follow it."""
    index = replay.index
    f, k = index.futures, index.commands
    if not 0 <= future < len(f.cmd):
        return f"no future {future}"
    cmd = int(f.cmd[future])
    what = ""
    if cmd >= 0:
        loc = index.loc(int(k.loc[cmd])) if cmd < len(k.loc) else None
        where = f" at {short_loc(loc)}" if loc is not None else ""
        # The slice of a named tensor it moves (format 1.5): K[64:128, :].
        found = Values.of(replay).slice_of_future(future)
        moved = f" {found}" if found is not None else ""  # the header escapes the line
        what = f" ({index.string(int(k.op[cmd]))}{moved} on PE {int(k.pe[cmd])}{where})"
    return f"future {future}{what}: f/F walk its lifecycle, z zooms the timeline to it"


def seek_cycle_text(replay: Replay, cycle: int) -> str:
    """Where a seek to ``cycle`` landed: the last event at or before it."""
    current = replay.position - 1
    if current < 0:
        return f"at cycle {cycle:,}: before the first event"
    at = int(replay.index.columns.time[current])
    if at == cycle:
        return f"at cycle {cycle:,} (event #{current})"
    return f"at cycle {cycle:,}: the last event at or before it is #{current}, at cycle {at:,}"


def biggest_saving_first(findings) -> list[Finding]:
    """``findings`` in the order to fix them: the largest estimated saving first, as
    ``report`` lists them."""
    return sorted(findings, key=lambda f: (-f.saving, -f.share, f.pe, f.id))


def finding_event(replay: Replay, finding: Finding) -> int | None:
    """The event a finding is best seen from: its first one on the finding's own source
    line (a tl call there), else its first; None if it has none."""
    if not finding.events:
        return None
    if finding.loc is not None:
        index = replay.index
        c, k = index.columns, index.commands
        for i in finding.events:
            loc_id = int(c.loc[i])
            if Kind(int(c.kind[i])) == Kind.ISSUE and 0 <= int(c.cmd[i]) < len(k.loc):
                loc_id = int(k.loc[int(c.cmd[i])])
            loc = index.loc(loc_id)
            if loc is not None and (loc.file, loc.line) == (finding.loc.file, finding.loc.line):
                return int(i)
    return int(finding.events[0])


def blocking_load(replay: Replay, future: int) -> bool:
    """Whether ``future``'s wait is a blocking ``tl.load``'s own (no ``tl.wait`` in the
    source: the load waits for its data before it returns)."""
    index = replay.index
    f, k = index.futures, index.commands
    if not 0 <= future < len(f.cmd):
        return False
    cmd = int(f.cmd[future])
    return 0 <= cmd < len(k.op) and index.string(int(k.op[cmd])) == "load"


def short_loc_of(file: str, line: int) -> str:
    return f"{file.rsplit('/', 1)[-1]}:{line}"


def stop_reason(replay: Replay, hit: Hit) -> str:
    """Why ``continue_`` stopped at ``hit``: which breakpoint, which future, where."""
    index = replay.index
    c = index.columns
    i = hit.index
    bp = hit.breakpoint
    pe = int(c.pe[i])
    loc = index.loc(int(c.loc[i]))
    where = f" at {short_loc(loc)}" if loc is not None else ""
    if isinstance(bp, StalledWait) and Kind(int(c.kind[i])) == Kind.WAIT_BEGIN:
        future = int(c.fut[i])
        f = index.futures
        stall = int(f.stall[future]) if 0 <= future < len(f.stall) else 0
        if 0 <= future < len(f.wait_end) and f.wait_end[future] < 0:
            # The wait never ends: its stall is not a number of cycles.
            forever = (
                "waits forever (deadlock)"
                if replay.status == "deadlock"
                else f"is still waiting when the trace ends ({replay.status})"
            )
            what = "blocking tl.load" if blocking_load(replay, future) else "tl.wait"
            return f"stopped at a stalled {what}{where}: PE {pe} {forever} for future {future}"
        # The stall before the future: on a narrow screen the end is cut, and the header's
        # first line already names the future. One PE goes unnamed, so 80 columns hold it.
        who = f"PE {pe}, " if index.n_pes > 1 else ""
        if blocking_load(replay, future):
            # A blocking load waits inside the call: its line has no tl.wait to point at.
            return (
                f"stopped at a blocking tl.load stalled {stall:,} cycles{where}: "
                f"{who}future {future}"
            )
        waits = f"{who}waits {stall:,} cycles for future {future}"
        return f"stopped at a stalled tl.wait{where}: {waits}"
    if isinstance(bp, SourceLine) and loc is not None:
        if Kind(int(c.kind[i])) in (Kind.ISSUE, Kind.WAIT_BEGIN):
            return f"stopped at breakpoint {short_loc(loc)}: {tl_call_text(replay, i, place=False)}"
        text = replay.describe(i).split(" ", 3)[-1].rsplit(" at ", 1)[0]
        return f"stopped at breakpoint {short_loc(loc)}: PE {pe} {text}"
    text = replay.describe(i).split(" ", 3)[-1]
    text = text.rsplit(" at ", 1)[0] if loc is not None else text
    return f"stopped at {bp.describe(replay)}: PE {pe} {text}{where}"


def breakpoint_summary(replay: Replay) -> str:
    """The enabled breakpoints in a few words: ``stalled waits, attention.py:86``."""
    parts = []
    for bp in replay.breakpoints:
        if not bp.enabled:
            continue
        if isinstance(bp, StalledWait) and bp.pe is None and bp.line is None:
            parts.append("stalled waits" if bp.min_stall <= 1 else f"waits >= {bp.min_stall}")
        elif isinstance(bp, SourceLine):
            parts.append(short_loc_of(bp.file or "*", bp.line))
        else:
            parts.append(bp.describe(replay))
    if len(parts) > 3:
        return f"{parts[0]}, {parts[1]} and {len(parts) - 2} more"
    return ", ".join(parts)


def one_line(error: BaseException, path: str) -> str:
    """An open error as one line naming the file."""
    if isinstance(error, FileNotFoundError):
        return f"{path}: no such file"
    if isinstance(error, IsADirectoryError):
        return f"{path}: is a directory, not a trace"
    if isinstance(error, PermissionError):
        return f"{path}: permission denied"
    if isinstance(error, OSError):
        return f"{path}: {error.strerror or error}"
    text = " ".join(str(error).split())
    return text if path in text else f"{path}: {text}"


def next_breakable_line(replay: Replay, file: str, line: int) -> tuple[int, int] | None:
    """The first line after ``line`` in ``file`` where a SourceLine breakpoint stops (a tl
    call, a kernel's ``def``), and how often it stops there; None if no later line does."""
    candidates: set[int] = set()
    for loc in replay.index.locs:
        while loc is not None:
            if loc.file == file and loc.line > line:
                candidates.add(loc.line)
            loc = loc.caller
    for candidate in sorted(candidates):
        hits = len(SourceLine(file=file, line=candidate).hits(replay))
        if hits:
            return candidate, hits
    return None
