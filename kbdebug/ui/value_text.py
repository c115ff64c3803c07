"""What ``p`` prints for a future: its tensor's place, its digest and, if kept, its first values.

Plain text lines, Textual-free (tested without a terminal); every string from the
trace is escaped for the terminal here.
"""

from __future__ import annotations

import math

import numpy as np

from kbdebug.replay.values import Values
from kbdebug.replay.values_file import ValuesFileError
from kbdebug.safe_text import escape

#: Rows and columns of a kept tensor shown, from its start (numpy-style, "..." after).
SHOWN_ROWS = 8
SHOWN_COLUMNS = 8


def number(value: float) -> str:
    """A digest's float, short: ``-2.885``, ``1.5e+04``, ``nan``."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def digest_line(values: Values, future: int) -> str:
    """``min -2.885  max 2.885  mean 0.02324  NaN 0  Inf 0  crc32 0x1610be37``, or why none."""
    digest = values.digest(future)
    if digest is None:
        if not values.has_digests:
            return "no digest: this trace was recorded before format 1.5 (kbdebug run records them)"
        return "no digest: the kernel never waited for this tensor (nor stored or sent it)"
    return (
        f"min {number(digest.min)}  max {number(digest.max)}  mean {number(digest.mean)}  "
        f"NaN {digest.nan:,}  Inf {digest.inf:,}  crc32 {digest.crc32:#010x}"
    )


def future_title(values: Values, future: int) -> str:
    """``future 12: load_async K[128:192, :] (64, 128) f16 on PE 0 at attention.py:85``."""
    index = values.replay.index
    f, k = index.futures, index.commands
    cmd = int(f.cmd[future])
    if cmd < 0:
        return f"future {future}"
    op = escape(index.string(int(k.op[cmd])), 40)
    where = escape(values.where_future(future), 120)
    shape = tuple(index.shapes[int(k.shape[cmd])])
    dtype = escape(index.string(int(k.dtype[cmd])), 16)
    loc = index.loc(int(k.loc[cmd]))
    at = f" at {escape(loc.file.rsplit('/', 1)[-1], 64)}:{loc.line}" if loc is not None else ""
    place = f" {where}" if where else ""
    return f"future {future}: {op}{place} {shape} {dtype} on PE {int(k.pe[cmd])}{at}"


def kept_lines(values: Values, future: int, width: int = 120) -> list[str]:
    """The kept tensor's first rows and columns, numpy-style (lines of at most ``width``
    where numpy can break them), or one line saying why not."""
    try:
        array = values.array(future)
    except ValuesFileError as e:
        return [escape(str(e), 300)]
    if array is None:
        kept = values.kept
        if kept is None:
            return ["values not kept: kbdebug run --values keeps them beside the trace"]
        note = f" ({escape(kept.note, 300)})" if kept.note else ""
        return [f"values of this tensor not kept{note}"]
    shown = array
    cut = []
    if array.ndim >= 1 and array.shape[0] > SHOWN_ROWS:
        shown, cut = shown[:SHOWN_ROWS], [f"rows 0..{SHOWN_ROWS - 1} of {array.shape[0]}"]
    if array.ndim >= 2 and array.shape[-1] > SHOWN_COLUMNS:
        shown = shown[..., :SHOWN_COLUMNS]
        cut.append(f"columns 0..{SHOWN_COLUMNS - 1} of {array.shape[-1]}")
    text = np.array2string(
        shown, precision=4, suppress_small=True, max_line_width=max(width, 40), threshold=2000
    )
    lines = [f"values ({', '.join(cut)}):" if cut else "values:"]
    return lines + text.splitlines()


def value_lines(values: Values, future: int, width: int = 120) -> list[str]:
    """Everything ``p`` prints for ``future``, the values in lines of ``width`` at most."""
    return [
        future_title(values, future),
        digest_line(values, future),
        *kept_lines(values, future, width),
    ]
