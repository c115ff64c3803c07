"""The words of a finding: its one-line message and suggestion, from its rule's figures."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.finding import IMMEDIATE_MAX_WORK
from kbdebug.replay.index import NONE

if TYPE_CHECKING:
    from kbdebug.analysis.findings import _Diagnosis as Diagnosis
    from kbdebug.analysis.findings import _Group as Group


def pipeline_hint(ahead: int) -> str:
    """Where a user finds a pipeline ``ahead`` tiles deep: a module installed with kbdebug
    (a file path of kbdebug's own tree is not in the user's)."""
    return (
        f"TilePipeline(tl, streams, n_tiles, depth={ahead}) from emulator.kernels.pipeline does it"
    )


def ahead_where(ahead: int, first: str) -> str:
    """Where a load issued ``ahead`` tiles before its wait goes, as the re-timing places
    it: right after the wait of the load ``ahead`` places earlier in its stream (the
    previous tile's at one tile), the first ``ahead`` at ``first``."""
    if ahead == 1:
        return "right after the previous tile's tl.wait"
    return f"right after the tl.wait of the tile {ahead} before it, the first {ahead} {first}"


def first_one(ahead: int, above: int, first: str) -> str:
    """At one tile ahead, where the first load goes when the re-timing moves it (above
    ``above``): the previous tile's wait places every load but that one."""
    return f", and the first tile {first}" if ahead == 1 and above != NONE else ""


def where(loc: SourceLoc | None) -> str:
    """``file:line`` of ``loc`` (with the kernel line that called its helper)."""
    if loc is None:
        return "an unknown line"
    text = f"{os.path.basename(loc.file)}:{loc.line}"
    caller = getattr(loc, "caller", None)
    if caller is not None:
        text += f" (called from {os.path.basename(caller.file)}:{caller.line})"
    return text


def times(count: int) -> str:
    """The count in words: "once", or "N times"."""
    return "once" if count == 1 else f"{count:,} times"


def line_count(d: Diagnosis, g: Group) -> int:
    """How many of the group's commands the finding's own line issued or waited: a fix
    naming two lines (the A and B tiles of a step) covers both lines' commands, but the
    count the finding gives is of its line (a stream primed from another line counts
    only the issues of the line named)."""
    index = d.index
    fut_of, wait_loc = index.commands.future, index.futures.wait_loc
    at_line = 0
    for c in g.cmds:
        if not 0 <= c < len(d.loc):
            continue
        f = int(fut_of[c])
        waited = int(wait_loc[f]) if 0 <= f < len(wait_loc) else -1
        at_line += int(d.loc[c]) == g.loc_id or waited == g.loc_id
    return at_line or len(g.cmds)


def wait_where(d: Diagnosis, cmds: Iterable[int]) -> str:
    """Where most of ``cmds`` were waited."""
    index = d.index
    locs = [int(index.futures.wait_loc[index.commands.future[c]]) for c in cmds]
    locs = [x for x in locs if x >= 0]
    return where(index.loc(max(set(locs), key=locs.count))) if locs else "its tl.wait"


def _stream_waits(d: Diagnosis, g: Group) -> dict[int, list[tuple[int, int, list[int], int]]]:
    """The group's waits by the load line that names their stream (the line issuing
    most of the loads one line waits on): per such line, each of its wait lines with
    the stall there and the other lines that issued loads waited there (a prologue's)."""
    index = d.index
    fut_of, wait_loc = index.commands.future, index.futures.wait_loc
    by_wait: dict[int, list[int]] = {}
    for c in g.cmds:
        f = int(fut_of[c]) if 0 <= c < len(fut_of) else NONE
        by_wait.setdefault(int(wait_loc[f]) if 0 <= f < len(wait_loc) else NONE, []).append(c)
    out: dict[int, list[tuple[int, int, list[int], int]]] = {}
    for waited_at, cmds in sorted(by_wait.items(), key=lambda x: min(x[1])):
        issuers = [int(d.loc[c]) for c in cmds]
        owner = max(dict.fromkeys(issuers), key=issuers.count)
        stall = sum(d.stall.get(c, 0) for c in cmds)
        others = [x for x in dict.fromkeys(issuers) if x != owner]
        out.setdefault(owner, []).append(
            (waited_at, stall, others, len(issuers) - issuers.count(owner))
        )
    return out


def _stalled_at(d: Diagnosis, waits: list[tuple[int, int, list[int], int]], verb: str) -> str:
    """``waits at a.py:21 still stalled 5,472 cycles (the wait of the load at a.py:16
    among them)``: each wait line with its own stall, loads of other lines it waits named."""
    parts, among = [], []
    for i, (waited_at, stall, others, n_others) in enumerate(waits):
        parts.append(
            f"{where(d.index.loc(waited_at))} {verb + ' ' if i == 0 else ''}{stall:,} cycles"
        )
        if others:
            lines = ", ".join(where(d.index.loc(x)) for x in others)
            those = "the wait of the load" if n_others == 1 else "the waits of the loads"
            among.append(f"{those} at {lines}")
    text = "waits at " + ", at ".join(parts)
    return text + (f" ({' and '.join(among)} among them)" if among else "")


def words(d: Diagnosis, g: Group, loc: SourceLoc | None, stall: int) -> tuple[str, str]:
    """The message and the suggestion of a group's finding."""
    at, n, info = where(loc), line_count(d, g), g.info or {}
    lat = d.prog.hw.hbm_latency
    if g.rule == "KB101" and info.get("ahead") == 0:
        use = info.get("use_loc")
        use_at = where(use) if use is not None else "its first use"
        message = (
            f"tl.load at {at} blocked {times(n)} for {stall:,} cycles, though its data is "
            f"first used at {use_at}, below work that does not need it"
        )
        suggestion = f"issue it with tl.load_async and tl.wait just before {use_at}"
        return message, suggestion
    if g.rule in ("KB101", "KB102", "KB107"):
        ahead = info["ahead"]
        # Figures of the named line's own waits; the lines fixed with it say theirs.
        streams = _stream_waits(d, g)
        own = streams.get(g.loc_id) or [w for ws in streams.values() for w in ws]
        stall = sum(w[1] for w in own) if g.also else stall
        # Where the re-timing issues the first loads: above a line that runs once, or
        # above the first iteration of the loop (a line it repeats).
        above = info.get("first_above", NONE)
        first = (
            f"before {where(d.index.loc(above))}"
            if above != NONE and info.get("first_above_once")
            else "before the loop"
            if above != NONE or g.rule == "KB102"
            else "as early as the loop allows"
        )
        tiles = "one tile" if ahead == 1 else f"{ahead} tiles"
        # As deep as the stream has tiles: every load issued before the first wait.
        up_front = ahead > 1 and ahead >= info.get("tiles", ahead + 1)
        transfer, work = info["transfer"], info["work"]
        if g.rule == "KB101":
            message = (
                f"tl.load at {at} blocked {times(n)} for {stall:,} cycles; issued ahead, "
                f"its {transfer:,}-cycle transfer and {lat:,}-cycle latency would overlap the "
                f"work and the other loads before its data is used"
            )
            suggestion = (
                f"issue all {ahead} with tl.load_async up front, {first}, and tl.wait each "
                f"just before use ({pipeline_hint(ahead)})"
                if up_front
                else f"issue it with tl.load_async {tiles} ahead ("
                f"{ahead_where(ahead, first)}{first_one(ahead, above, first)}) and tl.wait just "
                f"before use ({pipeline_hint(ahead)})"
            )
        elif g.rule == "KB102":
            gap = (
                "with no work in between"
                if info["between"] < IMMEDIATE_MAX_WORK * (transfer + lat)
                else f"after only {info['between']:,} cycles of work"
            )
            own_cmds = [c for c in g.cmds if int(d.loc[c]) == g.loc_id] or g.cmds
            message = (
                f"tl.load_async at {at} was waited at {wait_where(d, own_cmds)} {gap} "
                f"{times(n)}, though it could have been issued above {info['movable']:,} "
                f"cycles of earlier work; the waits stalled {stall:,} cycles"
            )
            suggestion = (
                f"issue all {ahead} up front, {first}, so the work of the tiles "
                f"runs while they are in flight ({pipeline_hint(ahead)})"
                if up_front
                else f"issue it {tiles} ahead, {ahead_where(ahead, first)}"
                f"{first_one(ahead, above, first)}, so the "
                f"work of the tiles between runs while it is in flight ({pipeline_hint(ahead)})"
            )
        else:
            # An iteration's work that covers the transfer (a stream that starts over in
            # an outer loop stalls at each start) must not be called shorter than it.
            per_iteration = (
                "no work runs between its waits to hide"
                if work <= 0
                else f"one iteration's work ({work:,} cycles) is shorter than"
                if work < transfer + lat
                else f"one iteration's work ({work:,} cycles) covers"
            )
            # No work between a load and its wait (tl.wait(tl.load_async(...))): it is
            # not prefetched at all, and no earlier place in its iteration hides it.
            waited_at_once = info["between"] <= 0
            covered = 0 < work and transfer + lat <= work
            issued = (
                f"is waited where it is issued (at {wait_where(d, g.cmds)}), and"
                if waited_at_once
                else "is prefetched and"
                if covered
                else "is prefetched, but"
            )
            waits = _stalled_at(d, own, "still stalled")
            message = (
                f"tl.load_async at {at} {issued} {per_iteration} its transfer + "
                f"latency ({transfer + lat:,} cycles); {'yet ' if covered else ''}"
                f"{'the' if waited_at_once else 'its'} {waits}"
            )
            how = "prefetch" if waited_at_once else "prefetch deeper"
            depth = (
                f"issue all {ahead} loads up front, where the first one is issued now"
                if up_front
                else f"issue each load {tiles} ahead of its tl.wait, "
                f"{ahead_where(ahead, 'where the first one is issued now')}"
            )
            suggestion = (
                f"{how}: {depth} (the depth the re-timing gains most at, within scratch), "
                f"with a buffer for each load in flight"
            )
        if g.also:
            others = ", ".join(where(d.index.loc(i)) for i in g.also)
            message += f"; the loads at {others} are issued with it and are as late"
            theirs = [_stalled_at(d, streams[i], "stalled") for i in g.also if i in streams]
            if theirs:
                every = "both" if len(g.also) == 1 else f"all {len(g.also) + 1}"
                message += f": their {'; '.join(theirs)}; the saving is of {every} fixed together"
            suggestion += f" (with the loads at {others}: fixing one alone gains little)"
        return message, suggestion
    if g.rule == "KB103":
        other = where(d.index.loc(info["ahead_loc"]))
        message = (
            f"the load at {at} queued on the read channel {times(n)} behind loads from "
            f"{other} that are waited later (at {wait_where(d, g.cmds)} it stalled "
            f"{stall:,} cycles)"
        )
        suggestion = f"issue loads in the order they are waited: move this issue above {other}"
        return message, suggestion
    if g.rule in ("KB104", "KB109"):
        use = info.get("use_loc")
        use_at = where(use) if use is not None else "its first use"
        what = info.get("what") or ("message" if g.rule == "KB109" else "data")
        # A load the message gates moves down with the wait (above it, it would read first).
        carried = info.get("carried_loc")
        gated = f" but the load at {where(carried)} it gates" if carried is not None else ""
        message = (
            f"tl.wait at {at} waited {times(n)} for {what} nothing needs until {use_at}{gated}, "
            f"stalling {stall:,} cycles while work that does not need it could have run"
        )
        suggestion = (
            f"move the tl.wait down to just before {use_at}, below the work that does not need it"
        )
        if carried is not None:
            suggestion = (
                f"move the tl.wait and the load at {where(carried)} right below it down to just "
                f"before {use_at}, below the work that needs neither"
            )
        if g.also:  # waits of one step that only pay moved together
            others = ", ".join(where(d.index.loc(i)) for i in g.also)
            message += f"; so do the waits at {others}, right beside it"
            suggestion += f" (with the waits at {others}: moving one alone gains little)"
        return message, suggestion
    if g.rule == "KB110":
        calls, b = info["calls"], info["b_cycles"]
        message = (
            f"tl.composite at {at} is called {calls:,} times in a row over the same B, one "
            f"row block each: every call restarts the pipeline, reading B ({b:,} cycles) and "
            f"its first A tile cold ({info['total']:,} cycles in all, "
            f"{info['merged']:,} as one call)"
        )
        suggestion = (
            "make one tl.composite call over all the rows (A's shape (M, K) for all of them, "
            "the same tile): the scheduler keeps its loads in flight across the tiles"
        )
        return message, suggestion
    if g.rule == "KB108":
        what = info["kind"]
        reload = info.get("reload_loc")
        if reload is not None:
            again = info.get("reload_op", "load")
            does = "reads the bytes back" if again == "load" else "writes the bytes again"
            message = (
                f"tl.wait at {at} waited for a store to land {times(n)}, stalling {stall:,} "
                f"cycles, long before the {again} at {where(reload)} {does}"
            )
            suggestion = f"move the tl.wait down to just before the {again} at {where(reload)}"
            if info.get("dropped"):
                kept = times(max(n - info["dropped"], 1))
                suggestion += (
                    f" where it {does.split(' ')[0]} them ({kept}); drop it where nothing uses "
                    f"the bytes again ({times(info['dropped'])})"
                )
            return message, suggestion
        message = (
            f"tl.wait at {at} waited for a {what} to land {times(n)}, stalling {stall:,} "
            f"cycles, though nothing after it reads what the {what} wrote"
        )
        suggestion = (
            f"drop the wait (the kernel's end waits for every {what}) or move it to where the "
            f"{'stored bytes are read again' if what == 'store' else 'data must have arrived'}"
        )
        return message, suggestion
    message = (
        f"tl.wait at {at} waited for a receive right after posting it {times(n)}, "
        f"stalling {stall:,} cycles, while work that follows could have run first"
    )
    suggestion = (
        "post tl.recv_async early, do the work that does not need the message, then tl.wait"
    )
    return message, suggestion
