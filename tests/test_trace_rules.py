"""Every rule traces/FORMAT.md says a reader enforces ("What a reader refuses"): for each, a
trace that breaks it, refused with the message FORMAT.md gives, by the layer it names (the
reader on both its paths, or kbdebug's index), and nothing else in the trace wrong."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest
from trace_synth import KERNEL_FILE, KERNEL_SOURCE, make_header

from emulator.trace.errors import TraceFormatError
from emulator.trace.reader import read_trace, read_trace_tables
from kbdebug.replay import Replay

ROOT = Path(__file__).resolve().parents[1]
FORMAT = ROOT / "traces" / "FORMAT.md"
SECTION = "## What a reader refuses"

MiB = 1 << 20


def valid() -> list[Any]:
    """A whole, valid 1.3 trace as its objects: one PE of a 2x2 mesh loads a tile on
    channel 0 and waits for it (events 0..8), every record written plainly."""
    header = {"format": "kbt", "version": [1, 3], "producer": "test"}
    header.update(make_header())  # 4 PEs, 5 channels each
    return [
        header,
        [101, KERNEL_FILE, KERNEL_SOURCE],
        [0, "decode_attention"],  # string 0
        [100, KERNEL_FILE, 4, "decode_attention"],  # loc 0
        [1, 0, 0, 0, 0],  # event 0, t 0: KERNEL_START pe 0
        [0, "load_async"],  # string 1
        [0, "bf16"],  # string 2
        [4, 1, 0, 0, 1, 0, 4096, 16384, [64, 128], 2, False, 0],  # event 1, t 1: ISSUE cmd 0 fut 0
        [5, 0, 0, 0, 0],  # event 2: CHAN_REQUEST channel 0 cmd 0
        [6, 0, 0, 0, 0],  # event 3: CHAN_GRANT
        [9, 1, 0, 0, 0],  # event 4, t 2: WAIT_BEGIN future 0 at loc 0
        [7, 255, 0, 0, 0],  # event 5, t 257: CHAN_RELEASE
        [8, 500, 0, 0, 0],  # event 6, t 757: COMPLETE cmd 0 future 0
        [10, 0, 0, 0, 755],  # event 7: WAIT_END future 0 stalled 755
        [2, 1, 0],  # event 8, t 758: KERNEL_END
        {"status": "ok", "events": 9, "end_time": 758, "error": None, "error_loc": None},
    ]


def pack(objects: list[Any]) -> bytes:
    return b"".join(msgpack.packb(o, use_bin_type=True) for o in objects)


# --- ways to break the valid trace (each takes its objects, edits them or returns bytes) ------

HEADER, FOOTER = 0, -1


def event(objects: list[Any], kind: int) -> list[Any]:
    """The first record of event kind ``kind``."""
    return next(o for o in objects[1:] if isinstance(o, list) and o[0] == kind)


def where(objects: list[Any], kind: int) -> int:
    return objects.index(event(objects, kind))


def setting(kind: int, item: int, value: Any) -> Callable[[list[Any]], None]:
    """Item ``item`` (0 being the kind) of the first ``kind`` event set to ``value``."""

    def edit(objects: list[Any]) -> None:
        event(objects, kind)[item] = value

    return edit


def header(key: str, value: Any) -> Callable[[list[Any]], None]:
    def edit(objects: list[Any]) -> None:
        objects[HEADER][key] = value

    return edit


def tensors(value: Any) -> Callable[[list[Any]], None]:
    """The header's tensors (format 1.5) set to ``value``."""
    return both(header("version", [1, 5]), header("tensors", value))


def named(name: str, addr: int = 0, **overrides: Any) -> dict[str, Any]:
    """A header tensor entry, 4 f16 elements at ``addr`` unless ``overrides`` say otherwise."""
    entry = {"name": name, "addr": addr, "shape": [4], "dtype": "f16", "strides": [2]}
    entry.update(overrides)
    return entry


def channel(key: str, value: Any) -> Callable[[list[Any]], None]:
    def edit(objects: list[Any]) -> None:
        objects[HEADER]["channels"][1][key] = value

    return edit


def footer(key: str, value: Any) -> Callable[[list[Any]], None]:
    def edit(objects: list[Any]) -> None:
        objects[FOOTER][key] = value

    return edit


