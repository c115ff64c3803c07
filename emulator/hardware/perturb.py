"""Jitter: a seeded perturbation of one DMA channel's or IPCQ link's latencies and grant order.

A run with ``perturb_seed`` set gives every DMA channel and IPCQ link a Jitter
of its own, keyed by (seed, PE, channel id), so the same seed makes the same
run byte for byte and one channel's draws never depend on another's. Each
transfer's latency is that channel's next draw (transfer n takes draw n), and
each grant among several waiting commands takes the next draw of a second
stream, so shuffling grants never shifts the latencies.
"""

from __future__ import annotations

import numpy as np

#: Largest ``spread``: a latency drawn up to this many times over its nominal, plus one.
MAX_SPREAD = 9.0


class Jitter:
    """Latencies within ``+/- spread`` of nominal; grants among the ``window`` oldest waiting,
    each after a delay of up to ``max_delay`` cycles.

    A latency is drawn uniformly between ``max(0, 1 - spread)`` and ``1 + spread``
    times its nominal: past 1, the spread only lengthens (a latency is never
    negative).

    ``in_order``: deliveries keep their order (an IPCQ link is a FIFO: a message
    never overtakes the one sent before it), so a draw that would land a
    transfer before its predecessor lands it with that predecessor instead.
    """

    __slots__ = (
        "spread",
        "window",
        "in_order",
        "max_delay",
        "last_landing",
        "_latencies",
        "_grants",
        "_delays",
    )

    def __init__(
        self,
        seed: int,
        pe: int,
        channel: int,
        *,
        spread: float,
        window: int,
        in_order: bool,
        max_delay: int = 0,
    ):
        if not 0 <= spread <= MAX_SPREAD:
            raise ValueError(f'"spread" must be within 0..{MAX_SPREAD}, got {spread!r}')
        if window < 1:
            raise ValueError(f'"window" must be >= 1, got {window!r}')
        if max_delay < 0:
            raise ValueError(f'"max_delay" must be >= 0, got {max_delay!r}')
        latencies, grants, delays = np.random.SeedSequence([seed, pe, channel]).spawn(3)
        #: Largest fraction a latency moves away from its nominal, either way.
        self.spread = spread
        #: How many of the oldest waiting commands a grant picks among.
        self.window = window
        self.in_order = in_order
        #: Most cycles a command waits, its channel idle, before it is granted.
        self.max_delay = max_delay
        #: Cycle at which the latest transfer lands (kept only ``in_order``).
        self.last_landing = 0
        self._latencies = np.random.default_rng(latencies)
        self._grants = np.random.default_rng(grants)
        self._delays = np.random.default_rng(delays)

    def latency(self, nominal: int, now: int) -> int:
        """The latency of the channel's next transfer, leaving the channel at ``now``."""
        low = max(0.0, 1.0 - self.spread)
        factor = low + (1.0 + self.spread - low) * float(self._latencies.random())
        cycles = int(nominal * factor + 0.5)
        if self.in_order:
            landing = max(now + cycles, self.last_landing)
            self.last_landing = landing
            cycles = landing - now
        return cycles

    def grant_delay(self) -> int:
        """Cycles the next grant waits, the channel idle (the engine slow to start the
        transfer): 0..max_delay, from a stream of its own; 0 without drawing when
        there is no delay to draw."""
        if not self.max_delay:
            return 0
        return int(self._delays.integers(self.max_delay + 1))

    def pick(self, waiting: int) -> int:
        """Which of ``waiting`` queued commands (0: the oldest) the freed channel goes to."""
        window = min(self.window, waiting)
        if window < 2:
            return 0
        return int(self._grants.integers(window))
