"""What makes an event record valid: per kind, the type and range of each item, as
generated checks (one record at a time) and as bounds (a batch of rows at once)."""

from __future__ import annotations

import functools
import reprlib
from collections.abc import Callable
from typing import Any

import numpy as np

from emulator.trace import wire
from emulator.trace.schema import COMPOUNDS, FIELDS, Kind

INT64_MAX = 2**63 - 1
MAX_CYCLES = wire.MAX_CYCLES


# The range of each int field, by name (see _field_rules); the rest are "int64".
_INT_RANGES = {
    "channel": "channel",
    "dst_pe": "pe",
    "src_pe": "pe",
    "cmd": "id",
    "future": "id",
    "addr": "addr",
    "nbytes": "count",
    "in_use": "count",
    "buffer": "count",
    "stalled": "cycles",
    "held": "cycles",
    # An HBM stack serves one PE at least: its index is below the mesh's PEs.
    "stack": "pe",
    # The command whose result a store or send moves, -1 for none (format 1.6).
    "made_by": "id_or_none",
}
# Kinds whose future is -1 when there is none: commands that return nothing waitable,
# a PE deadlocked on its outstanding commands rather than on a future.
_FUTURE_OR_NONE = (Kind.ISSUE, Kind.COMPLETE, Kind.DEADLOCK, Kind.HOST_READ)


def _item_rules(kind: Kind) -> list[tuple[str, type, str | None]]:
    """How each field of ``kind`` (after kind, time and pe) is checked: (name, wire type,
    range)."""
    items: list[tuple[str, type, str | None]] = []
    for name, tag in FIELDS[kind]:
        if tag == "int":
            range_ = _INT_RANGES.get(name, "int64")
            if name == "future" and kind in _FUTURE_OR_NONE:
                range_ = "id_or_none"
            items.append((name, int, range_))
        elif tag == "bool":
            items.append((name, bool, None))
        elif tag == "str":
            items.append((name, int, "string"))
        elif tag == "loc":
            items.append((name, int, "loc"))
        else:
            items.append((name, list, "shape"))
    return items


def _field_rules() -> dict[int, tuple[tuple[str, type, str | None], ...]]:
    """Per kind, how each item after the kind is checked: (name, wire type, range).

    Ranges: "time" (a delta, >= 0), "int64" (at most 2**63 - 1: replay keeps ints
    in int64 columns), "count" (0 to 2**63 - 1), "addr" (-1 for none, or a count),
    "cycles" (0 to MAX_CYCLES), "pe" (a PE of the mesh), "channel" (an entry of the
    header's channel table), "string" / "loc" (an id defined by an earlier record; loc
    -1 is None), "shape" (a list of non-negative int64s), "id" / "id_or_none" (a
    command or future id, -1 allowed for the second: ids count up from 0 with the
    commands issued, each of which has an ISSUE event, so an id is below the number
    of events the file can hold; replay sizes its tables by the largest id).
    """
    common = [("time", int, "time"), ("pe", int, "pe")]
    return {int(kind): tuple(common + _item_rules(kind)) for kind in FIELDS}


def _compound_rules() -> dict[int, tuple[tuple[str, type, str | None], ...]]:
    """Per compound record code (format 1.2), its items after the code as RULES gives
    them: time, pe, then each component's fields, named "KIND field"."""
    common = [("time", int, "time"), ("pe", int, "pe")]
    return {
        code: tuple(
            common
            + [
                (f"{kind.name} {name}", wanted, range_)
                for kind in kinds
                for name, wanted, range_ in _item_rules(kind)
            ]
        )
        for code, kinds in COMPOUNDS.items()
    }


def compound_name(code: int) -> str:
    """How an error names compound record ``code``: its code and its components."""
    return f"compound record {code} ({'+'.join(kind.name for kind in COMPOUNDS[code])})"


RULES = _field_rules()
# Compound record codes (format 1.2) and how their items are checked (see _compound_rules).
COMPOUND_RULES = _compound_rules()

_RANGE_TESTS = {
    "time": "0 <= {v}",
    "int64": "-INT64_MAX - 1 <= {v} <= INT64_MAX",
    "count": "0 <= {v} <= INT64_MAX",
    "addr": "-1 <= {v} <= INT64_MAX",
    "cycles": "0 <= {v} <= MAX_CYCLES",
    "id": "0 <= {v} <= max_id",
    "id_or_none": "-1 <= {v} <= max_id",
    "pe": "0 <= {v} < n_pes",
    "channel": "0 <= {v} < n_channels",
    "string": "0 <= {v} < n_strings",
    "loc": "-1 <= {v} < n_locs",
    "shape": "is_shape({v})",
}


def is_shape(value: list[Any]) -> bool:
    for dim in value:
        if type(dim) is not int or not 0 <= dim <= INT64_MAX:
            return False
    return True


