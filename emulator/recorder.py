"""The recorder interface every emulator event goes through, and an in-memory recorder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from emulator.trace.schema import COMPOUNDS, FIELDS, Kind


def _compound_code(*kinds: Kind) -> int:
    return next(code for code, parts in COMPOUNDS.items() if parts == kinds)


# Compound record codes by what they stand for (schema.COMPOUNDS), for emit sites.
#: A command issued and its op logged.
ISSUE_LOGGED = _compound_code(Kind.ISSUE, Kind.OP_LOG)
#: A compute command issued to a free engine: logged, requested, granted.
ISSUE_GRANTED = _compound_code(Kind.ISSUE, Kind.OP_LOG, Kind.CHAN_REQUEST, Kind.CHAN_GRANT)
#: A compute command issued to a busy engine: logged, requested.
ISSUE_REQUESTED = _compound_code(Kind.ISSUE, Kind.OP_LOG, Kind.CHAN_REQUEST)
#: A load or receive issued: logged, its scratch buffer allocated.
ISSUE_ALLOCATED = _compound_code(Kind.ISSUE, Kind.OP_LOG, Kind.SCRATCH_ALLOC)
#: A release that is also the command's completion.
RELEASE_COMPLETE = _compound_code(Kind.CHAN_RELEASE, Kind.COMPLETE)
#: A release and the grant of the channel to the next command.
RELEASE_GRANT = _compound_code(Kind.CHAN_RELEASE, Kind.CHAN_GRANT)
#: A wait on a finished future (stalled 0).
WAIT_DONE = _compound_code(Kind.WAIT_BEGIN, Kind.WAIT_END)

# Per compound code: (kind, number of fields) of each component, in order.
_PARTS: dict[int, tuple[tuple[Kind, int], ...]] = {
    code: tuple((kind, len(FIELDS[kind])) for kind in kinds) for code, kinds in COMPOUNDS.items()
}


class Recorder(Protocol):
    """Receives a run: its header, its source files, every event, then its footer.

    ``begin`` is called once before any event with the launch header (see
    ``emulator.kernel.runner`` for its keys); ``add_source`` once per kernel
    file, before the first event whose location names it; ``emit`` once per
    event with the fields listed in ``emulator.trace.schema.FIELDS``; ``end``
    once, also after an error or a deadlock, with the footer
    (``status``, ``end_time``, ``error``, ``error_loc``).

    ``add_digest(digest)`` (optional, format 1.5) receives the digest of a future's
    tensor (``emulator.trace.digests.Digest``) once the kernel has it: at its wait for a
    load or receive, at its issue for a store or send. A recorder without it gets none.

    ``emit_compound(code, time, pe, *fields)`` (optional) receives in one call
    the events of ``schema.COMPOUNDS[code]``, which happen on one PE in one
    cycle, one right after the other, with their fields concatenated; it means
    exactly the ``emit`` calls ``expand_compound`` makes of it. A recorder
    without it gets those ``emit`` calls (see ``compound_emitter``).
    """

    def begin(self, header: dict[str, Any]) -> None: ...

    def add_source(self, file: str, text: str) -> None: ...

    def emit(self, kind: Kind, time: int, pe: int, *fields: Any) -> None: ...

    def end(self, footer: dict[str, Any]) -> None: ...


def expand_compound(
    emit: Callable[..., None], code: int, time: int, pe: int, fields: tuple[Any, ...]
) -> None:
    """Make the ``emit`` calls compound ``code`` stands for (ValueError: wrong field count)."""
    try:
        parts = _PARTS[code]
    except (KeyError, TypeError):
        raise ValueError(f"unknown compound code {code!r}") from None
    if len(fields) != sum(width for _, width in parts):
        raise ValueError(
            f"compound {code} has {len(fields)} fields, expected {sum(width for _, width in parts)}"
        )
    at = 0
    for kind, width in parts:
        emit(kind, time, pe, *fields[at : at + width])
        at += width


class NullRecorder:
    """Discards everything (used when nobody asked for events).

    A subclass that overrides ``emit`` (one that counts events, say) gets each
    compound as its events, through ``emit``.
    """

    def begin(self, header: dict[str, Any]) -> None:
        pass

    def add_source(self, file: str, text: str) -> None:
        pass

    def emit(self, kind: Kind, time: int, pe: int, *fields: Any) -> None:
        pass

    def emit_compound(self, code: int, time: int, pe: int, *fields: Any) -> None:
        expand_compound(self.emit, code, time, pe, fields)

    def end(self, footer: dict[str, Any]) -> None:
        pass


def emitter(recorder: Recorder | None) -> Callable[..., None] | None:
    """``recorder.emit``, or None when the recorder discards everything.

    Hot paths call ``emit`` only when this is not None, so with tracing off they
    neither build an event's fields nor make the call. A subclass of NullRecorder
    (one that counts events, say) keeps its emit.
    """
    if recorder is None or type(recorder) is NullRecorder:
        return None
    return recorder.emit


def compound_emitter(recorder: Recorder | None) -> Callable[..., None] | None:
    """``recorder.emit_compound``, None when the recorder discards everything.

    A recorder without ``emit_compound`` gets a function that makes the
    component events' ``emit`` calls, so every recorder sees the same events
    whichever way the emulator reports them.
    """
    if recorder is None or type(recorder) is NullRecorder:
        return None
    emit_compound = getattr(recorder, "emit_compound", None)
    if emit_compound is not None:
        return emit_compound
    emit = recorder.emit

    def expanding(code: int, time: int, pe: int, *fields: Any) -> None:
        expand_compound(emit, code, time, pe, fields)

    return expanding


def digest_adder(recorder: Recorder | None) -> Callable[[Any], None] | None:
    """``recorder.add_digest``, None when the recorder takes no digests."""
    if recorder is None or type(recorder) is NullRecorder:
        return None
    return getattr(recorder, "add_digest", None)


class MemoryRecorder:
    """Keeps every event as a tuple ``(kind, time, pe, *fields)`` in ``events``, and
    each digest in ``digests`` by future."""

    def __init__(self) -> None:
        self.header: dict[str, Any] | None = None
        self.sources: dict[str, str] = {}
        self.events: list[tuple[Any, ...]] = []
        self.digests: dict[int, Any] = {}
        self.footer: dict[str, Any] | None = None

    def add_digest(self, digest: Any) -> None:
        self.digests[digest.future] = digest

    def begin(self, header: dict[str, Any]) -> None:
        self.header = header

    def add_source(self, file: str, text: str) -> None:
        self.sources[file] = text

    def emit(self, kind: Kind, time: int, pe: int, *fields: Any) -> None:
        self.events.append((kind, time, pe, *fields))

    def emit_compound(self, code: int, time: int, pe: int, *fields: Any) -> None:
        expand_compound(self.emit, code, time, pe, fields)

    def end(self, footer: dict[str, Any]) -> None:
        self.footer = footer


class TeeRecorder:
    """Forwards everything to several recorders in order."""

    def __init__(self, *recorders: Recorder) -> None:
        self.recorders = recorders
        # Each recorder's compound entry (its own, or one expanding into its emit); a
        # NullRecorder has none, as it has no events.
        self._compound = [c for c in map(compound_emitter, recorders) if c is not None]
        self._digests = [d for d in map(digest_adder, recorders) if d is not None]

    def begin(self, header: dict[str, Any]) -> None:
        for r in self.recorders:
            r.begin(header)

    def add_source(self, file: str, text: str) -> None:
        for r in self.recorders:
            r.add_source(file, text)

    def emit(self, kind: Kind, time: int, pe: int, *fields: Any) -> None:
        for r in self.recorders:
            r.emit(kind, time, pe, *fields)

    def emit_compound(self, code: int, time: int, pe: int, *fields: Any) -> None:
        for emit_compound in self._compound:
            emit_compound(code, time, pe, *fields)

    def add_digest(self, digest: Any) -> None:
        for add_digest in self._digests:
            add_digest(digest)

    def end(self, footer: dict[str, Any]) -> None:
        for r in self.recorders:
            r.end(footer)