def adding(record: Any, after: int, events: int = 1, version: list[int] | None = None):
    """``record`` inserted after the first event of kind ``after`` (0: after the header),
    the footer counting ``events`` more, in a file of ``version`` if given."""

    def edit(objects: list[Any]) -> None:
        at = 1 if after == 0 else where(objects, after) + 1
        objects.insert(at, record)
        objects[FOOTER]["events"] += events
        if version is not None:
            objects[HEADER]["version"] = version

    return edit


def replacing(kind: int, record: Any) -> Callable[[list[Any]], None]:
    def edit(objects: list[Any]) -> None:
        objects[where(objects, kind)] = record

    return edit


def definition(index: int, record: Any) -> Callable[[list[Any]], None]:
    def edit(objects: list[Any]) -> None:
        objects[index] = record

    return edit


def moving(kind: int, before: int) -> Callable[[list[Any]], None]:
    """The first ``kind`` event moved right before the first ``before`` event."""

    def edit(objects: list[Any]) -> None:
        record = objects.pop(where(objects, kind))
        objects.insert(where(objects, before), record)

    return edit


def bytes_before(kind: int, raw: bytes) -> Callable[[list[Any]], bytes]:
    def edit(objects: list[Any]) -> bytes:
        at = where(objects, kind)
        return pack(objects[:at]) + raw + pack(objects[at:])

    return edit


def both(*edits: Callable[[list[Any]], Any]) -> Callable[[list[Any]], None]:
    def edit(objects: list[Any]) -> None:
        for e in edits:
            e(objects)

    return edit


def release_before_grant(objects: list[Any]) -> None:
    grant, release = where(objects, 6), where(objects, 7)
    objects[grant], objects[release] = [7, 0, 0, 0, 0], [6, 255, 0, 0, 0]


def end_before_start(objects: list[Any]) -> None:
    end = objects.pop(where(objects, 2))
    objects.insert(where(objects, 1), [*end[:1], 0, *end[2:]])
    event(objects, 1)[1] = 0
    objects[FOOTER]["end_time"] = 757


def time_at_the_limit(objects: list[Any]) -> None:
    event(objects, 1)[1] = 2**53  # KERNEL_START at the limit is fine, the ISSUE after it not


# --- the rules: (rule, how its trace is made, what the error says) -------------------------

READER, INDEX = "reader", "index"


@dataclass(frozen=True)
class Case:
    rule: str
    craft: Callable[[list[Any]], Any] | None  # None: a file case (FILE_CASES)
    fragment: str
    layer: str = READER


