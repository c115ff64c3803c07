"""The recorder interface every emulator event goes through, and an in-memory recorder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from emulator.trace.schema import Kind


class Recorder(Protocol):
    """Receives a run: its header, its source files, every event, then its footer.

    ``begin`` is called once before any event with the launch header (see
    ``emulator.kernel.runner`` for its keys); ``add_source`` once per kernel
    file, before the first event whose location names it; ``emit`` once per
    event with the fields listed in ``emulator.trace.schema.FIELDS``; ``end``
    once, also after an error or a deadlock, with the footer
    (``status``, ``end_time``, ``error``, ``error_loc``).
    """

    def begin(self, header: dict[str, Any]) -> None: ...

    def add_source(self, file: str, text: str) -> None: ...

    def emit(self, kind: Kind, time: int, pe: int, *fields: Any) -> None: ...

    def end(self, footer: dict[str, Any]) -> None: ...


class NullRecorder:
    """Discards everything (used when nobody asked for events)."""

    def begin(self, header: dict[str, Any]) -> None:
        pass

    def add_source(self, file: str, text: str) -> None:
        pass

    def emit(self, kind: Kind, time: int, pe: int, *fields: Any) -> None:
        pass

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


class MemoryRecorder:
    """Keeps every event as a tuple ``(kind, time, pe, *fields)`` in ``events``."""

    def __init__(self) -> None:
        self.header: dict[str, Any] | None = None
        self.sources: dict[str, str] = {}
        self.events: list[tuple[Any, ...]] = []
        self.footer: dict[str, Any] | None = None

    def begin(self, header: dict[str, Any]) -> None:
        self.header = header

    def add_source(self, file: str, text: str) -> None:
        self.sources[file] = text

    def emit(self, kind: Kind, time: int, pe: int, *fields: Any) -> None:
        self.events.append((kind, time, pe, *fields))

    def end(self, footer: dict[str, Any]) -> None:
        self.footer = footer


class TeeRecorder:
    """Forwards everything to several recorders in order."""

    def __init__(self, *recorders: Recorder) -> None:
        self.recorders = recorders

    def begin(self, header: dict[str, Any]) -> None:
        for r in self.recorders:
            r.begin(header)

    def add_source(self, file: str, text: str) -> None:
        for r in self.recorders:
            r.add_source(file, text)

    def emit(self, kind: Kind, time: int, pe: int, *fields: Any) -> None:
        for r in self.recorders:
            r.emit(kind, time, pe, *fields)

    def end(self, footer: dict[str, Any]) -> None:
        for r in self.recorders:
            r.end(footer)
