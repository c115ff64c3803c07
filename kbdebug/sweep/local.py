"""The local backend: each point in a fresh worker process, at most ``jobs`` at once.

A process per point bounds a worker's memory by one point's (whatever a
previous point allocated is gone with its process), makes a crashed or killed
worker one "crashed" row instead of a broken pool, and lets a cancelled sweep
stop exactly the points still running. A worker is forked from the parent,
which has imported the emulator and the analysis already, so starting one costs
milliseconds against the tenths of a second a point takes. A parent running
threads (Ray's, in a test) forks from a forkserver instead: forking a threaded
process can copy a lock some other thread holds.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection, wait

from kbdebug.sweep.point import CRASHED, Cancelled, PointTask, Row, run_point
from kbdebug.sweep.stop import StopRequest

#: Modules the forkserver imports once, so each worker starts with them loaded.
PRELOAD = ["kbdebug.sweep.point", "kbdebug.commands.run"]
#: Seconds a cancelled worker gets to remove its partial trace before it is killed.
GRACE = 2.0


def _context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


def _cancel(signum: int, frame: object) -> None:
    raise Cancelled()


def _worker(task: PointTask, conn: Connection) -> None:
    """A worker's whole life: run one point, send its row, exit."""
    # Ctrl+C reaches every process of the terminal's group: the parent decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _cancel)
    try:
        row = run_point(task, finishing=_uncancellable)
    except Cancelled:
        return
    conn.send(row)
    conn.close()


def _uncancellable() -> None:
    # The point is done: let it keep its trace and send its row; the parent collects it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class _Running:
    __slots__ = ("task", "process", "conn")

    def __init__(self, task: PointTask, process, conn: Connection):
        self.task = task
        self.process = process
        self.conn = conn


class LocalBackend:
    """Runs points in worker processes on this machine."""

    name = "local"

    def __init__(self, jobs: int):
        if jobs < 1:
            raise ValueError('"jobs" must be >= 1')
        self.jobs = jobs

    def run(
        self,
        tasks: Iterable[PointTask],
        on_row: Callable[[Row], None],
        on_tick: Callable[[], None] | None = None,
        stop: StopRequest | None = None,
    ) -> None:
        """Run every task, calling ``on_row`` with each row as it finishes (any order).

        ``on_tick`` is called at least every quarter second (for a progress bar).
        Once ``stop`` is requested (or on a KeyboardInterrupt), the workers still
        running are stopped (their partial traces removed; those already past their
        point send their rows, which reach ``on_row``), and KeyboardInterrupt is raised.
        """
        ctx = _context()
        waiting = list(tasks)
        waiting.reverse()  # popped from the end: grid order
        running: dict[Connection, _Running] = {}
        try:
            while waiting or running:
                if stop is not None and stop.requested:
                    raise stop.interrupt()
                while waiting and len(running) < self.jobs:
                    task = waiting.pop()
                    receive, send = ctx.Pipe(duplex=False)
                    process = ctx.Process(target=_worker, args=(task, send), daemon=True)
                    process.start()
                    send.close()  # the worker holds the only writer: EOF when it dies
                    running[receive] = _Running(task, process, receive)
                for conn in wait(list(running), timeout=0.25):
                    slot = running.pop(conn)
                    on_row(_collect(slot))
                if on_tick is not None:
                    on_tick()
        except BaseException:
            for row in _stop(running.values()):
                on_row(row)
            raise


def _collect(slot: _Running) -> Row:
    """The row a finished worker sent, or a "crashed" row for one that sent none."""
    try:
        row = slot.conn.recv()
    except (EOFError, OSError):
        row = None
    finally:
        slot.conn.close()
    slot.process.join()
    if isinstance(row, Row):
        return row
    code = slot.process.exitcode
    how = (
        f"killed by {signal.Signals(-code).name}"
        if code is not None and code < 0
        else f"exit status {code}"
    )
    return Row(slot.task.index, CRASHED, f"the worker process died ({how}) without a result")


def _stop(slots: Iterable[_Running]) -> list[Row]:
    """Cancel running workers: SIGTERM (they remove their partial traces), then SIGKILL.

    Returns the rows of points that finished meanwhile (those past ``finishing``).
    """
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl+C: let us finish
    finished = []
    try:
        slots = list(slots)
        for slot in slots:
            if slot.process.is_alive():
                slot.process.terminate()
        for slot in slots:
            slot.process.join(GRACE)
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join()
            try:
                if slot.conn.poll():
                    row = slot.conn.recv()
                    if isinstance(row, Row):
                        finished.append(row)
            except (EOFError, OSError):
                pass  # cancelled before it had a row
            slot.conn.close()
    finally:
        signal.signal(signal.SIGINT, previous)
    return finished
