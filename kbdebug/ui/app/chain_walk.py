"""Following a stalled receive across PEs: the stops of its wait chain and what each says.

A wait chain (``Analysis.wait_chain``) is a list of links, each a stalled receive and
the late send it waited for, then its root. Walking it, the cursor stops at the wait,
at the send it waited for (on the sender's PE), at what that PE was stalled on, at
that wait's send, ... and last at the root cause when it is an event of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.wait_chain import STALL, TRANSIT, WORK, ChainRoot, WaitChain
from kbdebug.safe_text import escape
from kbdebug.ui.queries import short_loc


@dataclass(frozen=True)
class Stop:
    """One place the walk puts the cursor: an event on a PE, and what to say there."""

    event: int
    pe: int
    text: str


def _at(loc: SourceLoc | None) -> str:
    return escape(short_loc(loc), 200)


def root_text(root: ChainRoot) -> str:
    """Why the chain stops, in words."""
    if root.kind == WORK:
        return f"the root: PE {root.pe}'s own work ({root.cycles:,} cycles busy before its send)"
    if root.kind == TRANSIT:
        return (
            f"not late: PE {root.pe} sent before the wait began; "
            f"the message took {root.cycles:,} cycles to arrive"
        )
    if root.kind == STALL:
        op = escape(root.op, 32) or "command"
        return f"the root: PE {root.pe} stalled {root.cycles:,} cycles on a {op} at {_at(root.loc)}"
    why = {
        "unmatched": "a receive no send ever matched",
        "cycle": "the chain comes back to a wait it passed",
        "depth": "followed as far as the chain goes",
        "not-stalled": "the wait did not stall",
    }.get(root.kind, escape(root.kind, 32))
    return f"the chain stops at PE {root.pe} {_at(root.loc)}: {why}"


def chain_stops(chain: WaitChain, time_of) -> list[Stop]:
    """The stops of ``chain``, from the wait asked about to its root; ``time_of(event)``
    gives an event's cycle."""
    links = chain.links
    n = len(links)
    stops: list[Stop] = []
    for k, link in enumerate(links):
        if k == 0:
            stops.append(
                Stop(
                    link.wait_event,
                    link.pe,
                    f"PE {link.pe} waits {link.stall:,} cycles at {_at(link.wait_loc)} "
                    f"(cycle {link.waited_at:,}) for PE {link.sender}'s send",
                )
            )
        if k + 1 < n:
            nxt = links[k + 1]
            why = f"PE {nxt.pe} was stalled {nxt.stall:,} cycles at {_at(nxt.wait_loc)}"
        else:
            why = root_text(chain.root)
        late = f"{link.late:,} cycles late" if link.late > 0 else "not late"
        said = f"{late}: {why}"
        if k + 1 == n and chain.root.kind == TRANSIT:
            said = why  # the root's words begin "not late: PE 3 sent before the wait began"
        stops.append(
            Stop(
                link.send_event,
                link.sender,
                f"link {k + 1}/{n}: PE {link.sender}'s send at {_at(link.send_loc)}, "
                f"cycle {link.issued:,}, {said}",
            )
        )
        if k + 1 < n:
            stops.append(
                Stop(
                    nxt.wait_event,
                    nxt.pe,
                    f"link {k + 2}/{n}: PE {nxt.pe} waits {nxt.stall:,} cycles at "
                    f"{_at(nxt.wait_loc)} (cycle {nxt.waited_at:,}) for PE {nxt.sender}'s send",
                )
            )
    root = chain.root
    if not stops or root.event != stops[-1].event:
        cycle = time_of(root.event)
        stops.append(Stop(root.event, root.pe, f"{root_text(root)} (cycle {cycle:,})"))
    return stops
