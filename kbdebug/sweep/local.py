"""The local backend: points in worker processes, at most ``jobs`` at once.

A worker runs at most POINTS_PER_WORKER points and exits, which bounds its
memory (whatever a point left behind goes with the process) while keeping its
warm caches for a few points. A worker that dies is one "crashed" row, never a
broken pool, and a cancelled sweep stops exactly the points still running.
No partial trace outlives the sweep: a cancelled worker removes its own, and
the parent removes what a killed one left (its temporary traces live in the
sweep's own scratch directory; kept ones are named by its pid).
Workers are forked from the parent, which has imported the emulator and the
analysis already; a parent running threads (Ray's, in a test) forks them from a
forkserver instead, since forking a threaded process can copy a lock another
thread holds.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection, wait

from kbdebug.sweep.point import CRASHED, Cancelled, PointTask, Row, partial_traces, run_point
from kbdebug.sweep.stop import StopRequest

#: Points a worker process runs before it exits and a fresh one takes over.
POINTS_PER_WORKER = 16
#: Modules the forkserver imports once, so each worker starts with them loaded.
PRELOAD = ["kbdebug.sweep.point", "kbdebug.launch.launcher"]
#: Seconds a cancelled worker gets to remove its partial trace before it is killed.
GRACE = 2.0
#: Signals a new worker starts with blocked, until it has its own handlers.
_STOPPING = (signal.SIGINT, signal.SIGTERM)


def _context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


#: Set in a worker once SIGTERM cancelled its point: whatever the point made of the
#: Cancelled raised in it (an error in the writer it interrupted), it sends no row.
_cancelled = False


def _cancel(signum: int, frame: object) -> None:
    global _cancelled
    _cancelled = True
    raise Cancelled()


def _uncancellable() -> None:
    # The point is done: let it keep its trace and send its row; the parent collects it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _worker(conn: Connection, limit: int) -> None:
    """A worker's life: run the points the parent sends, up to ``limit``, then exit.

    It also exits on None (no more points) or when the parent is gone. Not on the
    parent closing its end alone: a sibling forked later holds a copy of it.
    """
    # Ctrl+C reaches every process of the terminal's group: the parent decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _cancel)
    parent = os.getppid()
    try:
        # Forked with both blocked (_Worker): a SIGTERM sent since is raised here, before
        # any point runs, rather than caught by the parent's handler we were forked with.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPPING)
        for _ in range(limit):
            signal.signal(signal.SIGTERM, _cancel)
            while not conn.poll(0.5):
                if os.getppid() != parent:
                    return  # the parent was killed: nobody will read a row
            task = conn.recv()
            if task is None:
                break
            row = run_point(task, finishing=_uncancellable)
            if _cancelled:
                break
            conn.send(row)
    except (Cancelled, EOFError, OSError):
        pass
    finally:
        conn.close()


class _Worker:
    """One worker process, the pipe to it, and the point it is running (if any)."""

    def __init__(self, ctx: multiprocessing.context.BaseContext, limit: int):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, limit), daemon=True)
        # A forked worker starts with our handlers (the sweep's StopRequest, which only
        # sets a flag): blocked until it installs its own, a SIGTERM cannot be lost there.
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
        try:
            self.process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        child.close()  # the worker holds the only other end: EOF when it dies
        self.left = limit
        self.task: PointTask | None = None

    def give(self, task: PointTask) -> None:
        self.task = task
        self.left -= 1
        try:
            self.conn.send(task)
        except OSError:
            pass  # it died already: collect() reads the EOF and makes the crashed row

    def collect(self) -> tuple[Row, bool]:
        """The row of the point it ran (a "crashed" row if it died); whether it lives on."""
        assert self.task is not None
        task = self.task
        try:
            row = self.conn.recv()
        except (EOFError, OSError):
            row = None
        if isinstance(row, Row):
            self.task = None
            if self.left > 0:
                return row, True
            self.retire()
            return row, False
        self.retire()
        code = self.process.exitcode
        how = (
            f"killed by {signal.Signals(-code).name}"
            if code is not None and code < 0
            else f"exit status {code}"
        )
        return Row(task.index, CRASHED, f"the worker process died ({how}) without a result"), False

    def retire(self, timeout: float | None = None) -> None:
        """Tell the worker to exit (None), close the pipe and wait for the process
        (``timeout`` seconds at most, then kill it); then remove the partial trace of
        the point it did not finish, if it left one."""
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass  # it is gone already
        self.conn.close()
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        if self.task is not None and self.process.pid is not None:
            for path in partial_traces(self.task, self.process.pid):
                path.unlink(missing_ok=True)
            self.task = None


class LocalBackend:
    """Runs points in worker processes on this machine."""

    name = "local"

    def __init__(self, jobs: int, points_per_worker: int = POINTS_PER_WORKER):
        if jobs < 1:
            raise ValueError('"jobs" must be >= 1')
        if points_per_worker < 1:
            raise ValueError('"points_per_worker" must be >= 1')
        self.jobs = jobs
        self.points_per_worker = points_per_worker

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
        # Temporary traces go here: removed at the end with whatever a killed worker left.
        scratch = tempfile.mkdtemp(prefix="kbdebug-sweep-")
        waiting = [
            dataclasses.replace(t, scratch_dir=scratch) if t.trace_path is None else t
            for t in tasks
        ]
        waiting.reverse()  # popped from the end: grid order
        idle: list[_Worker] = []
        busy: dict[Connection, _Worker] = {}
        try:
            while waiting or busy:
                if stop is not None and stop.requested:
                    raise stop.interrupt()
                while waiting and len(busy) < self.jobs:
                    worker = idle.pop() if idle else _Worker(ctx, self.points_per_worker)
                    worker.give(waiting.pop())
                    busy[worker.conn] = worker
                for conn in wait(list(busy), timeout=0.25):
                    worker = busy.pop(conn)
                    row, lives = worker.collect()
                    if lives:
                        idle.append(worker)
                    on_row(row)
                if on_tick is not None:
                    on_tick()
        except BaseException:
            for row in _stop(list(busy.values())):
                on_row(row)
            raise
        finally:
            for worker in idle:
                worker.retire(GRACE)
            shutil.rmtree(scratch, ignore_errors=True)


def _stop(workers: list[_Worker]) -> list[Row]:
    """Cancel busy workers: SIGTERM (they remove their partial traces), then SIGKILL.

    Returns the rows of points that finished meanwhile (those past ``finishing``).
    """
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl+C: let us finish
    finished = []
    try:
        for worker in workers:
            if worker.process.is_alive():
                worker.process.terminate()
        for worker in workers:
            # A worker past its point ignores SIGTERM and sends its row: wait for it.
            try:
                if worker.conn.poll(GRACE):
                    row = worker.conn.recv()
                    if isinstance(row, Row):
                        finished.append(row)
                        worker.task = None  # its trace is in place: nothing partial to remove
            except (EOFError, OSError):
                pass  # cancelled before it had a row
            worker.retire(GRACE)
    finally:
        signal.signal(signal.SIGINT, previous)
    return finished
