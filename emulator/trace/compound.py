"""Compound records (format 1.2, ``schema.COMPOUNDS``): how TraceWriter writes a run of
same-cycle events as one record, interning its strings and loc through a call-site cache."""

from __future__ import annotations

from typing import Any

from emulator.trace.schema import COMPOUNDS, FIELDS, Kind, expand

# Per compound code: (number of fields, events it stands for beyond the first).
_COMPOUND_SPECS: dict[int, tuple[int, int]] = {
    code: (sum(len(FIELDS[kind]) for kind in kinds), len(kinds) - 1)
    for code, kinds in COMPOUNDS.items()
}
# Compounds that begin with ISSUE + OP_LOG (their first 11 fields), and the wait on a
# finished future (WAIT_BEGIN's loc is its second field); the others hold only ints.
_ISSUE_LOGGED = frozenset(
    code for code, kinds in COMPOUNDS.items() if kinds[:2] == (Kind.ISSUE, Kind.OP_LOG)
)
_ISSUE_GRANTED = next(
    code for code, kinds in COMPOUNDS.items() if kinds[2:] == (Kind.CHAN_REQUEST, Kind.CHAN_GRANT)
)
_WAIT_DONE = next(
    code for code, kinds in COMPOUNDS.items() if kinds == (Kind.WAIT_BEGIN, Kind.WAIT_END)
)
# The release of a compute command's engine, which is also its completion: with
# _ISSUE_GRANTED, two thirds of the records of a typical run.
_RELEASE_COMPLETE = next(
    code for code, kinds in COMPOUNDS.items() if kinds == (Kind.CHAN_RELEASE, Kind.COMPLETE)
)
_ISSUE_GRANTED_FOLDED = _COMPOUND_SPECS[_ISSUE_GRANTED][1]
# Call-site entries kept at most (see CompoundWriting._site): a run has a few dozen.
_MAX_SITES = 4096
_INTS_ONLY = frozenset(
    code
    for code, kinds in COMPOUNDS.items()
    if all(tag == "int" for kind in kinds for _, tag in FIELDS[kind])
)
if set(COMPOUNDS) != _ISSUE_LOGGED | _INTS_ONLY | {_WAIT_DONE}:
    raise AssertionError("a compound of schema.COMPOUNDS has no write path in TraceWriter")


def compound_label(code: int) -> str:
    """The kinds compound record ``code`` stands for, as an error names them: ``ISSUE+OP_LOG``."""
    return "+".join(kind.name for kind in COMPOUNDS[code])


