"""TraceWriter: the Recorder that streams a run into a .kbt file (layout in traces/FORMAT.md)."""

from __future__ import annotations

import errno
import io
import operator
import os
from typing import IO, Any

import msgpack

from emulator.trace import wire
from emulator.trace.compound import CompoundWriting, compound_label
from emulator.trace.digests import Digest
from emulator.trace.schema import COMPOUNDS, FIELDS, STATUSES, Kind, SourceLoc

# Per kind: (its code as a plain int, number of fields, whether any field is interned,
# positions of its str fields, positions of its loc fields).
_SPECS: dict[Kind, tuple[int, int, bool, tuple[int, ...], tuple[int, ...]]] = {
    kind: (
        int(kind),
        len(fields),
        any(tag in ("str", "loc") for _, tag in fields),
        tuple(i for i, (_, tag) in enumerate(fields) if tag == "str"),
        tuple(i for i, (_, tag) in enumerate(fields) if tag == "loc"),
    )
    for kind, fields in FIELDS.items()
}


_ISSUE, _OP_LOG, _WAIT_BEGIN = int(Kind.ISSUE), int(Kind.OP_LOG), int(Kind.WAIT_BEGIN)


def _pack_default(obj: Any) -> int:
    """Lets integer-like values (numpy integers) through msgpack as plain ints."""
    try:
        return operator.index(obj)
    except TypeError:
        raise TypeError(f"cannot write a {type(obj).__name__} ({obj!r}) to a trace") from None


def _canonical(value: Any, where: str) -> Any:
    """``value`` with every map's keys sorted, so equal headers pack to equal bytes."""
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"{where} has a non-string key {key!r}")
        return {key: _canonical(value[key], f"{where}.{key}") for key in sorted(value)}
    if isinstance(value, list | tuple):
        return [_canonical(item, f"{where}[{i}]") for i, item in enumerate(value)]
    return value