CASES = [
    # msgpack and the limits
    Case("msgpack.valid", bytes_before(2, b"\xc1"), "event 8 at byte 1851: malformed msgpack"),
    Case("msgpack.depth", bytes_before(2, b"\x91" * 1100 + b"\x90"), "malformed msgpack"),
    Case(
        "msgpack.ext",
        bytes_before(2, msgpack.packb(msgpack.ExtType(1, b"x"))),
        "malformed msgpack (ValueError: 2 exceeds max_ext_len(0))",
    ),
    Case(
        "msgpack.map-key",
        footer(7, 1),  # type: ignore[arg-type]
        "malformed msgpack (ValueError: int is not allowed for map key when strict_map_key=True)",
    ),
    Case(
        "msgpack.str-length",
        definition(1, [101, KERNEL_FILE, "x" * (16 * MiB + 1)]),
        "malformed msgpack (ValueError: 16777217 exceeds max_str_len(16777216))",
    ),
    Case(
        "msgpack.bin-length",
        definition(1, [101, KERNEL_FILE, b"x" * (16 * MiB + 1)]),
        "malformed msgpack (ValueError: 16777217 exceeds max_bin_len(16777216))",
    ),
    Case(
        "msgpack.array-length",
        adding([0] * 65537, 1),
        "malformed msgpack (ValueError: 65537 exceeds max_array_len(65536))",
    ),
    Case(
        "msgpack.map-length",
        lambda o: o[HEADER]["config"].update({f"k{i}": i for i in range(4096)}),
        "at byte 0: malformed msgpack (ValueError: 4105 exceeds max_map_len(4096))",
    ),
    Case(
        "record.size",
        definition(1, [101, KERNEL_FILE, "y" * (16 * MiB), "z" * (16 * MiB)]),
        "at byte 1227: record larger than the 33554432-byte limit",
    ),
    # the header
    Case(
        "header.format",
        header("format", "kbx"),
        "at byte 0: not a kbt trace (expected a header map with format 'kbt')",
    ),
    Case(
        "header.format",
        lambda o: pack([[1, 3], *o[1:]]),
        "not a kbt trace (expected a header map with format 'kbt')",
    ),
    Case(
        "header.version",
        header("version", [True, 3]),
        "header version must be [major, minor], got [True, 3]",
    ),
    Case(
        "header.version-newer",
        header("version", [2, 0]),
        "format version 2.0 is newer than this reader (1.x); upgrade kbdebug",
    ),
    Case("header.version-older", header("version", [0, 9]), "format version 0.9 is not supported"),
    Case("header.producer", header("producer", 5), "header producer must be a str"),
    Case("header.keys", lambda o: o[HEADER].pop("launch") and None, "header lacks 'launch'"),
    Case("header.config", header("config", []), "header config must be a map"),
    Case("header.mesh", header("mesh", [4]), "header mesh must be [rows, cols], got [4]"),
    Case("header.mesh-size", header("mesh", [0, 4]), "header mesh 0x4 is outside 1..65536 PEs"),
    Case("header.mesh-size", header("mesh", [257, 256]), "header mesh 257x256 is outside 1..65536"),
    Case("header.channels", header("channels", {}), "header channels must be an array"),
    Case(
        "header.channel-map",
        lambda o: o[HEADER]["channels"].__setitem__(1, 5),
        "header channel 1 is not a map",
    ),
    Case(
        "header.channel-id", channel("id", 7), "header channel 1 has id 7, expected its position 1"
    ),
    Case("header.channel-pe", channel("pe", 4), "header channel 1 has pe 4 outside the mesh"),
    Case(
        "header.channel-kind",
        channel("kind", "tpu"),
        "header channel 1 has kind 'tpu', not one of ('dma_read', 'dma_write', 'gemm', 'math',"
        " 'ipcq')",
    ),
    Case("header.channel-index", channel("index", -1), "header channel 1 has index -1"),
    Case("header.channel-name", channel("name", 5), "header channel 1 has no str name"),
    Case(
        "header.launch",
        lambda o: o[HEADER]["launch"].__setitem__("grid", [-1]),
        'header launch must be {"kernel": str, "grid": [int, ...], "args": [str, ...]}',
    ),
    Case(
        "header.hbm-stacks",
        both(header("version", [1, 4]), header("hbm_stacks", [[0, 1], [1]])),
        "at byte 0: header hbm_stacks must be 1 to 4 non-empty lists of PEs of the mesh, "
        "each PE on one stack at most; got [[0, 1], [1]]",
    ),
    Case("header.tensors", tensors({"K": 1}), "at byte 0: header tensors must be an array of maps"),
    Case(
        "header.tensor-map",
        tensors([{"name": "K"}]),
        "header tensor 0 must be a map of name, addr, shape, dtype and strides",
    ),
    Case("header.tensor-name", tensors([named("")]), "header tensor 0 name must be a str of 1"),
    Case("header.tensor-name", tensors([named("K" * 65)]), "name must be a str of 1 to 64 bytes"),
    Case(
        "header.tensor-name-control",
        tensors([named("K\x1b[31m")]),
        "header tensor 0 name has control characters",
    ),
    Case(
        "header.tensor-name-twice",
        tensors([named("K"), named("K", addr=64)]),
        "header tensor 1 repeats a name",
    ),
    Case("header.tensor-addr", tensors([named("K", addr=-1)]), "tensor 0 addr must be an int >= 0"),
    Case(
        "header.tensor-dtype",
        tensors([named("K", dtype="bf16")]),
        "header tensor 0 dtype must be one of f16, f32",
    ),
    Case(
        "header.tensor-shape",
        tensors([named("K", shape=[1] * 9, strides=[2] * 9)]),
        "header tensor 0 shape must be at most 8 ints >= 0",
    ),
    Case(
        "header.tensor-end",
        tensors([named("K", shape=[1 << 62], strides=[2])]),
        "header tensor 0 ends past the int64 range",
    ),
    Case(
        "header.tensor-strides",
        tensors([named("K", shape=[4, 8], strides=[8, 2])]),
        "header tensor 0 strides must be the row-major byte strides of its shape",
    ),
    # records
    Case("record.array", adding(5, 1, 0), "expected a record (a non-empty array), got int 5"),
    Case("record.array", adding([], 1, 0), "expected a record (a non-empty array), got list []"),
    Case("record.code", adding(["x", 0, 0], 1, 0), "record kind must be an int, got str 'x'"),
    Case("record.known", adding([42, 0, 0], 1), "at byte 1770: unknown record kind 42"),
    Case("record.known", adding([128, 0, 0], 1, 0, [1, 9]), "unknown record kind 128"),
    Case(
        "record.since",
        adding([25, 0, 0, 0, 0], 4, 1, [1, 2]),
        "unknown record kind 25 (READS, an event kind of format 1.3 and later; this file is 1.2)",
    ),
    Case(
        "record.since",
        adding([24, 0, 0, 1, -1, 1, 0], 7, 2, [1, 1]),
        "unknown record kind 24 (a compound record of format 1.2 and later; this file is 1.1)",
    ),
    Case(
        "record.since",
        adding([27, 0, 0, 0, -1], 4, 1, [1, 5]),
        "unknown record kind 27 (PROVENANCE, an event kind of format 1.6 and later; this file"
        " is 1.5)",
    ),
    Case("record.after-footer", lambda o: pack(o) + b"\x00", "trailing bytes after the footer"),
    Case("record.after-footer", lambda o: pack([*o, [2, 0, 1]]), "trailing bytes after the footer"),
    Case(
        "record.skipped-event",
        adding([42, 0, "pe"], 1, 1, [1, 9]),
        "event of unknown kind 42 lacks an int time and pe",
    ),
    Case(
        "record.skipped-time",
        adding([42, -1, 0], 1, 1, [1, 9]),
        "event of unknown kind 42 goes back in time",
    ),
    Case(
        "record.skipped-limit",
        adding([42, 2**53 + 1, 0], 1, 1, [1, 9]),
        "time 9007199254740993 is past the 9007199254740992-cycle limit",
    ),
    # events
    Case(
        "event.fields",
        lambda o: event(o, 1).append(0),
        "event 0 at byte 1764: KERNEL_START has 3 fields, expected 2",
    ),
    Case(
        "event.fields",
        lambda o: event(o, 5).pop() and None,
        "CHAN_REQUEST has 1 fields, expected 2",
    ),
    Case(
        "event.type",
        setting(4, 4, "load"),
        "event 1 at byte 1790: ISSUE op is str 'load', expected int",
    ),
    Case("event.type", setting(4, 10, 1), "ISSUE blocking is int 1, expected bool"),
    Case("event.type", setting(5, 3, True), "CHAN_REQUEST channel is bool True, expected int"),
    Case("event.type", setting(4, 8, 5), "ISSUE shape is int 5, expected list"),
    Case(
        "event.time-back",
        setting(5, 1, -3),
        "event 2 at byte 1810: CHAN_REQUEST time goes back by 3 cycles",
    ),
    Case(
        "event.time-limit",
        time_at_the_limit,
        "event 1 at byte 1798: time 9007199254740993 is past the 9007199254740992-cycle limit"
        " (implausible)",
    ),
    Case(
        "event.int64",
        setting(4, 6, 2**64 - 1),
        "ISSUE addr 18446744073709551615 exceeds the int64 range",
    ),
    Case(
        "event.int64",
        setting(5, 4, 2**63),
        "CHAN_REQUEST cmd 9223372036854775808 exceeds the int64",
    ),
    Case("event.count", setting(4, 7, -1), "ISSUE nbytes -1 is negative"),
    Case("event.addr", setting(4, 6, -2), "ISSUE addr -2 is neither an address nor -1"),
    Case(
        "event.cycles",
        setting(10, 4, -1),
        "WAIT_END stalled -1 is outside 0..9007199254740992 cycles",
    ),
    Case("event.cycles", setting(10, 4, 2**53 + 1), "WAIT_END stalled 9007199254740993 is outside"),
    Case("event.id", setting(5, 4, -1), "CHAN_REQUEST cmd -1 is negative (no such id)"),
    Case("event.id", setting(9, 3, -1), "WAIT_BEGIN future -1 is negative (no such id)"),
    Case("event.id-or-none", setting(4, 5, -2), "ISSUE future -2 is neither an id nor -1 (none)"),
    Case(
        "event.id-or-none",
        adding([27, 0, 0, 0, -2], 4, 1, [1, 6]),
        "PROVENANCE made_by -2 is neither an id nor -1 (none)",
    ),
    Case(
        "event.id-limit",
        setting(4, 3, 477),  # 1,906 bytes (477 takes 3): ids 0..476 pass
        "ISSUE cmd 477 is not a possible id: ids count up from 0, one per command issued, and"
        " 1906 bytes hold at most 477 events",
    ),
    Case("event.pe", setting(5, 2, 4), "CHAN_REQUEST pe 4 is outside the mesh of 4 PEs"),
    Case(
        "event.pe",
        adding([14, 0, 0, 0, 4, 256], 4),
        "IPCQ_SEND dst_pe 4 is outside the mesh of 4 PEs",
    ),
    Case(
        "event.channel",
        setting(5, 3, 20),
        "CHAN_REQUEST channel 20 is not in the header's 20 channels",
    ),
    Case("event.string", setting(4, 4, 3), "ISSUE op is string id 3, not defined yet (3 defined)"),
    Case("event.loc", setting(4, 11, 1), "ISSUE loc is loc id 1, not defined yet (1 defined)"),
    Case("event.loc", setting(4, 11, -2), "ISSUE loc is loc id -2, not defined yet (1 defined)"),
    Case(
        "event.shape",
        setting(4, 8, [64, -1]),
        "ISSUE shape list [64, -1] is not a list of non-negative int64s",
    ),
    # compound records
    Case(
        "compound.fields",
        replacing(7, [22, 255, 0, 0, 0, 0]),
        "event 5 at byte 1828: compound record 22 (CHAN_RELEASE+COMPLETE) has 3 fields, expected 4",
    ),
    Case(
        "compound.fields",
        both(replacing(7, [22, 255, 0, 0, 0, 0, 0, 0]), header("version", [1, 9])),
        "compound record 22 (CHAN_RELEASE+COMPLETE) has 5 fields, expected 4",
    ),
    Case(
        "compound.item",
        replacing(7, [22, 255, 0, 99, 0, 0, 0]),
        "compound record 22 (CHAN_RELEASE+COMPLETE): CHAN_RELEASE channel 99 is not in the"
        " header's 20 channels",
    ),
    Case(
        "compound.item",
        replacing(7, [22, 255, 0, 0, 0, 0, -2]),
        "compound record 22 (CHAN_RELEASE+COMPLETE): COMPLETE future -2 is neither an id nor -1",
    ),
    # definitions
    Case(
        "def.string",
        definition(2, [0, b"decode_attention"]),
        "at byte 1687: a string definition is [0, str]",
    ),
    Case(
        "def.string-size",
        definition(2, [0, "é" * 32769]),
        "interned string longer than the 65536-byte limit",
    ),
    Case(
        "def.loc",
        definition(3, [100, KERNEL_FILE, "4", "f"]),
        "a loc definition is [100, file, line, function]",
    ),
    Case(
        "def.loc-size",
        definition(3, [100, "x" * 65537, 4, "f"]),
        "loc file longer than the 65536-byte limit",
    ),
    Case(
        "def.loc-size",
        definition(3, [100, "f", 4, "x" * 65537]),
        "loc function longer than the 65536-byte limit",
    ),
    Case(
        "def.source",
        definition(1, [101, KERNEL_FILE]),
        "at byte 1227: a source record is [101, file, text]",
    ),
    Case(
        "def.source-size",
        definition(1, [101, "x" * 65537, ""]),
        "source file name longer than the 65536-byte limit",
    ),
    Case(
        "def.source-twice",
        adding([101, KERNEL_FILE, ""], 0, 0),
        "source of 'emulator/kernels/decode_attention.py' embedded twice",
    ),
    Case(
        "def.caller",
        adding([102, 0], 1, 0),
        "a loc caller definition is [102, loc_id, caller_loc_id]",
    ),
    Case(
        "def.caller-loc",
        adding([102, 1, 0], 1, 0),
        "loc caller definition for loc id 1, not defined yet",
    ),
    Case(
        "def.caller-order",
        adding([102, 0, 0], 1, 0),
        "loc 0's caller is loc id 0, not a loc defined before it",
    ),
    Case(
        "def.caller-twice",
        # Each is inserted right after KERNEL_START: loc 1, then its caller twice.
        both(
            adding([102, 1, 0], 1, 0),
            adding([102, 1, 0], 1, 0),
            adding([100, "f.py", 1, "g"], 1, 0),
        ),
        "loc 1 is given a caller twice",
    ),
    Case(
        "def.digest",
        adding([103, 0, 1, 2], 1, 0, version=[1, 5]),
        "a digest is [103, future, min, max, mean, nan, inf, crc32], all ints",
    ),
    Case(
        "def.digest-future",
        adding([103, -3, 0, 0, 0, 0, 0, 0], 1, 0, version=[1, 5]),
        "digest of future -3: not a future id",
    ),
    Case(
        "def.digest-floats",
        adding([103, 0, 1 << 63, 0, 0, 0, 0, 0], 1, 0, version=[1, 5]),
        "digest of future 0: min, max and mean must be binary64 bits in an int64",
    ),
    Case(
        "def.digest-counts",
        adding([103, 0, 0, 0, 0, 0, -2, 0], 1, 0, version=[1, 5]),
        "digest of future 0: NaN and Inf counts must be >= 0",
    ),
    Case(
        "def.digest-crc",
        adding([103, 0, 0, 0, 0, 0, 0, -1], 1, 0, version=[1, 5]),
        "digest of future 0: crc32 -1 is not a 32-bit value",
    ),
    Case(
        "def.digest-twice",
        both(
            adding([103, 0, 0, 0, 0, 0, 0, 0], 1, 0, version=[1, 5]),
            adding([103, 0, 0, 0, 0, 0, 0, 0], 1, 0),
        ),
        "digest of future 0 written twice",
    ),
    # the footer
    Case(
        "footer.status",
        footer("status", "fine"),
        "at byte 1855: footer status 'fine' is not one of ('ok', 'error', 'deadlock',"
        " 'interrupted')",
    ),
    Case(
        "footer.status",
        lambda o: o[FOOTER].pop("status") and None,
        "footer status None is not one of",
    ),
    Case("footer.events", footer("events", 8), "footer says 8 events, the trace has 9"),
    Case(
        "footer.events", adding([42, 0, 0], 1, 0, [1, 9]), "footer says 9 events, the trace has 10"
    ),
    Case(
        "footer.end-time",
        footer("end_time", 757),
        "footer end_time 757 must be an int from the last event's time (758) to 9007199254740992",
    ),
    Case("footer.end-time", footer("end_time", "758"), "footer end_time '758' must be an int from"),
    Case("footer.error", footer("error", 5), "footer error must be a str or nil, got int 5"),
    Case(
        "footer.error-loc",
        footer("error_loc", ["k.py", 1]),
        "footer error_loc must be [file, line, function] or nil",
    ),
    Case(
        "footer.check",
        footer("check", {"ok": "no", "message": None, "block": None}),
        'footer check must be {"ok": bool, "message": str or nil, "block": str or nil}',
    ),
    Case("footer.check", footer("check", {"ok": False}), "footer check must be {"),
    Case(
        "footer.check",
        footer("check", {"ok": False, "message": 5, "block": None}),
        "footer check must be {",
    ),
    Case(
        "footer.check-size",
        footer("check", {"ok": False, "message": "é" * 513, "block": None}),
        "footer check message longer than the 1024-byte limit",
    ),
    Case(
        "footer.check-size",
        footer("check", {"ok": False, "message": None, "block": "O" * 257}),
        "footer check block longer than the 256-byte limit",
    ),
    # life cycles, checked as the index is built
    Case(
        "index.id",
        setting(4, 3, 9),  # 9 events: ids 0..8
        "event 1: ISSUE names command 9, not a possible id: ids count up from 0, one per command,"
        " and the trace has 9 events",
        INDEX,
    ),
    Case("index.id", setting(9, 3, 12), "WAIT_BEGIN names future 12, not a possible id:", INDEX),
    Case(
        "index.issue-twice",
        adding([4, 0, 0, 0, 1, 1, 4096, 16384, [64, 128], 2, False, 0], 4),
        "event 2: ISSUE of command 0 again (first at event 1): a duplicated record",
        INDEX,
    ),
    Case(
        "index.future-twice",
        adding([4, 0, 0, 1, 1, 0, 4096, 16384, [64, 128], 2, False, 0], 4),
        "event 2: ISSUE of future 0 again (first at event 1): a duplicated record",
        INDEX,
    ),
    Case(
        "index.request-twice",
        adding([5, 0, 0, 1, 0], 5),
        "event 3: CHAN_REQUEST of command 0 again (first at event 2): a duplicated record",
        INDEX,
    ),
    Case(
        "index.grant-twice",
        adding([6, 0, 0, 0, 0], 6),
        "event 4: CHAN_GRANT of command 0 again (first at event 3): a duplicated record",
        INDEX,
    ),
    Case(
        "index.release-twice",
        adding([7, 0, 0, 0, 0], 7),
        "event 6: CHAN_RELEASE of command 0 again (first at event 5): a duplicated record",
        INDEX,
    ),
    Case(
        "index.complete-twice",
        adding([8, 0, 0, 0, -1], 8),
        "event 7: COMPLETE of command 0 again (first at event 6): a duplicated record",
        INDEX,
    ),
    Case(
        "index.wait-begin-twice",
        adding([9, 0, 0, 0, -1], 9),
        "event 5: WAIT_BEGIN of future 0 again (first at event 4): a duplicated record",
        INDEX,
    ),
    Case(
        "index.wait-end-twice",
        adding([10, 0, 0, 0, 0], 10),
        "event 8: WAIT_END of future 0 again (first at event 7): a duplicated record",
        INDEX,
    ),
    Case(
        "index.start-twice",
        adding([1, 0, 0, 0, 0], 1),
        "event 1: KERNEL_START on PE 0 again (first at event 0): a duplicated record",
        INDEX,
    ),
    Case(
        "index.request-order",
        moving(5, 4),
        "event 1: CHAN_REQUEST of command 0 before (or without) its ISSUE",
        INDEX,
    ),
    Case(
        "index.request-order",
        setting(5, 4, 1),  # command 1 is never issued (and so never granted)
        "event 2: CHAN_REQUEST of command 1 before (or without) its ISSUE",
        INDEX,
    ),
    Case(
        "index.grant-issue",
        adding([6, 0, 0, 0, 1], 6),
        "event 4: CHAN_GRANT of command 1 before (or without) its ISSUE",
        INDEX,
    ),
    Case(
        "index.release-issue",
        setting(7, 4, 1),
        "event 5: CHAN_RELEASE of command 1 before (or without) its ISSUE",
        INDEX,
    ),
    Case(
        "index.complete-order",
        moving(8, 4),
        "event 1: COMPLETE of command 0 before (or without) its ISSUE",
        INDEX,
    ),
    Case(
        "index.grant-order",
        moving(6, 5),
        "event 2: CHAN_GRANT of command 0 before (or without) its CHAN_REQUEST",
        INDEX,
    ),
    Case(
        "index.release-order",
        release_before_grant,
        "event 3: CHAN_RELEASE of command 0 before (or without) its CHAN_GRANT",
        INDEX,
    ),
    Case(
        "index.wait-order",
        both(moving(10, 9), setting(10, 4, 0)),
        "event 4: WAIT_END of future 0 before (or without) its WAIT_BEGIN",
        INDEX,
    ),
    Case(
        "index.wait-order",
        lambda o: (o.remove(event(o, 9)), o[FOOTER].__setitem__("events", 8)) and None,
        "event 6: WAIT_END of future 0 before (or without) its WAIT_BEGIN",
        INDEX,
    ),
    Case(
        "index.end-order",
        end_before_start,
        "event 0: KERNEL_END on PE 0 before its KERNEL_START (event 1)",
        INDEX,
    ),
    Case(
        "index.end-order",
        both(adding([16, 0, 1, -1, -1], 1), adding([1, 0, 1, 0, 0], 2)),
        "event 1: DEADLOCK on PE 1 before its KERNEL_START (event 10)",
        INDEX,
    ),
    Case(
        "index.stall",
        setting(10, 4, 756),  # the wait lasted 755 cycles
        "event 7: WAIT_END of future 0 stalled longer than the wait lasted",
        INDEX,
    ),
    # the file itself (see FILE_CASES)
    Case("file.regular", None, "is a FIFO (named pipe), not a trace file"),
    Case("file.regular", None, "is a directory, not a trace file"),
    Case("file.regular", None, "is a character device, not a trace file"),
    Case("file.symlink-loop", None, "a loop of symbolic links, not a trace file"),
]


