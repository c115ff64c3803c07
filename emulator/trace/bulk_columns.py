"""Column work of the bulk scan (emulator/trace/bulk.py): where a block's records start,
its tokens' values, and the shapes of its ISSUE records, each with numpy over the block.

Split from bulk.py, which cuts the bytes into tokens (find_records) and checks and
gathers the records (scan_records) with these.
"""

from __future__ import annotations

import numpy as np

from emulator.trace.schema import FIELDS, Kind

# Token classes (bulk.py gives each first byte one).
INT, BOOL, ARRAY, OTHER = 0, 1, 2, 3
# Where an ISSUE's shape and bool sit among its record's items [kind, dt, pe, *fields].
SHAPE_AT = 3 + [name for name, _ in FIELDS[Kind.ISSUE]].index("shape")
BOOL_AT = 3 + [tag for _, tag in FIELDS[Kind.ISSUE]].index("bool")
# Shapes of a block told apart one by one before sorting the rest (see issue_shapes).
_FEW_SHAPES = 16


def record_starts(items: np.ndarray, headers: np.ndarray) -> tuple[np.ndarray, int]:
    """The first token of each top-level object of a run of tokens, whose items
    (of an array header, else 0) are ``items``, ``headers`` the tokens (in order) where
    they may not be 0; and the items left owed after the last token less the objects
    begun (-objects if the last is whole).

    An object starts where the running count of items still owed reaches a new low.
    That count goes down by one at every token but a header, which adds its items
    less one: the lows are found per header and the run of other tokens after it (a
    few per record, where there are tokens), not per token. (A header of no items
    is one more token of the run before it, taken as a run of its own alike.)
    """
    n = len(items)
    if not len(headers):
        return np.arange(n, dtype=np.int64), -n
    owed = items[headers].astype(np.int64)
    # The count before each header (``at``), and before the token after its run of
    # leaves (``after``: the next header's, or the end's).
    at = np.cumsum(owed)
    left = int(at[-1]) - n
    at -= owed
    at -= headers
    after = np.empty_like(at)
    after[:-1] = at[1:]
    after[-1] = left
    # The lowest count before each header: the tokens before the first header are
    # all leaves (0, -1, ...); then each header's run reaches min(at, after + 1).
    run_low = np.minimum(at, after + 1)
    low_before = np.empty(len(headers), dtype=np.int64)
    low_before[0] = 1 - headers[0] if headers[0] else 1
    np.minimum.accumulate(run_low[:-1], out=low_before[1:])
    np.minimum(low_before[1:], low_before[0], out=low_before[1:])
    is_start = at < low_before
    # The leaves at the end of a run that go below the low (each one a whole object,
    # an int): the last ``min(low, at) - 1 - after`` of the run.
    tail = np.minimum(low_before, at)
    tail -= after + 1
    leading = np.arange(headers[0], dtype=np.int64)
    if not (tail > 0).any():
        return np.concatenate((leading, headers[is_start])), left
    run_end = np.append(headers[1:], n)
    tail = np.maximum(tail, 0)
    firsts = np.repeat(run_end - tail - np.cumsum(tail) + tail, tail)
    leaves = firsts + np.arange(len(firsts))
    starts = np.concatenate((headers[is_start], leaves))
    starts.sort()
    return np.concatenate((leading, starts)), left


_LITTLE_ENDIAN = np.little_endian


def _bytes8(data: np.ndarray) -> np.ndarray:
    """``data`` as overlapping 8-byte items, the i-th starting at byte i (a view: a
    gather copies each item whole, faster than one of big-endian uints)."""
    return np.ndarray((len(data) - 7,), dtype="V8", buffer=data, strides=(1,))


# Per wide int marker (0xCC..0xD3: uint 8..64, then int 8..64): the shift that keeps
# its first 1, 2, 4 or 8 bytes of the 8 read (see token_values).
_WIDE_SHIFT = np.array([56, 48, 32, 0] * 2, dtype=np.uint64)
_FIRST_SIGNED = 4  # markers from 0xCC + 4 on are signed