def _fit(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (on a character boundary)."""
    if len(text) * 4 <= limit:
        return text
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")


def check_record(check: dict[str, Any]) -> dict[str, Any]:
    """The footer's ``check`` map of a verdict: ``ok`` a bool, ``message`` and ``block``
    one line each (control characters made spaces), cut to the format's limits."""
    ok = check.get("ok")
    if type(ok) is not bool:
        raise TypeError('check "ok" must be a bool')
    out: dict[str, Any] = {"ok": ok}
    for key, limit in (
        ("message", wire.MAX_CHECK_MESSAGE_BYTES),
        ("block", wire.MAX_CHECK_BLOCK_BYTES),
    ):
        text = check.get(key)
        if text is not None and not isinstance(text, str):
            raise TypeError(f"check {key!r} must be a str or None")
        if text is not None:
            text = _fit(
                " ".join("".join(c if c.isprintable() else " " for c in text).split()), limit
            )
        out[key] = text
    return out


class TraceWriter(CompoundWriting):
    """Writes header, sources, events and footer of one run as a .kbt stream.

    ``target`` is a path (the file is created, and closed by ``end``/``close``) or a
    binary file object (flushed but left open). Records are collected and packed
    in batches into a buffer that is written out whenever it holds ``flush_bytes``
    bytes or more, so a process killed mid-run leaves a trace readable up to the
    last write, at most about ``flush_bytes`` behind. The same calls always
    produce the same bytes.

    ``emit`` checks the kind, the field count and that time does not go back
    (raising ValueError); field types are checked by the reader, so emulator
    tests should read back what they write.

    ``emit_compound`` writes a run of same-cycle events as one compound record
    (format 1.2, ``schema.COMPOUNDS``) when ``compound`` is true, the default
    from format 1.2 on; otherwise it writes them as their events, one record
    each. Either way the file holds the same events and the footer counts them.
    A READS (format 1.3) is always an event record of its own, through ``emit``:
    no compound holds one (a compute's ISSUE compound and its READS as one record
    would save some 4 bytes of 3 % of a decode run's events, see traces/FORMAT.md).

    A write the file refuses (a full disk) raises its OSError once, keeps it in
    ``write_error`` and fails the writer: later calls write nothing more, so a
    caller that catches something else (the kernel's error, say) can still tell.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | IO[bytes],
        *,
        producer: str = "kbdebug 0.1.0",
        flush_bytes: int = 65536,
        compound: bool | None = None,
        hold_footer: bool = False,
    ) -> None:
        if not isinstance(producer, str):
            raise TypeError('"producer" must be a str')
        if not isinstance(flush_bytes, int) or flush_bytes < 0:
            raise ValueError('"flush_bytes" must be an int >= 0')
        if isinstance(target, str | os.PathLike):
            self._file: IO[bytes] = open(target, "wb", buffering=0)
            self._owns_file = True
        elif isinstance(target, io.TextIOBase) or not hasattr(target, "write"):
            raise TypeError('"target" must be a path or a binary file object')
        else:
            self._file = target
            self._owns_file = False
        self.producer = producer
        self.flush_bytes = flush_bytes
        # With hold_footer, end() writes out everything but the footer and keeps it for
        # finish() (the output check's verdict), or for close() without one.
        self._hold_footer = hold_footer
        self._held: dict[str, Any] | None = None
        # Records wait in _pending and are packed together (one C call per batch is
        # cheaper than one per record; batches of at most 256 keep the pending tuples
        # in cache), then wait in _buf for a write.
        self._pending: list[Any] = []
        self._batch = min(max(flush_bytes // 16, 1), 256)
        self._packed = 0  # records moved from _pending to _buf
        self._not_events = 0  # header, definition and footer records among them
        self._buf = bytearray()
        self._pack = msgpack.Packer(default=_pack_default).pack
        self._time = 0
        self._strings: dict[str, int] = {}
        self._locs: dict[SourceLoc | None, int] = {None: -1}
        self._sources: dict[str, str] = {}
        self._digests = False  # the header makes the file 1.5: digests may be written
        # -> "open" (begin) -> "ended" (end; "held" first with hold_footer) -> "closed";
        # or "failed"
        self._state = "new"
        # What emit looks a kind up in: _SPECS between begin and end (the only time emit
        # is allowed), empty otherwise, so one lookup checks both (see _open).
        self._specs: dict[Kind, tuple[int, int, bool, tuple[int, ...], tuple[int, ...]]] = {}
        # What emit_compound checks instead (set with _specs by _open).
        self._accepting = False
        self.write_error: OSError | None = None
        self._writing = False
        self._init_compounds(wire.FORMAT_VERSION >= (1, 2) if compound is None else bool(compound))

    @property
    def _open(self) -> bool:
        """True between begin and end: the only time emit is allowed."""
        return self._specs is _SPECS

    @_open.setter
    def _open(self, value: bool) -> None:
        self._specs = _SPECS if value else {}
        self._accepting = bool(value)

    # Recorder protocol

    def begin(self, header: dict[str, Any]) -> None:
        """Write the header: format, version, producer, then ``header``'s keys.

        Raises ValueError if called twice or ``header`` lacks a run key or uses
        one of the writer's own keys, TypeError if a value cannot be written.
        """
        if self._state != "new":
            raise ValueError(f"begin() called on a writer that is already {self._state}")
        missing = [key for key in wire.RUN_HEADER_KEYS if key not in header]
        if missing:
            raise ValueError(f"header lacks {', '.join(map(repr, missing))}")
        taken = [key for key in wire.OWN_HEADER_KEYS if key in header]
        if taken:
            raise ValueError(f"header keys {', '.join(map(repr, taken))} belong to the writer")
        record = {
            "format": wire.FORMAT_NAME,
            "version": list(wire.written_version(header)),
            "producer": self.producer,
        }
        record.update(_canonical(header, "header"))
        self._digests = tuple(record["version"]) >= wire.DIGESTS_SINCE
        self._write_record(record)
        self._state = "open"
        self._open = True
        self.flush()

    def add_source(self, file: str, text: str) -> None:
        """Embed ``text``, the source of the project-relative ``file``.

        A second call for the same file with the same text is ignored; with another
        text it raises ValueError, as does a text over ``MAX_SOURCE_BYTES``.
        """
        self._check_open("add_source")
        if not isinstance(file, str) or not isinstance(text, str):
            raise TypeError("add_source() takes a str file and a str text")
        known = self._sources.get(file)
        if known is not None:
            if known != text:
                raise ValueError(f"source of {file!r} added twice with different texts")
            return
        if len(text.encode("utf-8")) > wire.MAX_SOURCE_BYTES:
            raise ValueError(f"source of {file!r} exceeds {wire.MAX_SOURCE_BYTES} bytes")
        self._sources[file] = text
        self._write_record((wire.EMBED_SOURCE, _fit(file, wire.MAX_STRING_BYTES), text))

    def emit(self, kind: Kind, time: int, pe: int, *fields: Any) -> None:
        """Write one event; its fields are those of ``schema.FIELDS[kind]``, in order.

        Raises ValueError for an unknown kind, a wrong number of fields, a time
        before the previous event's or a writer not between begin and end.
        """
        try:
            spec = self._specs[kind]
        except (KeyError, TypeError):
            raise self._rejected(kind, time, fields) from None
        last = self._time
        if type(time) is not int or time < last or len(fields) != spec[1]:
            raise self._rejected(kind, time, fields)
        # The code as a plain int, not the Kind member: a tuple of plain values is
        # dropped from the cyclic collector's watch at its first pass, so thousands of
        # pending events do not make the collector scan the emulator's whole heap.
        code = spec[0]
        if not spec[2]:
            record = (code, time - last, pe) + fields
        elif code == _WAIT_BEGIN:  # a wait that stalls
            future, loc = fields
            loc_id = self._locs.get(loc)
            if loc_id is None:
                loc_id = self._define_loc(loc)
            record = (code, time - last, pe, future, loc_id)
        elif code == _ISSUE:  # the commonest interned kinds, interned inline
            cmd, op, future, addr, nbytes, shape, dtype, blocking, loc = fields
            strings = self._strings
            op_id = strings.get(op)
            if op_id is None:
                op_id = self._define_string(op)
            dtype_id = strings.get(dtype)
            if dtype_id is None:
                dtype_id = self._define_string(dtype)
            loc_id = self._locs.get(loc)
            if loc_id is None:
                loc_id = self._define_loc(loc)
            record = (code, time - last, pe, cmd, op_id, future, addr, nbytes, shape)
            record += (dtype_id, blocking, loc_id)
        elif code == _OP_LOG:
            category, op = fields
            strings = self._strings
            category_id = strings.get(category)
            if category_id is None:
                category_id = self._define_string(category)
            op_id = strings.get(op)
            if op_id is None:
                op_id = self._define_string(op)
            record = (code, time - last, pe, category_id, op_id)
        else:
            record = (code, time - last, pe, *self._intern(fields, spec[3], spec[4]))
        pending = self._pending
        pending.append(record)
        self._time = time
        if len(pending) >= self._batch:
            self._pack_pending()

    def add_digest(self, digest: Digest) -> None:
        """Write the digest of a future's tensor (format 1.5, a definition record).

        Written only in a file of format 1.5 or later, which a header with ``tensors``
        makes it; in an older one (no ``tensors``, or a writer of an older version) it is
        dropped, as a writer of that version would: an older reader refuses a digest in a
        file of its own version. Raises ValueError if the writer is not open.
        """
        self.add_digest_record(digest.record())

    def add_digest_record(self, record: tuple[int, ...]) -> None:
        """``add_digest`` of the digest whose record is ``record``
        (``digests.digest_record``'s): the emulator's path, with no Digest made."""
        if not self._accepting:  # the writer is not between begin and end
            self._check_open("add_digest")
        if self._digests:
            pending = self._pending
            pending.append(record)
            self._not_events += 1
            if len(pending) >= self._batch:
                self._pack_pending()

    def end(self, footer: dict[str, Any]) -> None:
        """Write the footer (``footer`` plus the event count), flush, and close an owned file.

        ``footer`` has "status" (one of ``schema.STATUSES``), "end_time" (an int, not
        before the last event), "error" (str or None) and "error_loc" (SourceLoc or
        None). Raises ValueError or TypeError if it does not. On a writer that an
        unwritable event already failed, ``end`` only closes: that error was raised.
        """
        if self._state == "failed":
            self.close()
            return
        self._check_open("end")
        unknown = sorted(set(footer) - set(wire.FOOTER_KEYS))
        if unknown:
            raise ValueError(f"footer has unknown keys {unknown}")
        status = footer.get("status")
        if status not in STATUSES:
            raise ValueError(f"footer status {status!r} is not one of {STATUSES}")
        end_time = footer.get("end_time")
        if type(end_time) is not int or end_time < self._time:
            raise ValueError(
                f"footer end_time {end_time!r} must be an int >= the last event time {self._time}"
            )
        if end_time > wire.MAX_CYCLES:
            raise self._past_max_cycles(end_time)
        error = footer.get("error")
        if error is not None and not isinstance(error, str):
            raise TypeError(f"footer error must be a str or None, not {type(error).__name__}")
        error_loc = footer.get("error_loc")
        if error_loc is not None:
            error_loc = list(self._checked_loc(error_loc))
        record = {
            "status": status,
            "events": self.events,
            "end_time": end_time,
            "error": None if error is None else _fit(error, wire.MAX_STRING_BYTES),
            "error_loc": error_loc,
        }
        self._open = False
        if self._hold_footer:
            self._held = record
            self._state = "held"
            self.flush()
            return
        self._write_record(record)
        self._state = "ended"
        self.close()

    @property
    def held(self) -> bool:
        """True between ``end`` and ``finish`` of a writer that holds its footer."""
        return self._state == "held"

    def finish(self, check: dict[str, Any] | None = None) -> None:
        """Write the held footer, with the run's output check verdict ``check`` if given
        (``{"ok": bool, "message": str or None, "block": str or None}``: what failed, in
        one line, and the slice of the first wrong block), and close. Does nothing unless
        the footer is held."""
        if self._state != "held" or self._held is None:
            return
        record = self._held
        if check is not None:
            record = {**record, "check": check_record(check)}
        self._held = None
        self._write_record(record)
        self._state = "ended"
        self.close()

    @property
    def events(self) -> int:
        """Events written so far, a compound record counting as its events (what the
        footer's "events" will say)."""
        return self._packed + len(self._pending) - self._not_events + self._folded

    # File handling

    @property
    def writing(self) -> bool:
        """True while records move to the buffer or the file. An exception raised then
        (by a signal handler) could write bytes twice or lose them, so a handler that
        stops the run should wait until this is False."""
        return self._writing

    def flush(self) -> None:
        """Write every record so far to the file and flush it."""
        if self.write_error is not None:
            return
        was_writing, self._writing = self._writing, True
        try:
            self._pack_pending(write=False)
            if self._buf:
                view = memoryview(self._buf)
                try:
                    while view:
                        written = self._file.write(view)
                        view = view[len(view) if written is None else written :]
                finally:
                    view.release()
                self._buf.clear()
            flush = getattr(self._file, "flush", None)
            if flush is not None:
                flush()
        except OSError as e:
            self.write_error = e
            self._open = False
            self._state = "failed"
            raise
        finally:
            self._writing = was_writing

    def close(self) -> None:
        """Flush and, if the writer opened the file, close it. Without ``end`` the trace
        has no footer and reads back as truncated. Closing twice does nothing."""
        if self._state == "closed":
            return
        if self._state == "held" and self._held is not None:
            # Closed without a verdict: the footer as the run ended.
            held, self._held = self._held, None
            self._write_record(held)
        self._open = False
        self._state = "closed"
        try:
            self.flush()
        finally:
            if self._owns_file:
                self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Internals

    def _write_record(self, record: Any) -> None:
        """Queue a record that is not an event (header, definition, footer)."""
        self._not_events += 1
        self._pending.append(record)
        if len(self._pending) >= self._batch:
            self._pack_pending()

    def _pack_pending(self, *, write: bool = True) -> None:
        """Pack the queued records into the buffer; write it out if it is full."""
        was_writing, self._writing = self._writing, True
        try:
            pending = self._pending
            if pending:
                if self._time > wire.MAX_CYCLES:  # once a batch: times never go back
                    raise self._past_max_cycles(self._time)
                # A msgpack array is its header followed by its items' encodings, so
                # dropping the header leaves the records back to back.
                try:
                    packed = self._pack(pending)
                except (TypeError, ValueError, OverflowError):
                    raise self._unpackable() from None
                header = 1 if len(pending) < 16 else 3 if len(pending) < 65536 else 5
                self._buf += memoryview(packed)[header:]
                self._packed += len(pending)
                pending.clear()
            if write and len(self._buf) >= self.flush_bytes:
                self.flush()
        finally:
            self._writing = was_writing

    def _past_max_cycles(self, time: int) -> OSError:
        """Fail the writer, as a refused write does, for a time no reader accepts."""
        self.write_error = OSError(
            errno.EOVERFLOW,
            f"the run's clock reached cycle {time:,}, past 2**53 ({wire.MAX_CYCLES:,}), "
            "the last a trace holds",
        )
        self._open = False
        self._state = "failed"
        return self.write_error

    def _unpackable(self) -> TypeError:
        """Write the records before the first one msgpack cannot pack, then fail the writer.

        Field types are not checked in emit() (that would slow every event down), so
        a bad value surfaces here, up to a batch later than the emit that passed it.
        """
        pending = self._pending
        good = 0
        reason = ""
        for good, record in enumerate(pending):  # noqa: B007
            try:
                self._pack(record)
            except (TypeError, ValueError, OverflowError) as exc:
                reason = str(exc)
                break
        bad = pending[good]
        self._pending = pending[:good]
        self._open = False
        self._state = "failed"
        self._pack_pending(write=False)
        if isinstance(bad, dict):
            what = "header or footer"
        elif bad[0] in COMPOUNDS:
            what = f"compound record ({compound_label(bad[0])})"
        elif bad[0] in _SPECS:
            what = f"{Kind(bad[0]).name} event"
        else:
            what = "definition record"
        return TypeError(f"{what} {bad!r} cannot be written to a trace: {reason}")

    def _check_open(self, call: str) -> None:
        if not self._open:
            state = "not begun" if self._state == "new" else self._state
            raise ValueError(f"{call}() called on a trace writer that is {state}")

    def _rejected(self, kind: Any, time: Any, fields: tuple[Any, ...]) -> Exception:
        """The error for an event emit() cannot write."""
        if not self._open:
            state = "not begun" if self._state == "new" else self._state
            return ValueError(f"emit() called on a trace writer that is {state}")
        try:
            name = Kind(kind).name
        except (ValueError, TypeError):
            return ValueError(f"unknown event kind {kind!r}")
        if type(time) is not int:
            return TypeError(f"{name} time must be an int, not {type(time).__name__}")
        if time < self._time:
            return ValueError(f"{name} at time {time} is before the previous event ({self._time})")
        return ValueError(f"{name} has {len(fields)} fields, expected {len(FIELDS[Kind(kind)])}")

    def _intern(
        self, fields: tuple[Any, ...], strs: tuple[int, ...], locs: tuple[int, ...]
    ) -> list[Any]:
        """``fields`` with str and loc values replaced by ids, defining new ones first."""
        out = list(fields)
        strings = self._strings
        for i in strs:
            sid = strings.get(out[i])
            if sid is None:
                sid = self._define_string(out[i])
            out[i] = sid
        known = self._locs
        for i in locs:
            lid = known.get(out[i])
            if lid is None:
                lid = self._define_loc(out[i])
            out[i] = lid
        return out

    def _define_string(self, text: Any) -> int:
        if not isinstance(text, str):
            raise TypeError(f"expected a str field, got {type(text).__name__} {text!r}")
        sid = len(self._strings)
        self._strings[text] = sid
        self._write_record((wire.DEFINE_STRING, _fit(text, wire.MAX_STRING_BYTES)))
        return sid

    def _define_loc(self, loc: Any) -> int:
        """Define ``loc`` (interned by value, its caller included); a caller is defined
        first, then ``[102, loc_id, caller_id]`` follows the loc's own definition."""
        file, line, function = self._checked_loc(loc)
        caller = loc[3] if len(loc) > 3 else None
        caller_id = -1
        if caller is not None:
            caller_id = self._locs.get(caller)
            if caller_id is None:
                caller_id = self._define_loc(caller)
        lid = len(self._locs) - 1  # the None entry is not a definition
        self._locs[loc] = lid
        self._write_record((wire.DEFINE_LOC, file, line, function))
        if caller is not None:
            self._write_record((wire.DEFINE_LOC_CALLER, lid, caller_id))
        return lid

    @staticmethod
    def _checked_loc(loc: Any) -> tuple[str, int, str]:
        if (
            not isinstance(loc, tuple)
            or len(loc) not in (3, 4)
            or not isinstance(loc[0], str)
            or type(loc[1]) is not int
            or not isinstance(loc[2], str)
            or (len(loc) == 4 and loc[3] is not None and not isinstance(loc[3], tuple))
        ):
            raise TypeError(
                f"expected a SourceLoc(file, line, function[, caller]) or None, got {loc!r}"
            )
        return (
            _fit(loc[0], wire.MAX_STRING_BYTES),
            loc[1],
            _fit(loc[2], wire.MAX_STRING_BYTES),
        )
