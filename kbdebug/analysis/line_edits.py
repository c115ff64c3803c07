"""One line's edit on every PE that runs it, and early waits of one step moved together.

A finding is detected on a PE whose own fix gains enough there; the same line on
another PE may gain nothing alone (it waits on a neighbour that also has to
change: a pipeline's stages, a reduction tree's levels). :func:`spread` builds
the line's edit on every PE whose program makes that line's waits, so the launch
is re-timed with all of them. :func:`waits_together` merges the lines of waits
that sit side by side before work none of them feeds (a stencil's halo
receives): moving one alone leaves the step stalled on the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbdebug.analysis.stream_edits import _Group

if TYPE_CHECKING:
    from kbdebug.analysis.findings import _Diagnosis

#: Rules whose edit :func:`spread` can build on another PE from the line alone.
SPREADABLE = ("KB101", "KB102", "KB104", "KB107", "KB108", "KB109", "KB110")


def waits_together(d: _Diagnosis, groups: list[_Group]) -> list[_Group]:
    """``groups`` (early waits, one line each) with the lines whose waits fall between the
    same two computes merged into one group naming them all, when that joint move gains
    clearly more than the best of them alone. A line none of whose waits stalled (it
    hid behind another's) is kept only in such a merge."""

    def stalled(g: _Group) -> bool:
        return any(d.stall.get(c, 0) > 0 for c in g.cmds)

    if len(groups) < 2:
        return [g for g in groups if stalled(g)]
    blocks = [{int(d.compute_steps[d.wait_step[c]]) for c in g.cmds} for g in groups]
    # Lines that share a step's wait block are one component (union-find over groups).
    parent = list(range(len(groups)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(groups)):
        for j in range(i + 1, len(groups)):
            if blocks[i] & blocks[j]:
                parent[root(j)] = root(i)
    members: dict[int, list[_Group]] = {}
    for i, g in enumerate(groups):
        members.setdefault(root(i), []).append(g)
    out: list[_Group] = []
    for team in members.values():
        loud = [g for g in team if stalled(g)]
        if len(team) < 2 or not loud:
            out.extend(loud)
            continue
        merged = merge(d, team)
        best = max(d.gain(g) for g in loud)
        if d.gain(merged) > best + d.floor() // 3:
            out.append(merged)
        else:
            out.extend(loud)
    return out


def merge(d: _Diagnosis, team: list[_Group]) -> _Group:
    """One group of ``team``'s waits, named by the line waited first."""
    ordered = sorted(team, key=lambda g: min(d.wait_step[c] for c in g.cmds))
    first = ordered[0]
    return _Group(
        first.rule,
        first.loc_id,
        sorted(c for g in ordered for c in g.cmds),
        {s: k for g in ordered for s, k in g.moves.items()},
        info={**(first.info or {}), "lines": len(ordered)},
        also=tuple(dict.fromkeys(g.loc_id for g in ordered[1:] if g.loc_id != first.loc_id)),
    )


def spread(diagnoses: list[_Diagnosis], by_line: dict) -> None:
    """Add to ``by_line`` (and to each PE's groups) the edit of every line found on some
    PEs, built on each other PE whose program waits at that line (no per-PE floor)."""
    for items in by_line.values():
        template = items[0][1]
        if template.rule not in SPREADABLE:
            continue
        have = {d.prog.pe for d, _ in items}
        for d in diagnoses:
            if d.prog.pe in have:
                continue
            g = _build(d, template)
            if g is None:
                continue
            groups = d.groups()
            taken = {c for other, _ in groups for c in other.cmds}
            if any(c in taken for c in g.cmds):
                continue
            # Its gain on this PE alone is below the floor (else it was found here):
            # the launch's re-timing with the line fixed everywhere prices it.
            groups.append((g, 0))
            items.append((d, g))


def _build(d: _Diagnosis, template: _Group) -> _Group | None:
    """``template``'s edit (its lines, its depth) on PE ``d``, or None if d never waits there."""
    from kbdebug.analysis import wait_edits

    rule, lines = template.rule, (template.loc_id, *template.also)
    if rule in ("KB101", "KB102", "KB107") and "ahead" in (template.info or {}):
        if "movable" not in template.info:  # KB101 of a blocking load's early wait
            return _pick(wait_edits.early_wait_groups(d, "KB101"), template, d)
        return _stream(d, template)
    if rule in ("KB104", "KB109"):
        if d.prog.knows_reads:
            found = wait_edits.early_wait_groups(d, "KB109", True)
            found += wait_edits.early_wait_groups(d, "KB104", True)
        else:
            found = wait_edits.early_receive_groups(d)
        team = [g for g in found if g.loc_id in lines]
        if len(team) > 1 and template.also:
            return merge(d, team)
        return _pick(team, template, d)
    if rule == "KB108":
        kind = (template.info or {}).get("kind")
        found = [
            g
            for g in wait_edits.store_wait_groups(d)
            if (g.info or {}).get("kind") == kind and bool(g.drops) == bool(template.drops)
        ]
        return _pick(found, template, d)
    if rule == "KB110":
        return _pick(wait_edits.composite_groups(d), template, d)
    return None


def _pick(found: list[_Group], template: _Group, d: _Diagnosis) -> _Group | None:
    for g in found:
        if g.loc_id == template.loc_id and not template.also:
            return g
    return None


def _stream(d: _Diagnosis, template: _Group) -> _Group | None:
    """The stream issued at ``template``'s line, each load as many tiles ahead."""
    if template.also:
        return None
    for (loc_id, _), stream in d._streams().items():
        if loc_id != template.loc_id:
            continue
        waited = [c for c in stream if c in d.stall]
        if not waited:
            return None
        ahead = template.info["ahead"]
        moves = d._ahead_moves(stream, ahead, template.rule != "KB107")
        return _Group(template.rule, loc_id, waited, moves, info=dict(template.info))
    return None
