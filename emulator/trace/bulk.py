"""scan_block: the event records of a block of trace bytes, parsed and type-checked with numpy.

The reader's fast path. Instead of unpacking each record into Python objects, a
block of msgpack bytes is cut into tokens all at once, the tokens into top-level
records (a running count of the items still owed), and the records of each event
kind into rows of an int64 array. A compound record (format 1.2) is split into
the events it stands for, each event's row gathered from the record's tokens,
so a batch holds the same events, at the same positions, as in a 1.1 file.

Only what event records are made of is parsed: array headers (fixarray, and
array16 for a compound of 16 items or more), ints and bools. A token start is a
byte not inside a multi-byte token; which of the bytes that look like the first
of one are real is settled by following "the next one at or after my end" from
the first, all at once (tokens before a position depend only on the bytes
before it). The scan ends at the first token of another type (a string, a
map, a float...): the reader unpacks that record on its own (a definition, the
footer) and scans on after it. A whole record that is not a valid event or a
definition (an unknown kind, a field of the wrong type, a kind code written
wider than needed) ends the scan as ``unusual``: the reader's exact path reads on
from there, naming what is wrong with its byte offset and event index. Ranges
(PE, channel, ids...) are checked by the reader on the rows, as for any batch.

scan_block is done in two parts, so that the reader can do the first of the next
block while the second of this one runs on another thread: find_records (the
tokens and where each record starts: where the block's whole records end) and
scan_records (the values, checked, and the rows of each kind). Their column work
(where records start, the tokens' values, ISSUE shapes) is in bulk_columns.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from emulator.trace import wire
from emulator.trace.bulk_columns import (
    ARRAY,
    BOOL,
    BOOL_AT,
    INT,
    OTHER,
    SHAPE_AT,
    issue_shapes,
    record_starts,
    token_values,
    windows,
)
from emulator.trace.schema import COMPOUNDS, FIELDS, Kind, event_codes

# The header of an array of 16 to 65535 items (a compound record of 16 items or more),
# its count in the next 2 bytes; a fixarray holds up to 15.
_ARRAY16 = 0xDC
# Rounds of "the real tokens are the ends of real tokens" before following the jumps
# by doubling instead (real traces settle in a handful; see _token_starts).
MAX_ROUNDS = 16
# Definition record codes the reader applies one by one.
_DEFINITIONS = (
    wire.DEFINE_STRING,
    wire.DEFINE_LOC,
    wire.EMBED_SOURCE,
    wire.DEFINE_LOC_CALLER,
    wire.DEFINE_DIGEST,
)


def _tables() -> tuple[np.ndarray, np.ndarray]:
    """Per first byte: the token's length and its class."""
    length = np.ones(256, dtype=np.int64)
    length[0xCC:0xD4] = (2, 3, 5, 9, 2, 3, 5, 9)  # uint 8..64, int 8..64
    length[_ARRAY16] = 3
    cls = np.full(256, OTHER, dtype=np.int8)
    cls[0x00:0x80] = cls[0xE0:0x100] = cls[0xCC:0xD4] = INT
    cls[0xC2:0xC4] = BOOL
    cls[0x90:0xA0] = cls[_ARRAY16] = ARRAY
    return length, cls


_LENGTH, _CLASS = _tables()
# token_values gives a bool its byte as an int8: false (0xC2) -62, true (0xC3) -61.
_BOOL_BIAS = 0x100 - 0xC2
# Per event kind or compound record code (format 1.2): the kinds of the events a record
# stands for, and its item count.
_COMPONENTS = {int(kind): (int(kind),) for kind in FIELDS} | {
    code: tuple(int(kind) for kind in kinds) for code, kinds in COMPOUNDS.items()
}
_WIDTH = {
    code: 3 + sum(len(FIELDS[Kind(kind)]) for kind in kinds) for code, kinds in _COMPONENTS.items()
}
# Only an ISSUE has a bool or a shape: the others are all ints on the wire. A compound
# has an ISSUE first or not at all, so its shape and bool sit where an ISSUE has them.
assert [k for k, fields in FIELDS.items() if any(t in ("bool", "shape") for _, t in fields)] == [
    Kind.ISSUE
]
assert all(Kind.ISSUE not in kinds[1:] for kinds in COMPOUNDS.values())
_ISSUE_CODES = [code for code, kinds in _COMPONENTS.items() if kinds[0] == Kind.ISSUE]
_MAX_KIND = 128
_WIDTHS = np.zeros(_MAX_KIND, dtype=np.int64)
_EVENTS = np.zeros(_MAX_KIND, dtype=np.int64)  # events a record of each code stands for
for _code, _kinds in _COMPONENTS.items():
    _WIDTHS[_code], _EVENTS[_code] = _WIDTH[_code], len(_kinds)
