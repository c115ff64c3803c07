"""IndexFeed: the reader's batches handed to an IndexBuilder on a thread of its own."""

from __future__ import annotations

import queue
import threading
from types import TracebackType

from emulator.trace.reader import EventTables
from kbdebug.replay.index import IndexBuilder

# Batches read but not yet added, at most: the reader waits beyond (a batch is some
# 20,000 events, a megabyte or two of arrays).
DEPTH = 8


class IndexFeed:
    """Adds each batch to ``builder`` from a thread of its own, in order, so that indexing
    one batch overlaps reading the next: both are mostly numpy, which lets go of the GIL,
    and so does the kernel while it maps the columns' fresh pages in.

    A context manager around the read, whose ``on_tables`` it is. On leaving, every
    batch handed over has been added; the first error ``add_tables`` raised is raised
    then (or by the next call), unless the read itself failed.
    """

    def __init__(self, builder: IndexBuilder) -> None:
        self.builder = builder
        self._queue: queue.Queue[EventTables | None] = queue.Queue(maxsize=DEPTH)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kbdebug-index-feed", daemon=True)

    def __enter__(self) -> IndexFeed:
        self._thread.start()
        return self

    def __call__(self, tables: EventTables) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(tables)

    def _run(self) -> None:
        while (tables := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self.builder.add_tables(tables)
                except BaseException as e:  # raised in the reading thread
                    self._error = e

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._queue.put(None)
        self._thread.join()
        if exc is None and self._error is not None:
            raise self._error
