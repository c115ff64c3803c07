"""Values given on the command line (--set, --grid) and the hardware they make with --config.

Every mistake is worded once, here or in ``launcher``, whichever command made
it: ``OPTION KEY=VALUE: what is wrong``, where OPTION is the option that gave
the value (``--set``, ``--grid``).
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from emulator.config import HardwareConfig
from emulator.errors import ConfigError
from kbdebug.errors import UserError
from kbdebug.safe_text import escape

#: The hardware fields --set and --grid take: the dataclass fields only, never a constant
#: of the class (``__dataclass_fields__`` lists ClassVars too).
HARDWARE_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(HardwareConfig))
#: Characters of a value or key shown in a message at most (they come from the user).
SHOWN_CHARS = 40


def format_value(value: Any) -> str:
    """A value as the user would type it back (``True`` as ``true``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def shown(value: Any) -> str:
    """A value or key as a message shows it: typed back, escaped, cut to SHOWN_CHARS."""
    return escape(format_value(value), SHOWN_CHARS)


def brief(value: Any) -> str:
    """``repr(value)``, escaped and cut to SHOWN_CHARS (what a message says it got)."""
    return escape(repr(value), SHOWN_CHARS)


def parse_value(text: str) -> Any:
    """VALUE of ``KEY=VALUE``: a Python literal, true/false, or else the text itself."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def parse_setting(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of --set as (key, value); UserError if there is no KEY=."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UserError(f"--set {text!r}: expected KEY=VALUE (e.g. --set n_tiles=64)")
    return key, parse_value(value)


def read_config(path: str | None) -> HardwareConfig:
    """The hardware of the --config file ``path`` (the defaults without one)."""
    if path is None:
        return HardwareConfig()
    try:
        return HardwareConfig.from_toml(path)
    except ConfigError as e:
        raise UserError(f"{e}{_hint(e)}") from None


def with_hardware(
    config: HardwareConfig,
    values: Mapping[str, Any],
    option_of: Callable[[str], str] = lambda key: "--set",
) -> HardwareConfig:
    """``config`` with the hardware fields ``values``, each refused as its option gave it.

    Each value is tried alone first, so a bad one is named with its option
    (``--grid hbm_latency=-5: ...``); then all together, for the limits of a
    combination (the channels of a whole mesh).
    """
    for key, value in values.items():
        try:
            config.replace(**{key: value})
        except ConfigError as e:
            raise UserError(f"{option_of(key)} {key}={shown(value)}: {e}{_hint(e)}") from None
    try:
        return config.replace(**values)
    except ConfigError as e:
        given = " ".join(f"{option_of(k)} {k}={shown(v)}" for k, v in values.items())
        raise UserError(f"{given}: {e}{_hint(e)}") from None


def _hint(error: ConfigError) -> str:
    """Where to read what the hardware takes, for a mistake `kbdebug hw` answers."""
    text = str(error)
    if "unknown hardware field" in text:
        return " (kbdebug hw lists them)"
    if " must be <= " in text or " must be >= " in text:
        return " (kbdebug hw lists the ranges)"
    return ""
