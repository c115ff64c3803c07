"""scan_block: the event records of a block of trace bytes, parsed and type-checked with numpy.

The reader's fast path. Instead of unpacking each record into Python objects, a
block of msgpack bytes is cut into tokens all at once (every byte is a candidate
token start; those inside a multi-byte token are struck out, repeating until no
start changes), the tokens into top-level records (a running count of the items
still owed), and the records of each event kind into rows of an int64 array.
Anything out of the ordinary (a map, a float, a nil, an int encoded wider than
needed for its kind code, an unknown kind, a field of the wrong type) ends the
scan there: the reader reads on from that record one object at a time, and its
exact path names what is wrong, with the byte offset and event index. Ranges
(PE, channel, ids...) are checked by the reader on the rows, as for any batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.trace import wire
from emulator.trace.schema import FIELDS, Kind

# Token classes.
_INT, _BOOL, _ARRAY, _MAP, _OTHER = 0, 1, 2, 3, 4
# Definition record codes the reader applies one by one (they carry strings).
_DEFINITIONS = (wire.DEFINE_STRING, wire.DEFINE_LOC, wire.EMBED_SOURCE, wire.DEFINE_LOC_CALLER)


def _tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per first byte: the token's fixed length, the width of a length that follows it
    (0 if none), its class, and the item count of a fixarray or fixmap."""
    length = np.ones(256, dtype=np.int64)
    length[0xA0:0xC0] += np.arange(32)  # fixstr
    for byte, size in {
        0xC4: 2, 0xC5: 3, 0xC6: 5,  # bin 8/16/32: + length
        0xC7: 3, 0xC8: 4, 0xC9: 6,  # ext 8/16/32: + length
        0xCA: 5, 0xCB: 9,  # float 32/64
        0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9,  # uint 8..64
        0xD0: 2, 0xD1: 3, 0xD2: 5, 0xD3: 9,  # int 8..64
        0xD4: 3, 0xD5: 4, 0xD6: 6, 0xD7: 10, 0xD8: 18,  # fixext
        0xD9: 2, 0xDA: 3, 0xDB: 5,  # str 8/16/32: + length
        0xDC: 3, 0xDD: 5, 0xDE: 3, 0xDF: 5,  # array/map 16/32 headers
    }.items():  # fmt: skip
        length[byte] = size
    var = np.zeros(256, dtype=np.int64)
    for byte, size in {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xC7: 1, 0xC8: 2, 0xC9: 4}.items():
        var[byte] = size
    var[0xD9], var[0xDA], var[0xDB] = 1, 2, 4
    cls = np.full(256, _OTHER, dtype=np.int8)
    cls[0x00:0x80] = cls[0xE0:0x100] = cls[0xCC:0xD4] = _INT
    cls[0xC2:0xC4] = _BOOL
    cls[0x90:0xA0] = cls[0xDC:0xDE] = _ARRAY
    cls[0x80:0x90] = cls[0xDE:0xE0] = _MAP
    items = np.zeros(256, dtype=np.int64)
    items[0x90:0xA0] = np.arange(16)
    items[0x80:0x90] = 2 * np.arange(16)
    return length, var, cls, items


_LENGTH, _VAR, _CLASS, _ITEMS = _tables()
# The value of a one-byte int or bool token (its first byte) as an int64.
_FIXED_VALUE = np.arange(256, dtype=np.int64)
_FIXED_VALUE[0xE0:] -= 256
_FIXED_VALUE[0xC2:0xC4] = (0, 1)
_MULTI = (_LENGTH > 1) | (_VAR > 0)
# Per event kind: the record's item count, and per item whether it is a bool.
_WIDTH = {int(kind): 3 + len(fields) for kind, fields in FIELDS.items()}
_BOOLS = {
    int(kind): np.array([False] * 3 + [tag == "bool" for _, tag in fields])
    for kind, fields in FIELDS.items()
}
_SHAPE_AT = 3 + [name for name, _ in FIELDS[Kind.ISSUE]].index("shape")
_MAX_KIND = 128


@dataclass
class BlockScan:
    """What scan_block found: records up to ``stop`` (bytes into the block).

    ``kinds``, ``tables`` and ``shapes`` are the events in EventTables form (times
    still deltas); ``definitions`` the ``(events before it, start, end)`` of each
    definition record among them, for the reader to apply; ``unusual`` says the scan
    stopped at a record it does not handle (else at the first record not wholly in
    the block).
    """

    stop: int
    unusual: bool
    kinds: np.ndarray
    tables: dict[int, tuple[np.ndarray, np.ndarray]]
    shapes: list[tuple[int, ...]]
    definitions: list[tuple[int, int, int]]


def _read_be(data: np.ndarray, at: np.ndarray, size: int) -> np.ndarray:
    """Big-endian unsigned ints of ``size`` bytes at ``at`` (``data`` padded by 8)."""
    out = np.zeros(len(at), dtype=np.uint64)
    for j in range(size):
        out = (out << np.uint64(8)) | data[at + j].astype(np.uint64)
    return out


