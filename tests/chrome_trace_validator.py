"""A checker of Chrome Trace Event JSON against what Perfetto's importer and chrome://tracing need.

``problems(doc)`` lists every rule a document breaks (empty when it is fine):

- the JSON object format: ``traceEvents`` a list, ``displayTimeUnit`` "ms" or
  "ns", no top-level key Perfetto's tokenizer does not know (it stops reading
  at one);
- every event has a known ``ph``, integer ``pid`` and ``tid``, a string
  ``name``; every event but metadata a numeric ``ts`` >= 0; no event has an
  array at its top level and no name or category holds a control character
  (Perfetto's tokenizer rejects both);
- every ``X`` has ``dur`` >= 0, and the ``X`` slices of one thread nest: none
  starts inside another and ends after it;
- every ``b`` has exactly one matching ``e`` (same pid, cat, name and id), not
  earlier; ids (``id`` or ``id2.local``) are integers;
- every flow id has one ``s`` and one ``f`` (same cat and name), ``f`` with
  ``bp: "e"``, ``s`` before ``f``, each strictly inside an ``X`` slice of its own
  thread;
- every ``i`` has a scope ``s`` of g, p or t; every ``C`` numeric args;
- every (pid, tid) an event uses has a ``thread_name``, every pid a ``process_name``.

Times are checked twice: as written, in floating-point microseconds as
chrome://tracing reads them (ignoring float error under ``FLOAT_SLACK_US``), and
as Perfetto stores them, ``llround(ts * 1000)`` integer nanoseconds, where
rounding can make slices overlap that did not as written, or make a flow's
timestamp land on a slice boundary.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from typing import Any

PHASES = {"X", "B", "E", "b", "e", "n", "s", "t", "f", "i", "I", "C", "M"}
#: ts + dur in floating point may pass the next slice's ts by an ulp: not an overlap.
FLOAT_SLACK_US = 1e-6
TOP_LEVEL_KEYS = {"traceEvents", "displayTimeUnit", "otherData", "metadata", "systemTraceEvents"}


def problems(doc: Any, limit: int = 20) -> list[str]:
    """Every rule ``doc`` (a parsed JSON document) breaks, at most ``limit`` of them."""
    return _Checker(limit).check(doc)


def _ns(us: float) -> int:
    """Perfetto's integer nanoseconds for a microsecond value (rounded half away from 0)."""
    return int(math.floor(us * 1000.0 + 0.5))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class _Checker:
    def __init__(self, limit: int):
        self.limit = limit
        self.found: list[str] = []

    def fail(self, message: str) -> None:
        if len(self.found) < self.limit:
            self.found.append(message)

    def check(self, doc: Any) -> list[str]:
        if not isinstance(doc, dict):
            self.fail("the document is not a JSON object")
            return self.found
        unknown = set(doc) - TOP_LEVEL_KEYS
        if unknown:
            self.fail(f"unknown top-level keys {sorted(unknown)}")
        if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
            self.fail(f"displayTimeUnit {doc['displayTimeUnit']!r} is not ms or ns")
        events = doc.get("traceEvents")
        if not isinstance(events, list):
            self.fail("traceEvents is not a list")
            return self.found
        valid = [(i, e) for i, e in enumerate(events) if self.check_event(i, e)]
        self.check_names(valid)
        self.check_slices(valid)
        self.check_async(valid)
        self.check_flows(valid)
        return self.found

    def check_event(self, i: int, e: Any) -> bool:
        if not isinstance(e, dict):
            self.fail(f"event {i} is not an object")
            return False
        ph = e.get("ph")
        if ph not in PHASES:
            self.fail(f"event {i}: unknown ph {ph!r}")
            return False
        ok = True
        for key in ("pid", "tid"):
            if not _is_int(e.get(key)):
                self.fail(f"event {i} ({ph}): {key} {e.get(key)!r} is not an integer")
                ok = False
        if not isinstance(e.get("name"), str):
            self.fail(f"event {i} ({ph}): name {e.get('name')!r} is not a string")
            ok = False
        for key in ("name", "cat"):
            if isinstance(e.get(key), str) and not e[key].isprintable():
                self.fail(f"event {i} ({ph}): {key} {e[key]!r} has a control character")
                ok = False
        arrays = [key for key, value in e.items() if isinstance(value, list)]
        if arrays:
            self.fail(f"event {i} ({ph}): array at the top level ({arrays})")
            ok = False
        if ph != "M" and not (_is_number(e.get("ts")) and e["ts"] >= 0):
            self.fail(f"event {i} ({ph}): ts {e.get('ts')!r} is not a number >= 0")
            ok = False
        if ph == "X" and not (_is_number(e.get("dur")) and e["dur"] >= 0):
            self.fail(f"event {i} (X {e.get('name')!r}): dur {e.get('dur')!r} is not >= 0")
            ok = False
        if ph in ("i", "I") and e.get("s", "t") not in ("g", "p", "t"):
            self.fail(f"event {i} (i): scope {e.get('s')!r} is not g, p or t")
            ok = False
        if ph == "C":
            args = e.get("args")
            if not isinstance(args, dict) or not args or not all(map(_is_number, args.values())):
                self.fail(f"event {i} (C {e.get('name')!r}): args {args!r} are not numbers")
                ok = False
        if ph in ("b", "e", "n", "s", "t", "f") and _event_id(e) is None:
            self.fail(f"event {i} ({ph} {e.get('name')!r}): id is not an integer")
            ok = False
        return ok

    def check_names(self, events: list[tuple[int, dict]]) -> None:
        threads, processes = set(), set()
        for _, e in events:
            if e["ph"] == "M" and isinstance(e.get("args"), dict):
                if e["name"] == "thread_name" and isinstance(e["args"].get("name"), str):
                    threads.add((e["pid"], e["tid"]))
                if e["name"] == "process_name" and isinstance(e["args"].get("name"), str):
                    processes.add(e["pid"])
        missing_thread, missing_process = set(), set()
        for i, e in events:
            if (e["pid"], e["tid"]) not in threads and (e["pid"], e["tid"]) not in missing_thread:
                missing_thread.add((e["pid"], e["tid"]))
                self.fail(
                    f"event {i} ({e['ph']}): pid {e['pid']} tid {e['tid']} has no thread_name"
                )
            if e["pid"] not in processes and e["pid"] not in missing_process:
                missing_process.add(e["pid"])
                self.fail(f"event {i} ({e['ph']}): pid {e['pid']} has no process_name")

    def check_slices(self, events: list[tuple[int, dict]]) -> None:
        """X slices of each thread nest, in microseconds and in Perfetto's nanoseconds."""
        self.slices: dict[tuple[int, int], list[tuple]] = defaultdict(list)
        self.starts: dict[tuple[int, int], list[float]] = {}
        for i, e in events:
            if e["ph"] == "X":
                start_ns, dur_ns = _ns(e["ts"]), _ns(e["dur"])
                self.slices[(e["pid"], e["tid"])].append(
                    (e["ts"], e["ts"] + e["dur"], start_ns, start_ns + dur_ns, i)
                )
        for thread, slices in self.slices.items():
            for unit, lo, hi, eps in (("us", 0, 1, FLOAT_SLACK_US), ("ns", 2, 3, 0)):
                stack: list[tuple[float, float, int]] = []
                # Longer first at one start: that is the only order in which both nest.
                for s in sorted(slices, key=lambda s: (s[lo], -s[hi])):
                    while stack and stack[-1][1] <= s[lo] + eps:
                        stack.pop()
                    if stack and s[hi] > stack[-1][1] + eps:
                        top = stack[-1]
                        self.fail(
                            f"pid {thread[0]} tid {thread[1]}: X event {s[4]} "
                            f"[{s[lo]}, {s[hi]}] {unit} overlaps X event {top[2]} "
                            f"[{top[0]}, {top[1]}] without nesting in it"
                        )
                        break
                    stack.append((s[lo], s[hi], s[4]))

    def check_async(self, events: list[tuple[int, dict]]) -> None:
        begins: dict[tuple, list[tuple[int, dict]]] = defaultdict(list)
        ends: dict[tuple, list[tuple[int, dict]]] = defaultdict(list)
        for i, e in events:
            if e["ph"] in ("b", "e"):
                key = (e["pid"], e.get("cat"), e["name"], _event_id(e))
                (begins if e["ph"] == "b" else ends)[key].append((i, e))
        for key in begins.keys() | ends.keys():
            b, e = begins.get(key, []), ends.get(key, [])
            if len(b) != 1 or len(e) != 1:
                self.fail(f"async {key}: {len(b)} b and {len(e)} e events, expected one each")
            elif e[0][1]["ts"] < b[0][1]["ts"]:
                self.fail(f"async {key}: e (event {e[0][0]}) is before b (event {b[0][0]})")

    def check_flows(self, events: list[tuple[int, dict]]) -> None:
        flows: dict[tuple, dict[str, list[tuple[int, dict]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for i, e in events:
            if e["ph"] in ("s", "t", "f"):
                flows[(e.get("cat"), e["name"], _event_id(e))][e["ph"]].append((i, e))
        for key, by_phase in flows.items():
            s, f = by_phase.get("s", []), by_phase.get("f", [])
            if len(s) != 1 or len(f) != 1:
                self.fail(f"flow {key}: {len(s)} s and {len(f)} f events, expected one each")
                continue
            (si, se), (fi, fe) = s[0], f[0]
            if fe.get("bp") != "e":
                self.fail(f"flow {key}: f (event {fi}) does not bind to its enclosing slice")
            if not fe["ts"] > se["ts"] or not _ns(fe["ts"]) > _ns(se["ts"]):
                self.fail(f"flow {key}: f (event {fi}) is not after s (event {si})")
            for i, e in ((si, se), (fi, fe)):
                if not self.strictly_inside(e):
                    self.fail(
                        f"flow {key}: {e['ph']} (event {i}) at {e['ts']} is not strictly "
                        f"inside an X slice of pid {e['pid']} tid {e['tid']}"
                    )

    def strictly_inside(self, e: dict) -> bool:
        thread = (e["pid"], e["tid"])
        if thread not in self.starts:
            slices = self.slices[thread] = sorted(self.slices.get(thread, ()))
            self.starts[thread] = [s[0] for s in slices]
        t, t_ns = e["ts"], _ns(e["ts"])
        slices = self.slices[thread]
        # Enclosing slices start before t; the deepest one started last.
        for k in range(bisect.bisect_left(self.starts[thread], t) - 1, -1, -1):
            start, end, start_ns, end_ns, _ = slices[k]
            if start < t < end and start_ns < t_ns < end_ns:
                return True
        return False


def _event_id(e: dict) -> int | None:
    """The integer id of an async or flow event (``id``, or ``id2`` local or global)."""
    if "id" in e:
        return e["id"] if _is_int(e["id"]) else None
    id2 = e.get("id2")
    if isinstance(id2, dict) and len(id2) == 1:
        ((scope, value),) = id2.items()
        if scope in ("local", "global") and _is_int(value):
            return value
    return None