_IS_DEFINITION = np.zeros(_MAX_KIND, dtype=bool)
_IS_DEFINITION[list(_DEFINITIONS)] = True
_IS_ISSUE = np.zeros(_MAX_KIND, dtype=bool)
_IS_ISSUE[_ISSUE_CODES] = True


def _layouts() -> dict[int, tuple[tuple[int, np.ndarray, np.ndarray], ...]]:
    """Per code, per event its record stands for: the event's kind, the positions of its
    items ``[kind, dt, pe, *fields]`` among the record's items (the first being the
    code), and which of them come after an ISSUE's shape (shifted by its length)."""
    layouts = {}
    for code, kinds in _COMPONENTS.items():
        events, at = [], 3
        for kind in kinds:
            width = len(FIELDS[Kind(kind)])
            columns = np.array([0, 1, 2, *range(at, at + width)], dtype=np.int64)
            has_shape = _IS_ISSUE[code]
            events.append((kind, columns, has_shape & (columns > SHAPE_AT)))
            at += width
        layouts[code] = tuple(events)
    return layouts


_LAYOUT = _layouts()


@dataclass
class BlockScan:
    """What scan_block found: records up to ``stop`` (bytes into the block).

    ``kinds``, ``tables`` and ``shapes`` are the events in EventTables form (times
    still deltas); ``definitions`` the ``(events before it, start, end)`` of each
    definition record among them, for the reader to apply. The scan stopped at
    ``stop`` because the record there is ``unusual`` (whole, but not a valid event
    or definition), or ``foreign`` (it has a token of a type the scan does not
    parse), or else not wholly in the block.
    """

    stop: int
    unusual: bool
    foreign: bool
    kinds: np.ndarray
    tables: dict[int, tuple[np.ndarray, np.ndarray]]
    shapes: list[tuple[int, ...]]
    definitions: list[tuple[int, int, int]]


