"""The error a .kbt reader raises for anything that is not a valid trace."""

from __future__ import annotations


class TraceFormatError(ValueError):
    """A trace that is not a well-formed .kbt file, naming what was wrong and where.

    ``source`` is the path (or ``"<bytes>"``), ``offset`` the byte offset of the
    offending record (or None), ``event_index`` the 0-based index among the
    trace's event records of the offending event (None if the error is not in an
    event record), ``reason`` the bare description.
    """

    def __init__(
        self,
        reason: str,
        *,
        source: str = "<trace>",
        offset: int | None = None,
        event_index: int | None = None,
    ) -> None:
        self.reason = reason
        self.source = source
        self.offset = offset
        self.event_index = event_index
        where = []
        if event_index is not None:
            where.append(f"event {event_index}")
        if offset is not None:
            where.append(f"at byte {offset}")
        prefix = f"{source}: " + (" ".join(where) + ": " if where else "")
        super().__init__(prefix + reason)