def file_case(fragment: str, tmp_path: Path) -> Path:
    """The path a file case opens."""
    if "FIFO" in fragment:
        os.mkfifo(tmp_path / "fifo")
        return tmp_path / "fifo"
    if "directory" in fragment:
        return tmp_path
    if "character device" in fragment:
        return Path("/dev/null")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    return loop


# --- what FORMAT.md says ------------------------------------------------------------------


@dataclass(frozen=True)
class Documented:
    rule: str
    message: str
    where: str

    def pattern(self) -> re.Pattern[str]:
        """The message as a pattern: its ``<variable parts>`` stand for any text."""
        parts = re.split(r"<[^<>]+>", self.message)
        return re.compile(".+?".join(re.escape(part) for part in parts))


def documented() -> dict[str, Documented]:
    """The rules of FORMAT.md's "What a reader refuses", by name."""
    text = FORMAT.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    rules: dict[str, Documented] = {}
    row = re.compile(r"^\| `([a-z0-9.-]+)` \|.*\| `(.+)` \| ([^|]+) \|$")
    for line in section.splitlines():
        match = row.match(line)
        if match:
            rule, message, place = match.groups()
            assert rule not in rules, f"{rule} documented twice"
            rules[rule] = Documented(rule, message, place.strip())
    return rules


