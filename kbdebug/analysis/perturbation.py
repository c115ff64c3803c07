"""A trace's timing perturbation (``kbdebug run --perturb SEED``), read from its header's config.

A perturbed run's header config holds ``perturb_seed`` (above 0) and its bounds; a
nominal run's holds none of them. The values come from a file: each is checked
before it is shown, and one that is not a number of its range reads as unknown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The ranges of the header fields (emulator.config's, repeated: analysis never imports
#: the emulator); a value outside reads as unknown.
MAX_SEED = 2**32 - 1
MAX_FRACTION = 9.0
MAX_WINDOW = 1024

#: What the figures of a perturbed trace's report mean, said beside them.
FIGURES_NOTE = (
    "a perturbed run: the bound takes the nominal latencies and no grant delay, so the "
    "cycles the perturbation adds (longer latencies, a channel idle before a grant) "
    "count as lost time in the efficiency and the findings' savings; report the "
    "nominal run (without --perturb) for the kernel's own figures"
)


@dataclass(frozen=True)
class Perturbation:
    """The seed and bounds a run was perturbed with (None: a bound the header does not
    hold as a number of its range)."""

    seed: int
    latency: float | None
    grant_delay: float | None
    grant_window: int | None

    def label(self) -> str:
        """``seed 33, latency ±100%, grant delay ≤1.5x HBM latency, grant window 2``."""
        if self.latency is None:
            latency = "latency ?"
        elif self.latency <= 1:
            latency = f"latency ±{self.latency:.0%}"
        else:
            latency = f"latency 0..{1 + self.latency:g}x"
        delay = "?" if self.grant_delay is None else f"≤{self.grant_delay:g}x HBM latency"
        window = "?" if self.grant_window is None else str(self.grant_window)
        return f"seed {self.seed}, {latency}, grant delay {delay}, grant window {window}"

    def to_json(self) -> dict[str, Any]:
        """The header's fields, under their hardware names."""
        return {
            "perturb_seed": self.seed,
            "perturb_latency": self.latency,
            "perturb_grant_delay": self.grant_delay,
            "perturb_grant_window": self.grant_window,
        }


def perturbation_of(header: Mapping[str, Any]) -> Perturbation | None:
    """The perturbation a trace's ``header`` records, or None for a nominal run (or a
    seed that is not a whole number of its range)."""
    config = header.get("config")
    if not isinstance(config, Mapping):
        return None
    seed = _whole(config.get("perturb_seed"), 1, MAX_SEED)
    if seed is None:
        return None
    return Perturbation(
        seed=seed,
        latency=_fraction(config.get("perturb_latency")),
        grant_delay=_fraction(config.get("perturb_grant_delay")),
        grant_window=_whole(config.get("perturb_grant_window"), 1, MAX_WINDOW),
    )


def _whole(value: Any, low: int, high: int) -> int | None:
    if type(value) is not int or not low <= value <= high:
        return None
    return value


def _fraction(value: Any) -> float | None:
    if type(value) not in (int, float) or not math.isfinite(value):
        return None
    return float(value) if 0 <= value <= MAX_FRACTION else None