class CompoundWriting:
    """TraceWriter's ``emit_compound``: one compound record for a run of same-cycle events.

    A part of TraceWriter, kept apart from its streaming: it queues records on the
    writer's ``_pending`` and interns through its string and loc tables
    (``_define_string``, ``_define_loc``), as ``emit`` does.
    """

    def _init_compounds(self, compound: bool) -> None:
        """Start with no call site cached; ``compound`` false: write each event alone."""
        # id(loc) + id(op) -> a command call site's entry (see _site).
        self._sites = {}
        #: Whether emit_compound writes compound records (else their events, one each).
        self.compound = compound
        if not compound:
            self.emit_compound = self._emit_compound_expanded  # type: ignore[method-assign]
        # Events written as parts of compound records beyond one per record.
        self._folded = 0

    def emit_compound(self, code: int, time: int, pe: int, *fields: Any) -> None:
        """Write the events of ``schema.COMPOUNDS[code]`` (on one PE, in one cycle, one
        right after the other) as one record; ``fields`` are theirs, concatenated.

        Raises ValueError as ``emit`` does (an unknown code, a wrong number of fields).
        """
        last = self._time
        if type(time) is not int or time < last or not self._accepting:
            raise self._rejected_compound(code, time, fields)
        # The two commonest records first, each unpacked whole (which checks the field
        # count) and built as one tuple.
        if code == _ISSUE_GRANTED:  # every compute command on a free engine
            try:
                (
                    cmd,
                    op,
                    future,
                    addr,
                    nbytes,
                    shape,
                    dtype,
                    blocking,
                    loc,
                    category,
                    logged,
                    channel,
                    requested,
                    granted_channel,
                    granted,
                ) = fields
            except ValueError:
                raise self._rejected_compound(code, time, fields) from None
            # The emulator passes the same loc and str objects from one call site each
            # time: their ids come from the site's entry (one int-keyed lookup and
            # identity checks) instead of hashing the loc and four strings again.
            site = self._sites.get(id(loc) + id(op))
            if (
                site is None
                or site[0] is not loc
                or site[1] is not op
                or site[2] is not dtype
                or site[3] is not category
                or site[4] is not logged
            ):
                site = self._site(loc, op, dtype, category, logged)
            record = (
                code,
                time - last,
                pe,
                cmd,
                site[5],
                future,
                addr,
                nbytes,
                shape,
                site[6],
                blocking,
                site[7],
                site[8],
                site[9],
                channel,
                requested,
                granted_channel,
                granted,
            )
            folded = _ISSUE_GRANTED_FOLDED
        elif code == _RELEASE_COMPLETE:  # ... and its release, which completes it
            try:
                channel, cmd, completed, future = fields
            except ValueError:
                raise self._rejected_compound(code, time, fields) from None
            record = (code, time - last, pe, channel, cmd, completed, future)
            folded = 1
        else:
            try:
                width, folded = _COMPOUND_SPECS[code]
            except (KeyError, TypeError):
                raise self._rejected_compound(code, time, fields) from None
            if len(fields) != width:
                raise self._rejected_compound(code, time, fields)
            if code in _ISSUE_LOGGED:  # a load, store, send or receive: as above
                cmd, op, future, addr, nbytes, shape, dtype, blocking, loc, category, logged = (
                    fields[:11]
                )
                site = self._site_of(loc, op, dtype, category, logged)
                record = (
                    code,
                    time - last,
                    pe,
                    cmd,
                    site[5],
                    future,
                    addr,
                    nbytes,
                    shape,
                    site[6],
                    blocking,
                    site[7],
                    site[8],
                    site[9],
                ) + fields[11:]
            elif code == _WAIT_DONE:
                future, loc, ended, stalled = fields
                loc_id = self._locs.get(loc)
                if loc_id is None:
                    loc_id = self._define_loc(loc)
                record = (code, time - last, pe, future, loc_id, ended, stalled)
            else:
                record = (code, time - last, pe) + fields
        pending = self._pending
        pending.append(record)
        self._time = time
        self._folded += folded
        if len(pending) >= self._batch:
            self._pack_pending()

    def _site_of(
        self, loc: Any, op: Any, dtype: Any, category: Any, logged: Any
    ) -> tuple[Any, ...]:
        """The entry of a command's call site, from the cache when it holds these very
        objects (emit_compound inlines this for compute commands, the hot path)."""
        site = self._sites.get(id(loc) + id(op))
        if (
            site is None
            or site[0] is not loc
            or site[1] is not op
            or site[2] is not dtype
            or site[3] is not category
            or site[4] is not logged
        ):
            site = self._site(loc, op, dtype, category, logged)
        return site

    def _site(self, loc: Any, op: Any, dtype: Any, category: Any, logged: Any) -> tuple[Any, ...]:
        """The entry of a command's call site: (loc, op, dtype, category, logged) and
        their ids (interned by value, so the bytes are those of a lookup by value)."""
        strings = self._strings
        ids = []
        for text in (op, dtype):
            sid = strings.get(text)
            ids.append(self._define_string(text) if sid is None else sid)
        loc_id = self._locs.get(loc)
        ids.append(self._define_loc(loc) if loc_id is None else loc_id)
        for text in (category, logged):
            sid = strings.get(text)
            ids.append(self._define_string(text) if sid is None else sid)
        if len(self._sites) >= _MAX_SITES:  # locs made anew for every call: keep none
            self._sites.clear()
        site = (loc, op, dtype, category, logged, *ids)
        self._sites[id(loc) + id(op)] = site
        return site

    def _emit_compound_expanded(self, code: int, time: int, pe: int, *fields: Any) -> None:
        """emit_compound of a writer that writes no compound records: one per event."""
        spec = _COMPOUND_SPECS.get(code) if type(code) is int else None
        if not self._open or spec is None or len(fields) != spec[0]:
            raise self._rejected_compound(code, time, fields)
        for event in expand(code, time, pe, fields):
            self.emit(*event)

    def _rejected_compound(self, code: Any, time: Any, fields: tuple[Any, ...]) -> Exception:
        """The error for a compound record emit_compound cannot write."""
        if not self._open:
            state = "not begun" if self._state == "new" else self._state
            return ValueError(f"emit_compound() called on a trace writer that is {state}")
        if type(code) is not int or code not in COMPOUNDS:
            return ValueError(f"unknown compound code {code!r}")
        name = compound_label(code)
        if type(time) is not int:
            return TypeError(f"{name} time must be an int, not {type(time).__name__}")
        if time < self._time:
            return ValueError(f"{name} at time {time} is before the previous event ({self._time})")
        return ValueError(f"{name} has {len(fields)} fields, expected {_COMPOUND_SPECS[code][0]}")
