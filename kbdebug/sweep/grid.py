"""The grid of a sweep: parsing ``--grid KEY=V1,V2`` and the points it spans, in a fixed order."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kbdebug.errors import UserError
from kbdebug.launch.settings import format_value

#: A grid this large is refused before anything runs (a typo like depth=1..100000).
MAX_POINTS = 100_000
#: Characters kept as they are in a trace file name; the others become "_".
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9.+=_-]")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")


@dataclass(frozen=True)
class Axis:
    """One swept key and its values, in the order given."""

    key: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Point:
    """One point of the grid: its position in grid order and its value on every axis."""

    index: int
    #: (key, value) for each axis, in the order the axes were given.
    params: tuple[tuple[str, Any], ...]

    def value(self, key: str) -> Any:
        return dict(self.params)[key]

    def label(self) -> str:
        """``depth=2 hbm_latency=300``: how the point is named on a terminal."""
        return " ".join(f"{k}={format_value(v)}" for k, v in self.params)


def parse_axis(text: str, parse_value: Callable[[str], Any]) -> Axis:
    """``KEY=V1,V2,...`` (or ``KEY=A..B``, integers A to B inclusive) as an Axis.

    ``parse_value`` turns one value's text into a Python value (the rules of
    ``--set``: kbdebug.launch.settings.parse_value). Raises UserError for a
    missing key, an empty or repeated value, or a range that is empty or too long.
    """
    key, sep, rest = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"--grid {text!r}: expected KEY=V1,V2,... (or KEY=A..B)")
    span = _RANGE.match(rest.strip())
    if span:
        low, high = int(span.group(1)), int(span.group(2))
        if high < low:
            raise UserError(f"--grid {text!r}: empty range ({low} > {high})")
        if high - low >= MAX_POINTS:
            raise UserError(f"--grid {text!r}: more than {MAX_POINTS:,} values")
        return Axis(key, tuple(range(low, high + 1)))
    items = [item.strip() for item in rest.split(",")]
    if any(not item for item in items):
        raise UserError(f"--grid {text!r}: empty value (expected KEY=V1,V2,...)")
    values = tuple(parse_value(item) for item in items)
    seen: list[Any] = []
    for item, value in zip(items, values, strict=True):
        if any(value == s and type(value) is type(s) for s in seen):
            raise UserError(f"--grid {key}: value {item} given twice")
        seen.append(value)
    return Axis(key, values)


def points(axes: Iterable[Axis]) -> list[Point]:
    """Every combination of the axes' values; the first axis varies slowest.

    Raises UserError for a key given twice or a grid past MAX_POINTS.
    """
    axes = list(axes)
    keys = [a.key for a in axes]
    for key in keys:
        if keys.count(key) > 1:
            raise UserError(f"--grid {key} given twice: put all its values in one --grid")
    total = 1
    for a in axes:
        total *= len(a.values)
    if total > MAX_POINTS:
        raise UserError(f"the grid has {total:,} points; at most {MAX_POINTS:,} are swept at once")
    combos = itertools.product(*(a.values for a in axes))
    return [Point(i, tuple(zip(keys, combo, strict=True))) for i, combo in enumerate(combos)]


def trace_name(scenario: str, point: Point) -> str:
    """``decode_prefetch.depth=2.hbm_latency=300.kbt``: a file name that says the point."""
    parts = [scenario] + [f"{k}={format_value(v)}" for k, v in point.params]
    return _NAME_UNSAFE.sub("_", ".".join(parts)) + ".kbt"
