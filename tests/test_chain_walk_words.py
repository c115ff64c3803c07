"""The app's wait-chain walk (``u``) says each link's lateness once: a last send that was
not late, whose root is the message in flight, read 'not late: not late: PE 3 sent ...'."""

from __future__ import annotations

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.wait_chain import TRANSIT, WORK, ChainLink, ChainRoot, WaitChain
from kbdebug.ui.app.chain_walk import chain_stops

WAIT_LOC = SourceLoc("ring.py", 20, "ring")
SEND_LOC = SourceLoc("ring.py", 17, "ring")


def link(issued: int, waited_at: int = 700) -> ChainLink:
    """PE 0 waits at cycle ``waited_at`` for PE 3's send issued at ``issued``."""
    return ChainLink(
        pe=0,
        wait_event=10,
        wait_loc=WAIT_LOC,
        waited_at=waited_at,
        stall=350,
        sender=3,
        send_event=5,
        send_loc=SEND_LOC,
        issued=issued,
        delivered=issued + 360,
        work=100,
    )


def send_stop_text(chain: WaitChain) -> str:
    stops = chain_stops(chain, time_of=lambda event: event * 10)
    return next(s.text for s in stops if s.event == chain.links[-1].send_event)


def test_a_send_in_flight_is_said_not_late_once():
    chain = WaitChain(10, (link(issued=690),), ChainRoot(TRANSIT, 3, 5, SEND_LOC, 360))
    text = send_stop_text(chain)
    assert text == (
        "link 1/1: PE 3's send at ring.py:17, cycle 690, not late: PE 3 sent before the "
        "wait began; the message took 360 cycles to arrive"
    )
    assert text.count("not late") == 1


def test_a_late_send_still_says_how_late_before_its_root():
    chain = WaitChain(10, (link(issued=711),), ChainRoot(WORK, 3, 5, SEND_LOC, 700))
    assert send_stop_text(chain) == (
        "link 1/1: PE 3's send at ring.py:17, cycle 711, 11 cycles late: the root: PE 3's own "
        "work (700 cycles busy before its send)"
    )