DOCUMENTED = documented()


def test_every_documented_rule_has_a_case_and_every_case_a_documented_rule():
    cased = {case.rule for case in CASES}
    assert sorted(set(DOCUMENTED) - cased) == [], "documented rules without a case"
    assert sorted(cased - set(DOCUMENTED)) == [], "cases of rules FORMAT.md does not give"
    assert len(DOCUMENTED) >= 89  # both tables read (a row the pattern misses is no rule)


def test_the_valid_trace_is_valid_on_every_path(tmp_path):
    data = pack(valid())
    assert len(data) == 1904  # the offsets and the id limit in CASES count on it
    trace = read_trace(data)
    assert not trace.truncated and len(trace.events) == 9
    read_trace_tables(data, lambda tables: None)
    path = tmp_path / "valid.kbt"
    path.write_bytes(data)
    assert Replay.open(path, cache=False).n_events == 9


def refusal(read: Callable[[], Any]) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as info:
        read()
    error = info.value
    assert "\n" not in str(error)
    return error


def check_message(case: Case, error: TraceFormatError) -> None:
    doc = DOCUMENTED[case.rule]
    message = str(error)
    assert case.fragment in message
    # The message is the one FORMAT.md gives: its fixed text, in order, around the parts
    # that vary, and the reason ends the message.
    assert doc.pattern().search(error.reason), (doc.message, error.reason)
    assert message.endswith(error.reason)
    # Where it says: a byte offset, an event index.
    if doc.where.startswith("byte"):
        assert error.offset is not None, message
    if doc.where in ("byte, event", "event"):
        assert error.event_index is not None, message
    if doc.where == "event":
        assert error.offset is None, message
    if doc.where == "path":
        assert error.offset is None and error.event_index is None, message


