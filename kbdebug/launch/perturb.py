"""--perturb SEED and its bounds: the options ``kbdebug run`` and ``kbdebug explore`` share.

They are the hardware fields ``perturb_seed``, ``perturb_latency``,
``perturb_grant_delay`` and ``perturb_grant_window`` (``kbdebug hw`` describes
them) under names a user types; a value out of its range is one line naming the
option.
"""

from __future__ import annotations

import argparse
from typing import Any

from emulator.config import HardwareConfig
from emulator.errors import ConfigError
from kbdebug.errors import UserError

#: Option (as typed), its argparse dest, and the hardware field it sets.
BOUNDS = (
    ("--perturb-latency", "perturb_latency", "perturb_latency"),
    ("--perturb-delay", "perturb_delay", "perturb_grant_delay"),
    ("--perturb-grant", "perturb_grant", "perturb_grant_window"),
)
DEFAULTS = HardwareConfig()


def add_bounds(parser: argparse.ArgumentParser) -> None:
    """The two bounds of a perturbation, each defaulting to its hardware field's default."""
    parser.add_argument(
        "--perturb-latency",
        type=float,
        metavar="FRACTION",
        help="each DMA and IPCQ latency drawn within +/- this fraction of its own "
        f"(default {DEFAULTS.perturb_latency}; past 1 only longer)",
    )
    parser.add_argument(
        "--perturb-delay",
        type=float,
        metavar="FRACTION",
        help="each DMA command waits up to this fraction of the HBM latency before its "
        f"channel is granted (default {DEFAULTS.perturb_grant_delay})",
    )
    parser.add_argument(
        "--perturb-grant",
        type=int,
        metavar="N",
        help="a DMA read channel grants one of its N oldest waiting commands at random "
        f"(1: in order; default {DEFAULTS.perturb_grant_window}; a write channel keeps "
        "its stores in order)",
    )


def add_seed(parser: argparse.ArgumentParser) -> None:
    """--perturb SEED and its bounds (``kbdebug run``)."""
    parser.add_argument(
        "--perturb",
        type=int,
        metavar="SEED",
        help="perturb DMA and IPCQ timing from SEED (the same seed, the same trace; 0: off); "
        "kbdebug explore prints the SEED of each run that differs",
    )
    add_bounds(parser)


def bounds(args: argparse.Namespace) -> dict[str, Any]:
    """The hardware fields the bounds given set ({} for none); UserError for a value out
    of its range."""
    values = {}
    for option, dest, name in BOUNDS:
        value = getattr(args, dest, None)
        if value is not None:
            values[name] = _checked(option, name, value)
    return values


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The hardware fields --perturb and its bounds set ({} when --perturb is absent);
    UserError for a bound given without --perturb, or a value out of its range."""
    given = bounds(args)
    if args.perturb is None:
        if given:
            option = next(o for o, _, name in BOUNDS if name in given)
            raise UserError(f"{option} needs --perturb SEED (the seed it perturbs from)")
        return {}
    return {"perturb_seed": _checked("--perturb", "perturb_seed", args.perturb), **given}


def argv(seed: int, fields: dict[str, Any]) -> list[str]:
    """The options that give ``seed`` with the bounds ``fields`` (hardware field names),
    the defaults left out: what a ``kbdebug run`` reproducing the run needs."""
    out = ["--perturb", str(seed)]
    for option, _, name in BOUNDS:
        value = fields.get(name, getattr(DEFAULTS, name))
        if value != getattr(DEFAULTS, name):
            out += [option, str(value)]
    return out


def _checked(option: str, name: str, value: Any) -> Any:
    try:
        DEFAULTS.replace(**{name: value})
    except ConfigError as e:
        raise UserError(f"{option} {value}: {e} (kbdebug hw lists the ranges)") from None
    return value
