"""A failed numpy check (an AssertionError from a Scenario's ``check``) in one line: what
failed, how many elements, the largest error and where; what `run` and sweep rows say."""

from __future__ import annotations

import re

import numpy as np

#: Lines of an AssertionError's own detail shown under its first line.
DETAIL_LINES = 8
# What numpy.testing says that the one line already sums up (counts, largest errors,
# the arrays themselves, the list of mismatches: "Mismatch at indices:" for a few,
# "First 5 mismatches are at indices:" for many in numpy 2.x).
_NUMPY_SUMMED = re.compile(
    r"^\s*(Mismatched elements|(First \d+ )?[Mm]ismatch(es)? (are )?at ind|"
    r"Max (absolute|relative) difference|x: |y: |ACTUAL: |DESIRED: |\[[\d, ]+\]: )"
)
_MAX_ABSOLUTE = re.compile(r"Max absolute difference(?: among violations)?: (\S+)")
_NUMPY_HEADERS = ("Not equal to tolerance", "Arrays are not equal", "Arrays are not almost")
_MISMATCHED = re.compile(r"Mismatched elements: (\d+) / (\d+)")


def check_failure(error: AssertionError) -> tuple[str, list[str]]:
    """(``WHAT: N of M elements differ, largest error E at [i, j]: got G, want W``, the
    lines that add something): numpy.testing's many lines said in one, as a wrong
    block's lines say it; another assertion's first line, and its next lines as detail."""
    lines = [line.rstrip() for line in str(error).split("\n") if line.strip()]
    if not any(line.startswith(_NUMPY_HEADERS) for line in lines):
        first = lines[0] if lines else "AssertionError"
        rest = lines[1 : 1 + DETAIL_LINES] + (["..."] if len(lines) > 1 + DETAIL_LINES else [])
        return first, rest
    header = next(line for line in lines if line.startswith(_NUMPY_HEADERS))
    said = [line for line in lines if line != header and not _NUMPY_SUMMED.match(line)]
    # Continuation lines of the arrays' printout carry on ACTUAL:/DESIRED:.
    # A header whose list was dropped (a line ending in ':') would dangle: it goes too.
    said = [line for line in said if not line.startswith(" ") and not line.endswith(":")]
    header = header[0].lower() + header[1:]
    what = "; ".join(said[:2]) + f" ({header})" if said else header
    parts = []
    counted = next((m for m in map(_MISMATCHED.search, lines) if m), None)
    if counted is not None:
        parts.append(f"{int(counted[1]):,} of {int(counted[2]):,} elements differ")
    largest = _largest_error(error) or _largest_said(lines)
    if largest:
        parts.append(largest)
    return what + (": " + ", ".join(parts) if parts else ""), []


def _largest_said(lines: list[str]) -> str:
    """``largest error E`` as numpy.testing's text says it, '' where it does not (its
    arrays gone from the traceback, the error made again from its text)."""
    said = next((m for m in map(_MAX_ABSOLUTE.search, lines) if m), None)
    return f"largest error {said[1].rstrip('.')}" if said else ""


def _largest_error(error: AssertionError) -> str:
    """``largest error E at [i, j]: got G, want W`` from the arrays numpy.testing compared,
    '' without them. They are the arguments of the assertion that called numpy's
    assert_array_compare (``actual``, ``desired``; ``x``, ``y`` in older numpy), found in
    the traceback: assert_array_compare's own ``x`` and ``y`` are flattened by then."""
    tb, caller, arrays = error.__traceback__, None, None
    while tb is not None:
        frame = tb.tb_frame
        numpy_code = str(frame.f_globals.get("__name__", "")).startswith("numpy")
        if numpy_code and frame.f_code.co_name == "assert_array_compare" and caller is not None:
            names = caller.f_locals
            pair = ("actual", "desired") if "actual" in names else ("x", "y")
            if all(name in names for name in pair):
                arrays = names[pair[0]], names[pair[1]]
        caller = frame
        tb = tb.tb_next
    if arrays is None:
        return ""
    try:
        got, want = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in arrays))
    except (TypeError, ValueError):
        return ""
    if not got.size:
        return ""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(got - want)
    same_nan = np.isnan(got) & np.isnan(want)
    diff = np.where(same_nan, 0.0, np.where(np.isnan(diff), np.inf, diff))
    at = np.unravel_index(int(np.argmax(diff)), diff.shape)
    index = "[" + ", ".join(str(int(i)) for i in at) + "]"
    return f"largest error {diff[at]:.4g} at {index}: got {got[at]:.4g}, want {want[at]:.4g}"