def _token_starts(data: np.ndarray, n: int) -> np.ndarray:
    """The offsets of the tokens of ``data[:n]`` read from 0, all ints, bools and
    fixarray headers (the first of another type is read as one byte)."""
    marker = np.subtract(data[:n], 0xCC, dtype=np.uint8)
    is_candidate = marker < 8
    is_candidate |= marker == _ARRAY16 - 0xCC
    # Per byte, the candidates before it (int32: a block is far under 2 GB).
    before = np.empty(n + 9, dtype=np.int32)
    before[0] = 0
    np.cumsum(is_candidate, dtype=np.int32, out=before[1 : n + 1])
    before[n + 1 :] = before[n]
    candidates = np.flatnonzero(is_candidate)
    del marker, is_candidate  # freed early, as ``before`` below: a block's arrays add up
    count = len(candidates)
    if not count:
        return np.arange(n, dtype=np.int64)
    lengths = _LENGTH[data[candidates]]
    ends = candidates + lengths
    # From one candidate, the bytes up to the next one are one-byte tokens: the real
    # candidates are those on the path of the first under "the next at or after my
    # end". Its nodes are those that are a step from a node (or the first): start
    # from all, and drop the nodes no node steps to, then those only dropped nodes
    # stepped to, and so on until none is dropped; a false start's path soon lands on
    # a real token, so that takes a few rounds, each over the nodes just dropped.
    jump = before[ends]
    del before
    jump = np.append(jump, count)
    # Per node, the nodes stepping to it (the first counts as stepped to; the end,
    # ``count``, is no candidate and steps nowhere).
    steps_in = np.bincount(jump[:count], minlength=count + 1)
    steps_in[0] += 1
    dropped = np.flatnonzero(steps_in == 0)
    for _ in range(MAX_ROUNDS):
        if not len(dropped):
            live = steps_in > 0
            break
        targets = jump[dropped]
        np.subtract.at(steps_in, targets, 1)
        dropped = np.unique(targets[steps_in[targets] == 0])
    else:
        live = _path_by_doubling(jump)
    live = live[:count]
    # The other bytes of a real token are not tokens (a wide int's 1 to 8 bytes of
    # value, an array16's 2 of count): the tokens are the bytes from the end of one
    # real candidate to the next one, each offset its token's index plus the bytes
    # skipped inside the real candidates before it.
    starts = candidates[live]
    skipped = np.minimum(ends[live], n)  # the last may be cut short by the block's end
    skipped -= starts + 1
    # Each real candidate's token index: its offset less the bytes skipped before it.
    at = starts - np.cumsum(skipped)
    at += skipped
    n_tokens = n - int(skipped.sum())
    # Each offset is the last one plus 1, plus the bytes skipped after a real candidate:
    # one running sum, in place (a fresh array per step would cost more than the sum).
    offsets = np.ones(n_tokens + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[at + 1] += skipped
    np.cumsum(offsets, out=offsets)
    return offsets[:n_tokens]


def _path_by_doubling(jump: np.ndarray) -> np.ndarray:
    """The nodes on the path of node 0 under ``jump`` (increasing but at its last node),
    in log steps whatever the input."""
    jumps = [jump]
    while (1 << len(jumps)) <= len(jump):
        jumps.append(jumps[-1][jumps[-1]])
    live = np.zeros(len(jump), dtype=bool)
    live[0] = True
    for step in reversed(jumps):
        live[step[np.flatnonzero(live)]] = True
    return live


@dataclass
class Records:
    """Where the top-level records of a block start (find_records): the first part of
    scan_block, which alone decides where the block's whole records end, and so where
    the next block starts (``stop``, unless scan_records finds one of them unusual).

    ``data`` is the block's bytes (padded by 8); ``tokens``, ``first`` and ``cls``
    its tokens' offsets, first bytes and classes, up to the first ``foreign`` one;
    ``end`` the end of the last of them; ``items`` each token's items (of an array
    header, else 0); ``starts`` the first token of each record, the first ``count``
    of them whole.
    """

    data: np.ndarray
    tokens: np.ndarray
    first: np.ndarray
    cls: np.ndarray
    foreign: bool
    end: int
    items: np.ndarray
    starts: np.ndarray
    count: int

    @property
    def stop(self) -> int:
        """The end of the block's whole records."""
        if self.count <= 0:
            return 0
        if self.count < len(self.starts):
            return int(self.tokens[self.starts[self.count]])
        return self.end


@functools.lru_cache(maxsize=16)
def event_mask(codes: frozenset[int]) -> np.ndarray:
    """Per record code below 128, whether records of it are events: ``codes``, a
    frozenset of ``schema.event_codes`` (those of a file's version; compound records
    are split into the events they stand for). Not to be modified (it is shared)."""
    mask = np.zeros(_MAX_KIND, dtype=bool)
    mask[[code for code in codes if code in _COMPONENTS]] = True
    # A record with no kind (-1) is looked up at 0, which is never an event.
    assert not mask[0]
    mask.flags.writeable = False
    return mask


def scan_block(block: bytes | bytearray | memoryview, known: np.ndarray | None = None) -> BlockScan:
    """Scan ``block``, which starts at a record boundary (see the module docstring);
    ``known`` (an ``event_mask``, by default that of this reader's own version) says
    which codes are events: another code ends the scan as ``unusual``."""
    return scan_records(find_records(block), known)


def find_records(block: bytes | bytearray | memoryview) -> Records:
    """Cut ``block``, which starts at a record boundary, into tokens and top-level records."""
    n = len(block)
    data = np.zeros(n + 8, dtype=np.uint8)
    nothing = np.empty(0, dtype=np.int64)
    if not n:
        return Records(data, nothing, data[:0], _CLASS[:0], False, 0, nothing, nothing, 0)
    data[:n] = np.frombuffer(block, dtype=np.uint8)
    tokens = _token_starts(data, n)
    first = data[tokens]
    cls = _CLASS.take(first)  # take, not [first]: a faster loop for a small table
    # Tokens are read right up to the first of a type not parsed: the scan ends there.
    foreign = np.flatnonzero(cls == OTHER)
    if len(foreign):
        end = int(tokens[foreign[0]])
        tokens, first, cls = tokens[: foreign[0]], first[: foreign[0]], cls[: foreign[0]]
    else:
        end = int(tokens[-1] + _LENGTH[first[-1]])
    if not len(tokens):
        return Records(data, tokens, first, cls, True, end, nothing, nothing, 0)
    # Items of each array header (0x91..0x9F: 0x90 + count; an array16's count in its
    # next 2 bytes), 0 for other tokens (and an empty array); int32: an array has 65535
    # items at most. Set at the headers only, found by a compare of the first bytes.
    is_header = np.subtract(first, 0x91, dtype=np.uint8) < 15
    long_arrays = np.flatnonzero(first == _ARRAY16)
    if len(long_arrays):
        is_header[long_arrays] = True
    headers = np.flatnonzero(is_header)
    items = np.zeros(len(tokens), dtype=np.int32)
    items[headers] = first[headers] - np.uint8(0x90)  # an array16's 0x4C is set below
    if len(long_arrays):
        at = tokens[long_arrays]
        counts = data[at + 1].astype(np.int32)
        counts <<= 8
        counts |= data[at + 2]
        items[long_arrays] = counts
    # A top-level object starts where the items still owed reach a new low.
    starts, left = record_starts(items, headers)
    count = len(starts)
    # The last object is whole if all its items are there and its last token ends
    # in the block (before a foreign token, which would be one of its items).
    whole_tail = left == -count and end <= n
    if not whole_tail:
        count -= 1
    return Records(data, tokens, first, cls, bool(len(foreign)), end, items, starts, count)


def scan_records(block: Records, known: np.ndarray | None = None) -> BlockScan:
    """The rest of scan_block: the records find_records found in a block, checked, and
    their events gathered into rows per kind."""
    data, tokens, first, cls = block.data, block.tokens, block.first, block.cls
    end, items, starts, count, foreign = (
        block.end,
        block.items,
        block.starts,
        block.count,
        block.foreign,
    )
    if count <= 0:
        return BlockScan(0, False, foreign, np.empty(0, np.int8), {}, [], [])
    record_tokens = np.diff(np.append(starts, len(tokens)))[:count]
    offsets = np.append(tokens[starts], end)[: count + 1]
    values, big = token_values(data, tokens, first)
    # A token's class, or OTHER for an int past the int64 range; per record, its
    # tokens that are not ints: an event has its array header, and an ISSUE also the
    # header of its shape and its bool.
    not_int = cls != INT
    if big is not None:
        not_int |= big
        cls[big] = OTHER
    not_ints = np.add.reduceat(not_int.view(np.int8), starts, dtype=np.int32)[:count]
    starts = starts[:count]
    kind_token = np.minimum(starts + 1, len(tokens) - 1)
    has_kind = (cls[starts] == ARRAY) & (record_tokens >= 2) & (first[kind_token] < 0x80)
    kinds = np.where(has_kind, values[kind_token], -1)
    n_items = items[starts]
    if known is None:
        known = event_mask(event_codes(wire.FORMAT_VERSION))
    # A kind is a positive fixint (checked in has_kind), else -1: a table of 128 serves.
    code_at = np.maximum(kinds, 0)
    is_event = known.take(code_at)
    is_definition = has_kind & _IS_DEFINITION.take(code_at)
    ok = is_definition.copy()
    # Per code: the records of it that are fine, the token of each one's first item
    # (its code), and for those with an ISSUE the length and id of its shape.
    found: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]] = {}
    shapes: list[tuple[int, ...]] = []
    codes = np.where(is_event, kinds, 0).astype(np.int8)
    by_code = np.argsort(codes, kind="stable")  # a radix sort for int8
    bounds = np.zeros(_MAX_KIND + 1, dtype=np.int64)
    np.cumsum(np.bincount(codes, minlength=_MAX_KIND), out=bounds[1:])
    present = np.flatnonzero(np.diff(bounds[1:])).tolist()
    present = [code + 1 for code in present]
    issue_codes = [code for code in present if _IS_ISSUE[code]]
    if issue_codes:
        # ISSUEs and the compounds that start with one, together: their shapes are
        # numbered in order of first use across all of them.
        records = np.flatnonzero(_IS_ISSUE[codes])
        widths = _WIDTHS[codes[records]]
        good = (n_items[records] == widths) & (record_tokens[records] >= widths + 1)
        good &= not_ints[records] == 3
        records, widths = records[good], widths[good]
        dims, shape_ids, fine, shapes = issue_shapes(
            starts[records], record_tokens[records], widths, items, cls, values
        )
        for code in issue_codes:
            mine = fine & (codes[records] == code)
            found[code] = (records[mine], starts[records[mine]] + 1, dims[mine], shape_ids[mine])
    for code in present:
        if _IS_ISSUE[code]:
            continue
        width = _WIDTH[code]
        records = by_code[bounds[code] : bounds[code + 1]]
        good = (n_items[records] == width) & (record_tokens[records] == width + 1)
        good &= not_ints[records] == 1
        records = records[good]
        found[code] = (records, starts[records] + 1, None, None)
    for records, _, _, _ in found.values():
        ok[records] = True
    bad = np.flatnonzero(~ok)
    used = int(bad[0]) if len(bad) else count
    # Per record, the events it stands for (a compound's several), and the position
    # of its first among the block's events (of a definition: the events before it).
    counts = _EVENTS[codes[:used]]
    counts[~ok[:used]] = 0
    event_at = np.cumsum(counts)
    n_events = int(event_at[-1]) if used else 0
    event_at -= counts
    event_kinds = np.empty(n_events, dtype=np.int8)
    parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for code, (records, base, dims, shape_ids) in found.items():
        inside = records < used
        if not inside.all():
            records, base = records[inside], base[inside]
            if dims is not None:
                dims, shape_ids = dims[inside], shape_ids[inside]
        if not len(records):
            continue
        at = event_at[records]
        # A record without a shape: its items as rows of a sliding view of the values
        # (whole rows copied, no index per item), each event's columns taken from them.
        whole = None if dims is not None else windows(values, _WIDTH[code])[base]
        for j, (kind, columns, shifted) in enumerate(_LAYOUT[code]):
            # The tokens of the event's items: kind (the code), dt, pe, then its fields,
            # which come after the shape's items in a record with an ISSUE.
            if whole is not None:
                single = len(columns) == whole.shape[1]
                rows = whole if single else whole.take(columns, axis=1)
            else:
                # Built a column at a time (as columns × records: numpy's loops are
                # slow over rows of a few items), taken as records × columns.
                tokens_at = columns[:, None] + base
                if dims is not None:
                    tokens_at[shifted] += dims
                rows = values.take(tokens_at.T)
            if kind != code:
                rows[:, 0] = kind
            if j:
                rows[:, 1] = 0  # the compound's dt is its first event's
            if kind == Kind.ISSUE:
                rows[:, SHAPE_AT] = shape_ids
                rows[:, BOOL_AT] += _BOOL_BIAS
            event_kinds[at + j] = kind
            parts.setdefault(kind, []).append((at + j if j else at, rows))
    tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for kind, pieces in parts.items():
        if len(pieces) == 1:
            tables[kind] = pieces[0]
            continue
        at = np.concatenate([at for at, _ in pieces])
        order = np.argsort(at, kind="stable")
        # take, not [order]: numpy's take copies whole rows, indexing goes item by item.
        rows = np.concatenate([rows for _, rows in pieces])
        tables[kind] = (at.take(order), rows.take(order, axis=0))
    definitions = [
        (int(event_at[r]), int(offsets[r]), int(offsets[r + 1]))
        for r in np.flatnonzero(is_definition[:used]).tolist()
    ]
    return BlockScan(
        stop=int(offsets[used]),
        unusual=used < count,
        foreign=used == count and foreign,
        kinds=event_kinds,
        tables=tables,
        shapes=shapes,
        definitions=definitions,
    )
