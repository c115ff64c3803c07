"""The backend that runs many launches: the local worker pool, or Ray with --cluster."""

from __future__ import annotations

from kbdebug.sweep.cluster import RayBackend
from kbdebug.sweep.local import LocalBackend


def backend_for(cluster: str | None, jobs: int) -> LocalBackend | RayBackend:
    """``jobs`` local worker processes, or Ray at ``cluster`` (Ray itself is imported only
    when the backend runs)."""
    if cluster is None:
        return LocalBackend(jobs)
    return RayBackend(cluster, jobs)
