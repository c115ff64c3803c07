"""A sweep's results: the best point, the depth each setting needs, and the table, JSON and CSV.

Everything here depends only on the points and their rows, sorted by point, so
the output is the same whatever ran them (``-j 1``, ``-j 8``, Ray).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import Any

from kbdebug.safe_text import escape
from kbdebug.sweep.grid import Axis, Point, format_value
from kbdebug.sweep.point import OK, Row

SCHEMA = "kbdebug.sweep/1"
#: A depth is enough when its end cycle is within this share of the best one.
TOLERANCE = 0.02
#: The parameter whose smallest sufficient value is marked.
DEPTH = "depth"
#: Findings the text table lists per point (JSON and CSV list all).
TABLE_FINDINGS = 3


@dataclass
class Results:
    """The points of a sweep and the rows of those that finished."""

    scenario: str
    axes: list[Axis]
    points: list[Point]
    #: Row by point index; a point without one did not finish (the sweep was interrupted).
    rows: dict[int, Row] = field(default_factory=dict)
    interrupted: bool = False
    #: --set values, for the JSON document.
    settings: dict[str, Any] = field(default_factory=dict)

    def add(self, row: Row) -> None:
        self.rows[row.index] = row

    def finished(self) -> list[tuple[Point, Row]]:
        """The points that have a row, in grid order."""
        return [(p, self.rows[p.index]) for p in self.points if p.index in self.rows]

    def best(self) -> int | None:
        """The ok point with the smallest end cycle (the first in grid order on a tie)."""
        ok = [(r.end_cycle, p.index) for p, r in self.finished() if _ok(r)]
        return min(ok)[1] if ok else None

    def depth_needed(self) -> list[tuple[dict[str, Any], int]]:
        """For each setting of the other parameters: the smallest depth within TOLERANCE
        of the best end cycle at that setting, as (other parameters, point index), in
        grid order.

        Empty when ``depth`` is not swept. A setting some of whose points did not
        finish (an interrupted sweep) has none: a missing depth might have been the
        best there.
        """
        if DEPTH not in [a.key for a in self.axes]:
            return []
        groups: dict[tuple, list[Point]] = {}
        for p in self.points:
            groups.setdefault(self._others(p), []).append(p)
        out = []
        for others, members in groups.items():
            if any(p.index not in self.rows for p in members):
                continue
            ok = [(p, self.rows[p.index]) for p in members if _ok(self.rows[p.index])]
            if not ok:
                continue
            best_end = min(r.end_cycle for _, r in ok)
            enough = [
                (p.value(DEPTH), p.index)
                for p, r in ok
                if r.end_cycle <= best_end * (1 + TOLERANCE)
            ]
            out.append((dict(others), min(enough, key=_depth_order)[1]))
        return out

    def at_edge(self, index: int) -> bool:
        """Whether point ``index``, a setting's depth needed, is the deepest the grid
        sweeps while its run is still more than TOLERANCE short of its bound: a deeper
        prefetch might end earlier, so the answer is "at least this deep"."""
        depths = [v for v in self._depths() if isinstance(v, int | float)]
        point = next((p for p in self.points if p.index == index), None)
        row = self.rows.get(index)
        if not depths or point is None or row is None or point.value(DEPTH) != max(depths):
            return False
        return row.efficiency is None or row.efficiency < 1 - TOLERANCE

    def _depths(self) -> tuple:
        return next((a.values for a in self.axes if a.key == DEPTH), ())

    def unsettled(self) -> list[dict[str, Any]]:
        """Settings of the other parameters left without a depth by an interrupted sweep."""
        if DEPTH not in [a.key for a in self.axes]:
            return []
        seen: dict[tuple, bool] = {}
        for p in self.points:
            others = self._others(p)
            seen[others] = seen.get(others, True) and p.index in self.rows
        return [dict(others) for others, whole in seen.items() if not whole]

    @staticmethod
    def _others(point: Point) -> tuple:
        return tuple((k, v) for k, v in point.params if k != DEPTH)

    # --- output -----------------------------------------------------------------------

    def table(self) -> str:
        """The text table, one line per finished point, then the best and depth lines."""
        best = self.best()
        needed = {i for _, i in self.depth_needed()}
        keys = [a.key for a in self.axes]
        header = ["", *keys, "end cycle", "bound", "eff", "stall", "reads", "outcome", "findings"]
        lines = []
        for p, r in self.finished():
            mark = ("*" if p.index == best else "") + ("d" if p.index in needed else "")
            lines.append(
                [
                    mark,
                    *(escape(format_value(v), 40) for _, v in p.params),
                    _int(r.end_cycle),
                    _int(r.bound),
                    "-" if r.efficiency is None else f"{100 * r.efficiency:.0f} %",
                    _int(r.stall_cycles),
                    _int(r.dma_read_count),
                    r.outcome,
                    _findings_cell(r),
                ]
            )
        widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
        numeric = set(range(1, len(header) - 2))
        out = []
        for row in [header, *lines]:
            cells = [
                cell.rjust(w) if i in numeric else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            ]
            out.append("  ".join(cells).rstrip())
        out.extend(self._notes(best))
        return "\n".join(out) + "\n"

    def _notes(self, best: int | None) -> list[str]:
        notes = []
        by_index = {p.index: (p, r) for p, r in self.finished()}
        if best is not None:
            p, r = by_index[best]
            of = " (of the points that finished)" if self.interrupted else ""
            notes.append(f"* best{of}: {escape(p.label(), 200)}, end cycle {r.end_cycle:,}")
        else:
            notes.append("no point completed ok: no best")
        needed = self.depth_needed()
        if needed or self.unsettled():
            notes.append(
                f"d depth needed: the smallest depth within {TOLERANCE:.0%} of the best end "
                "cycle at the same other parameters"
            )
            for others, index in needed:
                p, r = by_index[index]
                where = " ".join(f"{k}={format_value(v)}" for k, v in others.items())
                depth = escape(format_value(p.value(DEPTH)), 40)
                if self.at_edge(index):
                    eff = f", {r.efficiency:.0%} efficient" if r.efficiency is not None else ""
                    answer = (
                        f"depth ≥ {depth} (end cycle {r.end_cycle:,}{eff}): extend --grid depth"
                    )
                else:
                    answer = f"depth {depth} (end cycle {r.end_cycle:,})"
                notes.append(f"  {escape(where or 'all points', 200)}: {answer}")
        unsettled = self.unsettled()
        if unsettled:
            wheres = [" ".join(f"{k}={format_value(v)}" for k, v in o.items()) for o in unsettled]
            shown = ", ".join(escape(w or "all points", 200) for w in wheres[:4])
            more = f" and {len(wheres) - 4} more" if len(wheres) > 4 else ""
            notes.append(f"  no answer for {shown}{more}: not all their depths finished")
        for p, r in self.finished():
            if r.message is not None:
                notes.append(f"point {escape(p.label(), 200)}: {escape(r.message, 500)}")
        return notes

    def to_json(self) -> dict[str, Any]:
        """The ``kbdebug.sweep/1`` document."""
        best = self.best()
        needed = self.depth_needed()
        needed_index = {i for _, i in needed}
        rows = []
        for p, r in self.finished():
            doc = {"index": p.index, "params": dict(p.params), **r.to_dict()}
            doc["best"] = p.index == best
            doc["depth_needed"] = p.index in needed_index
            rows.append(doc)
        return {
            "schema": SCHEMA,
            "scenario": self.scenario,
            "settings": self.settings,
            "grid": [{"key": a.key, "values": list(a.values)} for a in self.axes],
            "points": len(self.points),
            "finished": len(self.rows),
            "interrupted": self.interrupted,
            "best": best,
            "depth_needed": [
                {"others": o, "index": i, "at_edge": self.at_edge(i)} for o, i in needed
            ],
            "depth_unsettled": self.unsettled(),
            "rows": rows,
        }

    def json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, default=str) + "\n"

    def csv_text(self) -> str:
        """One CSV line per finished point; text from traces has its control characters
        escaped (a CSV is often read on a terminal)."""
        best = self.best()
        needed = {i for _, i in self.depth_needed()}
        keys = [a.key for a in self.axes]
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(
            [
                "index",
                *keys,
                "outcome",
                "end_cycle",
                "bound",
                "efficiency",
                "stall_cycles",
                "dma_read_count",
                "findings",
                "best",
                "depth_needed",
                "trace",
                "message",
            ]
        )
        for p, r in self.finished():
            findings = (
                ""
                if r.findings is None
                else ";".join(f"{escape(i, 1000)}={s}" for i, s in r.findings)
            )
            writer.writerow(
                [
                    p.index,
                    *(escape(format_value(v), 200) for _, v in p.params),
                    r.outcome,
                    _blank(r.end_cycle),
                    _blank(r.bound),
                    "" if r.efficiency is None else repr(r.efficiency),
                    _blank(r.stall_cycles),
                    _blank(r.dma_read_count),
                    findings,
                    int(p.index == best),
                    int(p.index in needed),
                    "" if r.trace is None else escape(r.trace, 1000),
                    "" if r.message is None else escape(r.message, 1000),
                ]
            )
        return buf.getvalue()


def _ok(row: Row) -> bool:
    return row.outcome == OK and row.end_cycle is not None


def _depth_order(item: tuple[Any, int]) -> tuple:
    """Numbers by value, anything else after them in grid order."""
    value, index = item
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    return (0, value, index) if numeric else (1, 0, index)


def _int(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _blank(value: int | None) -> str:
    return "" if value is None else str(value)


def _findings_cell(row: Row) -> str:
    """``KB106 -4,048, KB107 -242``: rule codes with their estimated savings."""
    if row.findings is None:
        return "(diagnosis failed)"
    if row.outcome != OK:
        return ""
    cells = [f"{escape(i.split(':', 1)[0], 12)} -{s:,}" for i, s in row.findings[:TABLE_FINDINGS]]
    more = len(row.findings) - TABLE_FINDINGS
    if more > 0:
        cells.append(f"+{more} more")
    return ", ".join(cells) if cells else "none"