@pytest.mark.parametrize(
    "case",
    CASES,
    ids=[f"{case.rule}-{n}" for n, case in enumerate(CASES)],
)
def test_a_trace_breaking_the_rule_is_refused_with_the_documented_message(case, tmp_path):
    if case.craft is None:
        path = file_case(case.fragment, tmp_path)
        check_message(case, refusal(lambda: read_trace(path)))
        check_message(case, refusal(lambda: read_trace_tables(path, lambda tables: None)))
        return
    objects = copy.deepcopy(valid())
    crafted = case.craft(objects)
    data = crafted if isinstance(crafted, bytes) else pack(objects)
    path = tmp_path / "broken.kbt"
    path.write_bytes(data)
    if case.layer == READER:
        exact = refusal(lambda: read_trace(data))
        check_message(case, exact)
        # The fast path (blocks of events with numpy) refuses it alike, at the same place.
        fast = refusal(lambda: read_trace_tables(data, lambda tables: None))
        assert str(fast) == str(exact)
        assert str(refusal(lambda: read_trace(path))) == str(exact).replace("<bytes>", str(path))
    else:
        # The reader takes it; kbdebug's index refuses it.
        trace = read_trace(data)
        assert not trace.truncated
        read_trace_tables(data, lambda tables: None)
        check_message(case, refusal(lambda: Replay.open(path, cache=False)))


def test_the_limits_themselves_pass(tmp_path):
    """The reader's bounds are inclusive: an id of the file's size / 4, a time of 2**53."""
    objects = valid()
    event(objects, 4)[3] = 476  # 1,906 bytes: ids up to 476
    data = pack(objects)
    assert len(data) == 1906
    read_trace(data)
    read_trace_tables(data, lambda tables: None)
    # The index bounds ids by the events, which is stricter (index.id).
    path = tmp_path / "id.kbt"
    path.write_bytes(data)
    assert "ISSUE names command 476" in str(refusal(lambda: Replay.open(path, cache=False)))

    objects = valid()
    for record in objects[1:-1]:
        if isinstance(record, list) and record[0] != 0 and record[0] < 100:
            record[1] = 0
    event(objects, 2)[1] = 2**53  # every event at 0, KERNEL_END at the limit
    objects[FOOTER]["end_time"] = 2**53
    event(objects, 10)[4] = 0
    data = pack(objects)
    assert read_trace(data).events[-1][1] == 2**53
    read_trace_tables(data, lambda tables: None)
    path.write_bytes(data)
    assert Replay.open(path, cache=False).index.end_time == 2**53