def _compile_checks(
    array: type = list, ranges: bool = True
) -> Callable[..., tuple[dict[int, Callable[[Any], bool]], Callable[[int, int], None]]]:
    """Compile, from RULES, ``make_checks(n_pes, n_channels, max_id)`` returning per kind a
    ``check(record) -> bool`` that is True for a valid event record, and
    ``defined(n_strings, n_locs)`` to call whenever a string or loc is defined.
    Per compound record code (COMPOUND_RULES), the check returns False or, for a valid
    record, the events it stands for: ``[kind, dt, pe, *fields]`` each, the first
    with the record's dt, the others with 0.

    Each check unpacks the record into ``v0, v1, ...`` (a ValueError if its length
    is wrong) and tests one generated boolean expression, e.g. ``type(v0) is int and
    type(v1) is int and 0 <= v1 and ... and 0 <= v3 < n_channels``: validating a
    million records this way takes a third of the time a loop over the rules would.
    The counts of ids defined are variables of the closure, not ``len()`` calls.

    ``array`` is the type msgpack arrays are unpacked as (list, or tuple for the
    fast path of read_trace_tables); with ``ranges`` False, the checks test types
    and shapes only, leaving the other ranges to out_of_range.
    """
    lines = [
        "def make_checks(n_pes, n_channels, max_id):",
        "    n_strings = n_locs = 0",
        "    def defined(strings, locs):",
        "        nonlocal n_strings, n_locs",
        "        n_strings, n_locs = strings, locs",
        "    checks = {}",
    ]
    for code, rules in (RULES | COMPOUND_RULES).items():
        names = [f"v{at}" for at in range(len(rules) + 1)]
        terms = ["type(v0) is int"]
        for name, (_, wanted, range_) in zip(names[1:], rules, strict=True):
            terms.append(f"type({name}) is {(array if wanted is list else wanted).__name__}")
            if range_ is not None and (ranges or range_ == "shape"):
                terms.append(_RANGE_TESTS[range_].format(v=name))
        lines.append(f"    def check_{code}(r):")
        lines.append(f"        {', '.join(names)}, = r")
        if code in RULES:
            lines.append(f"        return {' and '.join(terms)}")
        else:
            lines.append(f"        return {' and '.join(terms)} and {_expansion(code, names)}")
        lines.append(f"    checks[{code}] = check_{code}")
    lines.append("    return checks, defined")
    namespace = {"INT64_MAX": INT64_MAX, "MAX_CYCLES": MAX_CYCLES, "is_shape": is_shape}
    exec("\n".join(lines), namespace)
    return namespace["make_checks"]


def _expansion(code: int, names: list[str]) -> str:
    """The expression of the events compound record ``code`` unpacked as ``names``
    stands for (see _compile_checks)."""
    events = []
    at = 3
    for j, kind in enumerate(COMPOUNDS[code]):
        width = len(FIELDS[kind])
        items = [str(int(kind)), "v1" if j == 0 else "0", "v2", *names[at : at + width]]
        events.append(f"[{', '.join(items)}]")
        at += width
    return f"[{', '.join(events)}]"


make_checks = _compile_checks()


@functools.lru_cache(maxsize=8)
def range_rows(
    n_pes: int, n_channels: int, n_strings: int, n_locs: int, max_id: int
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per kind, the lowest and highest value of each item of its records as rows of
    EventTables (the time item being the delta, as in the file). Not to be modified:
    the same arrays serve every batch read with the same ranges."""
    bounds: dict[str | None, tuple[int, int]] = {
        "time": (0, MAX_CYCLES),
        "count": (0, INT64_MAX),
        "addr": (-1, INT64_MAX),
        "cycles": (0, MAX_CYCLES),
        "id": (0, max_id),
        "id_or_none": (-1, max_id),
        "pe": (0, n_pes - 1),
        "channel": (0, n_channels - 1),
        "string": (0, n_strings - 1),
        "loc": (-1, n_locs - 1),
    }
    whole = (-(2**63), INT64_MAX)  # the kind, bools, shape ids, int64s
    rows = {}
    for code, rules in RULES.items():
        low, high = zip(whole, *(bounds.get(range_, whole) for _, _, range_ in rules), strict=True)
        rows[code] = (np.array(low, dtype=np.int64), np.array(high, dtype=np.int64))
    return rows


def _columns_of(range_: str) -> dict[int, list[int]]:
    """Per kind, the items of its records checked against ``range_``."""
    return {
        code: [at for at, (_, _, r) in enumerate(rules, start=1) if r == range_]
        for code, rules in RULES.items()
    }


STRING_COLUMNS = _columns_of("string")
LOC_COLUMNS = _columns_of("loc")


def out_of_range(rows: np.ndarray, low: np.ndarray, high: np.ndarray) -> bool:
    return not ((rows >= low) & (rows <= high)).all()


def _brief_repr() -> reprlib.Repr:
    brief = reprlib.Repr()
    brief.maxlevel = 3
    brief.maxstring = brief.maxother = 40
    brief.maxlong = 24
    return brief


_BRIEF = _brief_repr()


def brief(value: Any) -> str:
    """A repr of ``value`` for an error message: bounded in length and nesting (a value
    nested a thousand deep must not exhaust the stack), control characters escaped."""
    text = _BRIEF.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe(value: Any) -> str:
    return f"{type(value).__name__} {brief(value)}"