def token_values(
    data: np.ndarray, tokens: np.ndarray, first: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """Each int token's value, and a mask of the uint64s past the int64 range (None if
    there is no uint64). Other tokens get their first byte as an int8 (false -62, true
    -61: see bulk._BOOL_BIAS)."""
    # A one-byte int is its byte as an int8 (0..127, or -32..-1): a cast, not a lookup.
    values = first.view(np.int8).astype(np.int64)
    marker = np.subtract(first, 0xCC, dtype=np.uint8)
    wide = np.flatnonzero(marker < 8)
    if not len(wide):
        return values, None
    marker = marker[wide]
    # All at once, whatever their size: the 8 bytes after each marker as a big-endian
    # uint64 (data is padded by 8), shifted right to keep its first ``size`` bytes,
    # logically for a uint, arithmetically (extending the sign) for an int.
    at = tokens[wide]
    at += 1
    # Indexed, not take(): take would first copy the overlapping view whole (8 bytes a byte).
    raw = _bytes8(data)[at].view(np.uint64)
    if _LITTLE_ENDIAN:
        raw.byteswap(inplace=True)
    shift = _WIDE_SHIFT.take(marker)
    signed = marker >= _FIRST_SIGNED
    unsigned = raw >> shift
    if signed.any():
        values[wide] = np.where(
            signed, raw.view(np.int64) >> shift.view(np.int64), unsigned.view(np.int64)
        )
    else:
        values[wide] = unsigned.view(np.int64)
    if not (marker == 3).any():  # a uint64 (0xCF)
        return values, None
    big = np.zeros(len(tokens), dtype=bool)
    big[wide] = ~signed & (unsigned > np.uint64(2**63 - 1))
    return values, big


def windows(values: np.ndarray, width: int) -> np.ndarray:
    """``values`` as overlapping rows of ``width``, the i-th starting at item i (a view)."""
    step = values.strides[0]
    return np.ndarray(
        (len(values) - width + 1, width), dtype=values.dtype, buffer=values, strides=(step, step)
    )


def issue_shapes(
    starts: np.ndarray,
    record_tokens: np.ndarray,
    widths: np.ndarray,
    items: np.ndarray,
    cls: np.ndarray,
    values: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, ...]]]:
    """Of records that start with an ISSUE's items (``widths`` items each, a shape
    counting as one): the length of each one's shape, its shape id, which are fine,
    and the shapes the ids index (numbered in order of first use, as the
    record-by-record path numbers them)."""
    m = len(starts)
    shape_token = starts + 1 + SHAPE_AT
    dims = items[shape_token].astype(np.int64)
    fine = (cls[shape_token] == ARRAY) & (record_tokens == widths + 1 + dims)
    dims[~fine] = 0
    # Its three tokens that are not ints (see bulk.scan_records) are the headers and the bool.
    fine &= cls[starts + 1 + BOOL_AT + dims] == BOOL
    shape_ids = np.zeros(m, dtype=np.int64)
    shapes: list[tuple[int, ...]] = []
    first_use: list[int] = []
    for k in np.unique(dims[fine]).tolist():
        group = np.flatnonzero(fine & (dims == k))
        dim_values = values[shape_token[group][:, None] + 1 + np.arange(k)]
        if (dim_values < 0).any():
            good = ~(dim_values < 0).any(axis=1)
            fine[group[~good]] = False
            group, dim_values = group[good], dim_values[good]
        # A kernel uses a few shapes: take them one at a time (np.unique over rows
        # sorts them all), the first row left being the next shape; compared a column
        # at a time (a reduction over rows of a few items costs more than the compares).
        columns = [dim_values[:, c] for c in range(k)] if k <= _FEW_SHAPES else None
        left = np.arange(len(group))
        while len(left) and len(shapes) < _FEW_SHAPES:
            shape = dim_values[left[0]]
            if columns is None:
                same = (dim_values[left] == shape).all(axis=1)
            else:
                same = np.ones(len(left), dtype=bool)
                everyone = len(left) == len(group)
                for column, dim in zip(columns, shape.tolist(), strict=True):
                    same &= (column if everyone else column[left]) == dim
            shape_ids[group[left[same]]] = len(shapes)
            shapes.append(tuple(shape.tolist()))
            first_use.append(int(group[left[0]]))
            left = left[~same]
        if len(left):
            unique, at_first, inverse = np.unique(
                dim_values[left], axis=0, return_index=True, return_inverse=True
            )
            shape_ids[group[left]] = len(shapes) + inverse.reshape(-1)
            shapes.extend(tuple(row) for row in unique.tolist())
            first_use.extend(group[left[at_first]].tolist())
    order = np.argsort(np.array(first_use, dtype=np.int64), kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    if len(order):
        shape_ids[fine] = rank[shape_ids[fine]]
    return dims, shape_ids, fine, [shapes[i] for i in order.tolist()]
