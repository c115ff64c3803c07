"""The Ray backend: the same points, each a Ray task, on a cluster or a local Ray instance.

Ray is optional (``pip install 'kbdebug[cluster]'``) and imported only here, only
when ``--cluster`` asks for it. Every node must have kbdebug installed (the same
version, so the rows match a local sweep), and a ``FILE.py:FUNCTION`` scenario
must be at the same path on every node, as must ``--traces DIR``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

from kbdebug.errors import UserError
from kbdebug.sweep.point import CRASHED, PointTask, Row, run_point
from kbdebug.sweep.stop import StopRequest

#: A Ray worker process is replaced after this many points, which bounds its memory
#: (a new worker costs about a second, a 256-tile point half of one).
MAX_CALLS_PER_WORKER = 20
#: Points submitted ahead of those finished, per CPU of the cluster.
IN_FLIGHT_PER_CPU = 2
#: Seconds cancelled tasks get to remove their partial traces before they are killed.
GRACE = 2.0
#: ``--cluster local`` starts a Ray instance on this machine (``-j`` CPUs).
LOCAL = "local"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(
            "--cluster needs Ray, which is not installed: pip install 'kbdebug[cluster]'"
        ) from None
    return ray


def _ray_point(task: PointTask) -> Row:
    # A cancelled task gets KeyboardInterrupt: run_point removes its partial trace first.
    return run_point(task)


class RayBackend:
    """Runs points as Ray tasks (one CPU each) on the cluster at ``address``."""

    name = "ray"

    def __init__(self, address: str, jobs: int | None = None):
        self.address = address
        self.jobs = jobs

    def run(
        self,
        tasks: Iterable[PointTask],
        on_row: Callable[[Row], None],
        on_tick: Callable[[], None] | None = None,
        stop: StopRequest | None = None,
    ) -> None:
        """As :meth:`LocalBackend.run`: rows to ``on_row`` as they finish, in any order.

        Uses the Ray instance this process is already connected to, if any;
        otherwise connects to ``address`` (``auto``, ``ray://HOST:PORT``, or
        ``local`` for a new instance here) and disconnects at the end.
        """
        ray = _import_ray()
        # Ray's driver prints worker deaths and its own notices to sys.stdout, from its
        # threads too: send them to stderr, where they cannot corrupt --json or --csv.
        with contextlib.redirect_stdout(sys.stderr):
            connected_here = False
            if not ray.is_initialized():
                self._connect(ray)
                connected_here = True
            try:
                self._run(ray, list(tasks), on_row, on_tick, stop)
            finally:
                if connected_here:
                    ray.shutdown()

    def _connect(self, ray: Any) -> None:
        options: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
        if self.address == LOCAL:
            # "local" starts a new instance even where a cluster runs (or left its address).
            options.update(address="local", num_cpus=self.jobs, include_dashboard=False)
        else:
            options["address"] = self.address
        try:
            ray.init(**options)
        except Exception as e:  # Ray raises ConnectionError, RuntimeError, ValueError...
            detail = " ".join(str(e).split())[:300]
            raise UserError(f"--cluster {self.address}: cannot connect to Ray: {detail}") from None

    def _run(
        self,
        ray: Any,
        tasks: list[PointTask],
        on_row: Callable[[Row], None],
        on_tick: Callable[[], None] | None,
        stop: StopRequest | None,
    ) -> None:
        remote = ray.remote(num_cpus=1, max_calls=MAX_CALLS_PER_WORKER, max_retries=0)(_ray_point)
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        window = max(2, cpus * IN_FLIGHT_PER_CPU)
        # Temporary traces go to one folder, removed at the end with whatever a worker that
        # died left there (its trace's header, the events still in its buffer lost): on
        # this machine; a worker elsewhere makes the folder of that name on its own.
        scratch = tempfile.mkdtemp(prefix="kbdebug-sweep-")
        waiting = [
            dataclasses.replace(t, scratch_dir=scratch) if t.trace_path is None else t
            for t in reversed(tasks)
        ]
        running: dict[Any, PointTask] = {}
        try:
            while waiting or running:
                if stop is not None and stop.requested:
                    raise stop.interrupt()
                while waiting and len(running) < window:
                    task = waiting.pop()
                    running[remote.remote(task)] = task
                ready, _ = ray.wait(list(running), num_returns=1, timeout=0.25)
                for ref in ready:
                    on_row(_result(ray, ref, running.pop(ref)))
                if on_tick is not None:
                    on_tick()
        except BaseException:
            for row in _cancel(ray, running):
                on_row(row)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _result(ray: Any, ref: Any, task: PointTask) -> Row:
    try:
        row = ray.get(ref)
    except ray.exceptions.RayError as e:
        # The worker died, or Ray lost the task: the point has no result, the sweep goes on.
        detail = " ".join(str(e).split())[:300]
        return Row(task.index, CRASHED, f"the Ray task failed: {type(e).__name__}: {detail}")
    return row


def _cancel(ray: Any, running: dict[Any, PointTask]) -> list[Row]:
    """Cancel running tasks: KeyboardInterrupt first (partial traces removed), then kill.

    Returns the rows of the tasks that finished all the same.
    """
    refs = list(running)
    for ref in refs:
        ray.cancel(ref)
    deadline = time.monotonic() + GRACE
    left = refs
    while left and time.monotonic() < deadline:
        _, left = ray.wait(left, num_returns=len(left), timeout=0.1)
    for ref in left:
        ray.cancel(ref, force=True)
    finished = []
    for ref in refs:
        if ref in left:
            continue
        try:
            row = ray.get(ref, timeout=0)
        except Exception:  # cancelled, as asked
            continue
        if isinstance(row, Row):
            finished.append(row)
    return finished
