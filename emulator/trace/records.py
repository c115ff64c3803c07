"""RecordChecks: the reader's checks of the header, definitions, footer and odd events,
each failing with TraceFormatError naming what is wrong, with its offset and event index."""

from __future__ import annotations

from typing import Any, NoReturn

from emulator.trace import wire
from emulator.trace.digests import Digest, digest_problem, read_tensors
from emulator.trace.errors import TraceFormatError
from emulator.trace.rules import (
    COMPOUND_RULES,
    INT64_MAX,
    MAX_CYCLES,
    RULES,
    brief,
    compound_name,
    describe,
    is_shape,
    make_checks,
)
from emulator.trace.schema import (
    CHANNEL_KINDS,
    COMPOUNDS,
    COMPOUNDS_SINCE,
    KIND_SINCE,
    STATUSES,
    Kind,
    SourceLoc,
    event_codes,
)


class RecordChecks:
    """The checks of one record at a time, for Parser, whose state they read and extend
    (the header's ranges, the strings, locs and sources defined, the time so far)."""

    def fail(self, reason: str, offset: int | None, event_index: int | None = None) -> NoReturn:
        raise TraceFormatError(
            reason, source=self.name, offset=offset, event_index=event_index
        ) from None

    # Records other than valid events of known kinds

    def other_record(self, record: Any, start: int) -> list[Any] | None:
        """Handle a definition, footer, unknown kind or bad event; return an event to keep."""
        if self.footer is not None:
            self.fail("data after the footer", start)
        if isinstance(record, dict):
            self.read_footer(record, start)
            return None
        if type(record) is not list or not record:
            self.fail(f"expected a record (a non-empty array), got {describe(record)}", start)
        code = record[0]
        if type(code) is not int:
            self.fail(f"record kind must be an int, got {describe(code)}", start)
        known = code in self.event_codes
        if known and code in RULES:
            return self.checked_event(record, start)
        if known and code in COMPOUND_RULES:
            self.bad_compound(record, start)
        if code == wire.DEFINE_STRING:
            self.define_string(record, start)
        elif code == wire.DEFINE_LOC:
            self.define_loc(record, start)
        elif code == wire.EMBED_SOURCE:
            self.embed_source(record, start)
        elif code == wire.DEFINE_LOC_CALLER:
            self.define_loc_caller(record, start)
        elif code == wire.DEFINE_DIGEST and self.version >= wire.DIGESTS_SINCE:
            self.define_digest(record, start)
        elif self.lenient and code in wire.EVENT_CODES:
            self.skip_event(record, start)
        elif not (self.lenient and code in wire.DEFINITION_CODES):
            self.fail(f"unknown record kind {code}{self.added_later(code)}", start)
        return None

    def added_later(self, code: int) -> str:
        """For an error: what ``code`` is in a later version than this file's, if anything."""
        if code in COMPOUNDS:
            since, what = COMPOUNDS_SINCE, "a compound record"
        elif code == wire.DEFINE_DIGEST:
            since, what = wire.DIGESTS_SINCE, "a digest, a definition record"
        elif code in RULES and Kind(code) in KIND_SINCE:
            since, what = KIND_SINCE[Kind(code)], f"{Kind(code).name}, an event kind"
        else:
            return ""
        if self.version is None or self.version >= since:
            return ""
        return (
            f" ({what} of format {since[0]}.{since[1]} and later;"
            f" this file is {self.version[0]}.{self.version[1]})"
        )

    def checked_event(self, record: list[Any], start: int) -> list[Any]:
        """``record`` without the extra fields a newer minor version may add, if it is then
        valid; otherwise fail, naming the first thing wrong with it."""
        kind = Kind(record[0])
        rules = RULES[kind]
        index = self.event_records
        if len(record) != 1 + len(rules):
            if not (self.lenient and len(record) > 1 + len(rules)):
                self.fail(
                    f"{kind.name} has {len(record) - 3} fields, expected {len(rules) - 2}",
                    start,
                    index,
                )
            del record[1 + len(rules) :]
        for value, (name, wanted, range_) in zip(record[1:], rules, strict=True):
            if type(value) is not wanted:
                self.fail(
                    f"{kind.name} {name} is {describe(value)}, expected {wanted.__name__}",
                    start,
                    index,
                )
            problem = self.range_problem(range_, value)
            if problem is not None:
                self.fail(f"{kind.name} {name} {problem}", start, index)
        return record

    def bad_compound(self, record: list[Any], start: int) -> NoReturn:
        """Fail, naming the first thing wrong with compound ``record``, which its check
        refused (the event index is its first event's). Unlike an event, a compound
        takes no extra fields, even from a newer minor version: its components' fields
        are concatenated, so one added to a component would shift all after it."""
        code = record[0]
        rules = COMPOUND_RULES[code]
        index = self.event_records
        if len(record) != 1 + len(rules):
            self.fail(
                f"{compound_name(code)} has {len(record) - 3} fields, expected {len(rules) - 2}",
                start,
                index,
            )
        for value, (name, wanted, range_) in zip(record[1:], rules, strict=True):
            if type(value) is not wanted:
                self.fail(
                    f"{compound_name(code)}: {name} is {describe(value)},"
                    f" expected {wanted.__name__}",
                    start,
                    index,
                )
            problem = self.range_problem(range_, value)
            if problem is not None:
                self.fail(f"{compound_name(code)}: {name} {problem}", start, index)
        self.fail(f"{compound_name(code)} is invalid", start, index)

    def range_problem(self, range_: str | None, value: Any) -> str | None:
        """What is wrong with a field ``value`` checked against ``range_`` (see RULES)."""
        if range_ == "time" and value < 0:
            return f"goes back by {-value} cycles"
        if range_ == "time" and value > MAX_CYCLES:
            return f"{value} is past the {MAX_CYCLES}-cycle limit (implausible)"
        if range_ in ("int64", "count", "addr", "id", "id_or_none") and not (
            -INT64_MAX - 1 <= value <= INT64_MAX
        ):
            return f"{brief(value)} exceeds the int64 range"
        if range_ == "count" and value < 0:
            return f"{value} is negative"
        if range_ == "addr" and value < -1:
            return f"{value} is neither an address nor -1"
        if range_ == "cycles" and not 0 <= value <= MAX_CYCLES:
            return f"{brief(value)} is outside 0..{MAX_CYCLES} cycles"
        if range_ == "id" and value < 0:
            return f"{value} is negative (no such id)"
        if range_ == "id_or_none" and value < -1:
            return f"{value} is neither an id nor -1 (none)"
        if range_ in ("id", "id_or_none") and value > self.max_id:
            return (
                f"{value} is not a possible id: ids count up from 0, one per command issued,"
                f" and {self.chunks.total} bytes hold at most {self.max_id + 1:,} events"
            )
        if range_ == "pe" and not 0 <= value < self.n_pes:
            return f"{value} is outside the mesh of {self.n_pes} PEs"
        if range_ == "channel" and not 0 <= value < self.n_channels:
            return f"{value} is not in the header's {self.n_channels} channels"
        if range_ == "string" and not 0 <= value < len(self.strings):
            return f"is string id {value}, not defined yet ({len(self.strings)} defined)"
        if range_ == "loc" and not -1 <= value < len(self.locs):
            return f"is loc id {value}, not defined yet ({len(self.locs)} defined)"
        if range_ == "shape" and not is_shape(value):
            return f"{describe(value)} is not a list of non-negative int64s"
        return None

    def skip_event(self, record: list[Any], start: int) -> None:
        """Apply the time of an event of a kind newer than this reader, and drop it."""
        if len(record) < 3 or type(record[1]) is not int or type(record[2]) is not int:
            self.fail(f"event of unknown kind {record[0]} lacks an int time and pe", start)
        if record[1] < 0:
            self.fail(f"event of unknown kind {record[0]} goes back in time", start)
        self.time += record[1]
        if self.time > MAX_CYCLES:
            self.fail(f"time {self.time} is past the {MAX_CYCLES}-cycle limit", start)
        self.skipped += 1

    def define_string(self, record: list[Any], start: int) -> None:
        if len(record) != 2 or not isinstance(record[1], str):
            self.fail("a string definition is [0, str]", start)
        self.check_text_size(record[1], wire.MAX_STRING_BYTES, "interned string", start)
        self.strings.append(record[1])
        self.defined(len(self.strings), len(self.locs))

    def define_loc(self, record: list[Any], start: int) -> None:
        if (
            len(record) != 4
            or not isinstance(record[1], str)
            or type(record[2]) is not int
            or not isinstance(record[3], str)
        ):
            self.fail("a loc definition is [100, file, line, function]", start)
        self.check_text_size(record[1], wire.MAX_STRING_BYTES, "loc file", start)
        self.check_text_size(record[3], wire.MAX_STRING_BYTES, "loc function", start)
        self.locs.append(SourceLoc(record[1], record[2], record[3]))
        self.defined(len(self.strings), len(self.locs))

    def define_loc_caller(self, record: Any, start: int) -> None:
        """``[102, loc_id, caller_id]``: the kernel line that called into the helper at
        ``loc_id``; both defined already, the caller first, each loc given one at most."""
        if len(record) != 3 or type(record[1]) is not int or type(record[2]) is not int:
            self.fail("a loc caller definition is [102, loc_id, caller_loc_id]", start)
        lid, cid, n = record[1], record[2], len(self.locs)
        if not 0 <= lid < n:
            self.fail(f"loc caller definition for loc id {lid}, not defined yet", start)
        if not 0 <= cid < lid:
            self.fail(f"loc {lid}'s caller is loc id {cid}, not a loc defined before it", start)
        if self.locs[lid].caller is not None:
            self.fail(f"loc {lid} is given a caller twice", start)
        self.locs[lid] = self.locs[lid]._replace(caller=self.locs[cid])

    def define_digest(self, record: Any, start: int) -> None:
        """``[103, future, min, max, mean, nan, inf, crc32]`` (1.5): one digest per future."""
        problem = digest_problem(record)
        if problem is None and record[1] in self.digests:
            problem = f"digest of future {record[1]} written twice"
        if problem is not None:
            self.fail(problem, start)
        self.digests[record[1]] = Digest.from_record(record)

    def embed_source(self, record: list[Any], start: int) -> None:
        if len(record) != 3 or not isinstance(record[1], str) or not isinstance(record[2], str):
            self.fail("a source record is [101, file, text]", start)
        self.check_text_size(record[1], wire.MAX_STRING_BYTES, "source file name", start)
        self.check_text_size(record[2], wire.MAX_SOURCE_BYTES, "source text", start)
        if record[1] in self.sources:
            self.fail(f"source of {brief(record[1])} embedded twice", start)
        self.sources[record[1]] = record[2]

    def check_text_size(self, text: str, limit: int, what: str, start: int) -> None:
        if len(text) > limit or (len(text) * 4 > limit and len(text.encode("utf-8")) > limit):
            self.fail(f"{what} longer than the {limit}-byte limit", start)

    # Header and footer

    def read_header(self, header: Any, start: int) -> None:
        if not isinstance(header, dict) or header.get("format") != wire.FORMAT_NAME:
            self.fail(
                f"not a kbt trace (expected a header map with format {wire.FORMAT_NAME!r})",
                start,
            )
        version = header.get("version")
        if (
            type(version) is not list
            or len(version) != 2
            or any(type(v) is not int or v < 0 for v in version)
        ):
            self.fail(f"header version must be [major, minor], got {brief(version)}", start)
        major, minor = version
        ours_major, ours_minor = wire.FORMAT_VERSION
        if major > ours_major:
            self.fail(
                f"format version {major}.{minor} is newer than this reader"
                f" ({ours_major}.x); upgrade kbdebug",
                start,
            )
        if major < ours_major:
            self.fail(f"format version {major}.{minor} is not supported", start)
        self.lenient = minor > ours_minor
        if not isinstance(header.get("producer"), str):
            self.fail("header producer must be a str", start)
        for key in wire.RUN_HEADER_KEYS:
            if key not in header:
                self.fail(f"header lacks {key!r}", start)
        if not isinstance(header["config"], dict):
            self.fail("header config must be a map", start)
        mesh = header["mesh"]
        if type(mesh) is not list or len(mesh) != 2 or any(type(v) is not int for v in mesh):
            self.fail(f"header mesh must be [rows, cols], got {brief(mesh)}", start)
        rows, cols = mesh
        if rows < 1 or cols < 1 or rows * cols > wire.MAX_PES:
            self.fail(f"header mesh {rows}x{cols} is outside 1..{wire.MAX_PES} PEs", start)
        self.n_pes = rows * cols
        self.read_channels(header["channels"], start)
        self.read_launch(header["launch"], start)
        if (major, minor) >= wire.HEADER_KEYS_SINCE["hbm_stacks"] and "hbm_stacks" in header:
            self.read_stacks(header["hbm_stacks"], start)
        if (major, minor) >= wire.DIGESTS_SINCE and "tensors" in header:
            try:
                self.tensors = read_tensors(header["tensors"])
            except ValueError as e:
                self.fail(str(e), start)
        self.header = header
        self.version = (major, minor)
        self.checks, self.defined = make_checks(self.n_pes, self.n_channels, self.max_id)
        # Codes added by a later version than the file's (compound records in 1.2, READS
        # in 1.3) are unknown in it.
        self.event_codes = event_codes(self.version)
        for code in list(self.checks):
            if code not in self.event_codes:
                del self.checks[code]
        self.fast = self.on_tables is not None and not self.lenient

    def read_channels(self, channels: Any, start: int) -> None:
        if type(channels) is not list:
            self.fail("header channels must be an array", start)
        for i, channel in enumerate(channels):
            problem = None
            if not isinstance(channel, dict):
                problem = "is not a map"
            elif channel.get("id") != i or type(channel.get("id")) is not int:
                problem = f"has id {brief(channel.get('id'))}, expected its position {i}"
            elif type(channel.get("pe")) is not int or not 0 <= channel["pe"] < self.n_pes:
                problem = f"has pe {brief(channel.get('pe'))} outside the mesh"
            elif channel.get("kind") not in CHANNEL_KINDS and not (
                self.lenient and isinstance(channel.get("kind"), str)
            ):
                problem = f"has kind {brief(channel.get('kind'))}, not one of {CHANNEL_KINDS}"
            elif type(channel.get("index")) is not int or channel["index"] < 0:
                problem = f"has index {brief(channel.get('index'))}"
            elif not isinstance(channel.get("name"), str):
                problem = "has no str name"
            if problem is not None:
                self.fail(f"header channel {i} {problem}", start)
        self.n_channels = len(channels)

    def read_stacks(self, stacks: Any, start: int) -> None:
        """The header's hbm_stacks (1.4): the PEs of each shared HBM stack, each PE of the
        mesh on one stack at most (so at most as many stacks as PEs)."""
        seen: set[int] = set()
        good = type(stacks) is list and 1 <= len(stacks) <= self.n_pes
        for pes in stacks if good else ():
            if type(pes) is not list or not pes:
                good = False
                break
            for pe in pes:
                if type(pe) is not int or not 0 <= pe < self.n_pes or pe in seen:
                    good = False
                    break
                seen.add(pe)
        if not good:
            self.fail(
                f"header hbm_stacks must be 1 to {self.n_pes} non-empty lists of PEs of the "
                f"mesh, each PE on one stack at most; got {brief(stacks)}",
                start,
            )

    def read_launch(self, launch: Any, start: int) -> None:
        if (
            not isinstance(launch, dict)
            or not isinstance(launch.get("kernel"), str)
            or type(launch.get("grid")) is not list
            or any(type(v) is not int or v < 0 for v in launch["grid"])
            or type(launch.get("args")) is not list
            or any(not isinstance(v, str) for v in launch["args"])
        ):
            self.fail(
                'header launch must be {"kernel": str, "grid": [int, ...], "args": [str, ...]}',
                start,
            )

    def read_footer(self, footer: dict[str, Any], start: int) -> None:
        status = footer.get("status")
        if status not in STATUSES:
            self.fail(f"footer status {brief(status)} is not one of {STATUSES}", start)
        count = footer.get("events")
        if type(count) is not int or count != self.event_records:
            self.fail(
                f"footer says {brief(count)} events, the trace has {self.event_records}", start
            )
        end_time = footer.get("end_time")
        if type(end_time) is not int or not self.time <= end_time <= MAX_CYCLES:
            self.fail(
                f"footer end_time {brief(end_time)} must be an int from the last event's time"
                f" ({self.time}) to {MAX_CYCLES}",
                start,
            )
        error = footer.get("error")
        if error is not None and not isinstance(error, str):
            self.fail(f"footer error must be a str or nil, got {describe(error)}", start)
        error_loc = footer.get("error_loc")
        if error_loc is not None:
            if (
                type(error_loc) is not list
                or len(error_loc) != 3
                or not isinstance(error_loc[0], str)
                or type(error_loc[1]) is not int
                or not isinstance(error_loc[2], str)
            ):
                self.fail("footer error_loc must be [file, line, function] or nil", start)
            error_loc = SourceLoc(*error_loc)
        self.footer = {
            "status": status,
            "events": count,
            "end_time": end_time,
            "error": error,
            "error_loc": error_loc,
        }
        if "check" in footer:
            self.footer["check"] = self.read_check(footer["check"], start)

    def read_check(self, check: Any, start: int) -> dict[str, Any] | None:
        """The footer's output check verdict (nil, or a map of exactly ok, message and
        block), its strings bounded (they are shown, escaped, by diff and report)."""
        if check is None:
            return None
        if (
            not isinstance(check, dict)
            or set(check) != set(wire.CHECK_KEYS)
            or type(check["ok"]) is not bool
            or any(
                check[k] is not None and not isinstance(check[k], str) for k in wire.CHECK_KEYS[1:]
            )
        ):
            self.fail(
                'footer check must be {"ok": bool, "message": str or nil, "block": str or nil}',
                start,
            )
        for key, limit in (
            ("message", wire.MAX_CHECK_MESSAGE_BYTES),
            ("block", wire.MAX_CHECK_BLOCK_BYTES),
        ):
            text = check[key]
            if text is not None and len(text) > limit // 4 and len(text.encode("utf-8")) > limit:
                self.fail(f"footer check {key} longer than the {limit}-byte limit", start)
        return {key: check[key] for key in wire.CHECK_KEYS}
