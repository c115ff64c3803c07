"""The instants of the Chrome export: kernel errors, deadlocks, host reads, findings, and
where a truncated trace stops."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

from emulator.trace.schema import Kind
from kbdebug.export.chrome_layout import LanePlan, cycles_to_ns, json_string, microseconds

if TYPE_CHECKING:
    from kbdebug.analysis.findings import Finding
    from kbdebug.replay.replay import Replay


def instants(
    replay: Replay, plan: LanePlan, findings: list[Finding], mhz: float, locs_js: list[str]
) -> list[str]:
    """The ``i`` instants: each kernel error, deadlock and host read (on the kernel's
    lane), each finding (on its PE) and where a truncated trace stops (global).

    ``locs_js`` holds each loc of the trace as a JSON string.
    """
    index = replay.index
    c = index.columns
    rows = []

    def instant(pe: int, cycle: int, scope: str, name: str, cat: str, args: str) -> None:
        ts = microseconds(int(cycles_to_ns(np.array([cycle]), mhz)[0]))
        rows.append(
            f'{{"ph":"i","s":"{scope}","pid":{pe + 1},"tid":{plan.kernel_tid[pe]},'
            f'"ts":{ts},"name":{json_string(name)},"cat":"{cat}","args":{{{args}}}}}'
        )

    for i in np.flatnonzero(c.kind == Kind.KERNEL_ERROR).tolist():
        loc = int(c.loc[i])
        source = f',"source":{locs_js[loc]}' if loc >= 0 else ""
        message = json.dumps(index.string(int(c.op[i])), ensure_ascii=False)
        instant(int(c.pe[i]), int(c.time[i]), "t", "kernel error", "error",
                f'"message":{message}{source}')  # fmt: skip
    for i in np.flatnonzero(c.kind == Kind.DEADLOCK).tolist():
        loc = int(c.loc[i])
        source = f',"source":{locs_js[loc]}' if loc >= 0 else ""
        instant(int(c.pe[i]), int(c.time[i]), "t", "deadlock", "error",
                f'"future":{int(c.fut[i])}{source}')  # fmt: skip
    # The kernel read tensor values on the host (future -1: a computed tensor).
    for i in np.flatnonzero(c.kind == Kind.HOST_READ).tolist():
        instant(int(c.pe[i]), int(c.time[i]), "t", "host read", "host_read",
                f'"future":{int(c.fut[i])}')  # fmt: skip
    for finding in findings:
        args = {
            "id": finding.id,
            "message": finding.message,
            "suggestion": finding.suggestion,
            "source": str(finding.loc) if finding.loc else None,
            "start_cycle": finding.start,
            "end_cycle": finding.end,
            "saving": finding.saving,
        }
        body = json.dumps(args, ensure_ascii=False)[1:-1]
        instant(finding.pe, finding.start, "p", f"{finding.rule} {finding.title}",
                "finding", body)  # fmt: skip
    if replay.status == "truncated" and plan.lanes:
        pe = plan.lanes[0].pe
        instant(pe, int(replay.end_time), "g", "trace cut off", "trace",
                f'"events":{index.n_events}')  # fmt: skip
    return rows