def _token_starts(data: np.ndarray, n: int) -> np.ndarray:
    """The offsets of the tokens of ``data[:n]`` read from 0."""
    first = data[:n]
    multi = np.flatnonzero(_MULTI[first])
    span = _LENGTH[first[multi]]
    var = _VAR[first[multi]]
    for size in (1, 2, 4):
        at = np.flatnonzero(var == size)
        if len(at):
            span[at] += _read_be(data, multi[at] + 1, size).astype(np.int64)
    ends = multi + span
    # Past the last candidate, the path from 0 runs over one-byte tokens to the next
    # candidate: so the candidates that are real tokens are the path of candidate 0
    # under "the first candidate at or after my end", found by doubling the jumps.
    count = len(multi)
    jump = np.empty(count + 1, dtype=np.int32)
    jump[:count] = np.searchsorted(multi, ends)
    jump[count] = count
    jumps = [jump]
    while (1 << len(jumps)) <= count:
        jumps.append(jumps[-1][jumps[-1]])
    live = np.zeros(count + 1, dtype=bool)
    live[0] = True
    for jump in reversed(jumps):
        live[jump[np.flatnonzero(live)]] = True
    live = live[:count]
    # Real tokens do not overlap: +1 after each start, -1 at its end, and the running
    # sum is 1 exactly inside one.
    inside = np.zeros(n + 1, dtype=np.int8)
    starts, stops = multi[live], np.minimum(ends[live], n)
    inside[starts + 1] = 1
    inside[stops] -= 1
    return np.flatnonzero(np.cumsum(inside[:n], dtype=np.int8) == 0)


def _values(
    data: np.ndarray, tokens: np.ndarray, first: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each int token's value (0 for others), and a mask of uint64s past the int64 range."""
    values = _FIXED_VALUE[first]
    big = np.zeros(len(tokens), dtype=bool)
    wide = np.flatnonzero((first >= 0xCC) & (first <= 0xD3))
    wide_first = first[wide]
    for marker, size, signed in (
        (0xCC, 1, False), (0xCD, 2, False), (0xCE, 4, False), (0xCF, 8, False),
        (0xD0, 1, True), (0xD1, 2, True), (0xD2, 4, True), (0xD3, 8, True),
    ):  # fmt: skip
        at = wide[wide_first == marker]
        if not len(at):
            continue
        raw = _read_be(data, tokens[at] + 1, size)
        if signed:
            shift = np.uint64(64 - 8 * size)
            values[at] = ((raw << shift).view(np.int64)) >> np.int64(64 - 8 * size)
        else:
            if size == 8:
                big[at] = raw > np.uint64(2**63 - 1)
            values[at] = raw.view(np.int64)
    return values, big


def scan_block(block: bytes | bytearray | memoryview) -> BlockScan:
    """Scan ``block``, which starts at a record boundary (see the module docstring)."""
    n = len(block)
    data = np.zeros(n + 8, dtype=np.uint8)
    data[:n] = np.frombuffer(block, dtype=np.uint8)
    empty = BlockScan(0, False, np.empty(0, np.int8), {}, [], [])
    if not n:
        return empty
    tokens = _token_starts(data, n)
    first = data[tokens]
    cls = _CLASS[first]
    items = _ITEMS[first]
    wide = np.flatnonzero(first >= 0xDC)
    wide = wide[first[wide] <= 0xDF]
    if len(wide):
        sizes = np.where((first[wide] == 0xDC) | (first[wide] == 0xDE), 2, 4)
        for size in (2, 4):
            at = wide[sizes == size]
            count = _read_be(data, tokens[at] + 1, size).astype(np.int64)
            items[at] = np.where(first[at] >= 0xDE, 2 * count, count)
    # A top-level object starts where the items still owed reach a new low.
    owed = items - 1
    before = np.cumsum(owed) - owed
    low = np.minimum.accumulate(before)
    starts = np.flatnonzero(before < np.concatenate(([1], low[:-1])))
    # The last object is whole if its items are all there and its last token ends in
    # the block.
    last_end = int(tokens[-1] + _token_length(data, tokens[-1:])[0])
    count = len(starts)
    if int(before[-1] + owed[-1]) != -count or last_end > n:
        count -= 1
    if count <= 0:
        return empty
    record_tokens = np.diff(np.append(starts, len(tokens)))[:count]
    offsets = np.append(tokens[starts], last_end)[: count + 1]
    starts = starts[:count]
    values, big = _values(data, tokens, first)
    # A token's class, or _OTHER for an int past the int64 range.
    cls = np.where(big, _OTHER, cls).astype(np.int8)
    has_kind = (first[starts] >= 0x90) & (first[starts] <= 0x9F) & (record_tokens >= 2)
    kind_token = np.minimum(starts + 1, len(tokens) - 1)
    kinds = np.where(has_kind & (first[kind_token] < 0x80), values[kind_token], -1)
    n_items = items[starts]
    known = np.zeros(_MAX_KIND + 1, dtype=bool)
    known[list(_WIDTH)] = True
    is_event = (kinds > 0) & known[np.clip(kinds, 0, _MAX_KIND)]
    is_definition = np.isin(kinds, _DEFINITIONS) & (cls[kind_token] == _INT)
    ok = is_definition.copy()
    tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    rows_of: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    shapes: list[tuple[int, ...]] = []
    for kind in np.flatnonzero(np.bincount(kinds[is_event], minlength=_MAX_KIND)).tolist():
        width = _WIDTH[kind]
        records = np.flatnonzero(kinds == kind)
        good = n_items[records] == width
        if kind == Kind.ISSUE:
            good &= record_tokens[records] >= width + 1
            records_ok = records[good]
            rows, shape_ids, fine, shapes = _issue_rows(
                starts[records_ok], record_tokens[records_ok], first, cls, values, items
            )
            good[np.flatnonzero(good)[~fine]] = False
            rows_of[kind] = (records, rows[fine], shape_ids[fine], good)
            ok[records[good]] = True
            continue
        good &= record_tokens[records] == width + 1
        at = starts[records[good]][:, None] + 1 + np.arange(width)
        want = np.where(_BOOLS[kind], _BOOL, _INT)
        fine = (cls[at] == want).all(axis=1)
        good[np.flatnonzero(good)[~fine]] = False
        rows_of[kind] = (records, values[at[fine]], None, good)
        ok[records[good]] = True
    bad = np.flatnonzero(~ok)
    used = int(bad[0]) if len(bad) else count
    unusual = used < count
    events = is_event[:used] & ok[:used]
    event_at = np.cumsum(events) - 1  # position among the events of each record
    for kind, (records, rows, shape_ids, good) in rows_of.items():
        kept = records[good]
        inside = kept < used
        if not inside.any():
            continue
        rows = rows[inside]
        if shape_ids is not None:
            rows[:, _SHAPE_AT] = shape_ids[inside]
        tables[kind] = (event_at[kept[inside]], rows)
    definitions = [
        (int(event_at[r]) + 1, int(offsets[r]), int(offsets[r + 1]))
        for r in np.flatnonzero(is_definition[:used]).tolist()
    ]
    return BlockScan(
        stop=int(offsets[used]),
        unusual=unusual,
        kinds=kinds[:used][events].astype(np.int8),
        tables=tables,
        shapes=shapes,
        definitions=definitions,
    )


def _token_length(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    first = data[at]
    length = _LENGTH[first].copy()
    for size in (1, 2, 4):
        where = np.flatnonzero(_VAR[first] == size)
        if len(where):
            length[where] += _read_be(data, at[where] + 1, size).astype(np.int64)
    return length


def _issue_rows(
    starts: np.ndarray,
    record_tokens: np.ndarray,
    first: np.ndarray,
    cls: np.ndarray,
    values: np.ndarray,
    items: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, ...]]]:
    """ISSUE records' rows, shape ids, which are fine, and the shapes the ids index."""
    width = _WIDTH[Kind.ISSUE]
    m = len(starts)
    shape_token = starts + 1 + _SHAPE_AT
    dims = np.where(first[shape_token] <= 0x9F, items[shape_token], -1)
    fine = (cls[shape_token] == _ARRAY) & (first[shape_token] <= 0x9F)
    fine &= record_tokens == width + 1 + dims
    dims = np.where(fine, dims, 0)
    # Items before the shape, then after its dims.
    column = np.arange(width)
    at = starts[:, None] + 1 + column + np.where(column > _SHAPE_AT, dims[:, None], 0)
    want = np.where(_BOOLS[Kind.ISSUE], _BOOL, _INT)
    want[_SHAPE_AT] = _ARRAY
    fine &= (cls[at] == want).all(axis=1)
    rows = values[at]
    shape_ids = np.zeros(m, dtype=np.int64)
    shapes: list[tuple[int, ...]] = []
    first_use: list[int] = []
    for k in np.unique(dims[fine]).tolist():
        group = np.flatnonzero(fine & (dims == k))
        dim_at = shape_token[group][:, None] + 1 + np.arange(k)
        dim_values = values[dim_at]
        good = (cls[dim_at] == _INT).all(axis=1) & (dim_values >= 0).all(axis=1)
        fine[group[~good]] = False
        group, dim_values = group[good], dim_values[good].reshape(len(group[good]), k)
        # A kernel uses a few shapes: take them one at a time (np.unique over rows
        # sorts them all), the first row left being the next shape.
        left = np.arange(len(group))
        while len(left):
            shape = dim_values[left[0]]
            same = (dim_values[left] == shape).all(axis=1)
            shape_ids[group[left[same]]] = len(shapes)
            shapes.append(tuple(shape.tolist()))
            first_use.append(int(group[left[0]]))
            left = left[~same]
    # Number the shapes in order of first use, as the record-by-record path does.
    order = np.argsort(np.array(first_use, dtype=np.int64), kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    if len(order):
        shape_ids = rank[shape_ids]
    return rows, shape_ids, fine, [shapes[i] for i in order.tolist()]
