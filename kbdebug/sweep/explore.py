"""An explore's runs: one seed each, how each differs from the nominal run, as text and JSON.

A run differs from the nominal (unperturbed) run when its result does: another
outcome (a deadlock, a kernel error, an output the numpy check refuses) or, the
outcome the same, other bytes left in HBM. Ending at another cycle is timing,
not a result: nearly every perturbed run does, so it is counted apart and never
makes a run differ.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from kbdebug.launch.perturb import argv
from kbdebug.safe_text import escape
from kbdebug.sweep.point import CHECK_FAILED, OK, Row

SCHEMA = "kbdebug.explore/1"
#: Differing runs the text lists at most (--json lists every one).
SHOWN_RUNS = 20
#: How a run's outcome reads when it differs from the nominal's.
DIFFERS_AS = {CHECK_FAILED: "wrong output"}
#: The outcome the same, the HBM bytes not.
OTHER_BYTES = "other output bytes"


def differences(nominal: Row, row: Row) -> list[str]:
    """How ``row``'s result differs from the nominal run's ([] when it is the same)."""
    if row.outcome != nominal.outcome:
        return [DIFFERS_AS.get(row.outcome, row.outcome)]
    if row.output_digest is not None and row.output_digest != nominal.output_digest:
        return [OTHER_BYTES]
    return []


def explaining_hazards(nominal: Row, row: Row) -> list[tuple[str, str]]:
    """(id, label) of the hazards whose access read or wrote otherwise than in the
    nominal run (every hazard of the run when none did: one of them may still be the
    cause)."""
    if row.hazards is None:
        return []
    before = {hazard: did for hazard, _, did in nominal.hazards or ()}
    changed = [(h, label) for h, label, did in row.hazards if before.get(h) != did]
    return changed or [(h, label) for h, label, _ in row.hazards]


@dataclass
class FirstFailure:
    """What re-running the first differing seed here showed."""

    seed: int
    #: HBM bytes [lo, hi) that differ from the nominal run's (None: the same bytes).
    lo: int | None = None
    hi: int | None = None
    #: How many bytes in [lo, hi) differ.
    count: int = 0
    #: The store that last wrote the first differing byte: ``file:line``, its address and
    #: size, and which of that line's stores it was (1-based) of how many.
    store_line: str | None = None
    store_addr: int | None = None
    store_bytes: int | None = None
    store_ordinal: tuple[int, int] | None = None
    #: The failing run's trace, kept (--open) or None.
    trace: str | None = None
    #: What `kbdebug run` says of its first wrong block (the scenario's reference per
    #: block), line by line; empty without a reference or a wrong block.
    wrong_block: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        differ = None if self.lo is None else {"lo": self.lo, "hi": self.hi, "bytes": self.count}
        store = None
        if self.store_line is not None:
            assert self.store_ordinal is not None
            store = {
                "line": self.store_line,
                "addr": self.store_addr,
                "bytes": self.store_bytes,
                "ordinal": self.store_ordinal[0],
                "of": self.store_ordinal[1],
            }
        return {"seed": self.seed, "differing_bytes": differ, "store": store, "trace": self.trace}


@dataclass
class Exploration:
    """The nominal run, the perturbed runs by seed, and how to reproduce each."""

    scenario: str
    #: ``kbdebug run ...`` without the perturbation options (each run adds its own).
    command: list[str]
    seeds: list[int]
    #: The perturbation's bounds, as hardware fields (perturb_latency, ...).
    bounds: dict[str, Any]
    nominal: Row
    rows: dict[int, Row] = field(default_factory=dict)
    interrupted: bool = False
    first: FirstFailure | None = None

    def reproduce(self, seed: int) -> str:
        """The shell command that records run ``seed`` again, byte for byte."""
        return shlex.join([*self.command, *argv(seed, self.bounds)])

    def differing(self) -> list[tuple[int, Row, list[str]]]:
        """(seed, row, differences) of each finished run that differs, in seed order."""
        out = []
        for seed in self.seeds:
            row = self.rows.get(seed)
            if row is not None:
                kinds = differences(self.nominal, row)
                if kinds:
                    out.append((seed, row, kinds))
        return out

    def timing_only(self) -> list[Row]:
        """The finished runs with the nominal's result at another end cycle."""
        return [
            row
            for seed, row in self.rows.items()
            if not differences(self.nominal, row) and row.end_cycle != self.nominal.end_cycle
        ]

    def text(self) -> str:
        """The report ``kbdebug explore`` prints."""
        lines = [self._head(), self._nominal_line(), self._counts_line()]
        if self.nominal_failed:
            lines.insert(0, self.nominal_failure())
        differing = self.differing()
        if differing:
            lines += ["", self._table(differing[:SHOWN_RUNS])]
            if len(differing) > SHOWN_RUNS:
                lines.append(f"(first {SHOWN_RUNS} of {len(differing)}; --json lists all)")
        if self.first is not None:
            lines += ["", *self._first_lines(self.first)]
        return "\n".join(lines) + "\n"

    @property
    def nominal_failed(self) -> bool:
        """Whether the nominal run itself failed (wrong output, deadlock, error): then
        runs that fail the same way do not differ from it, yet none is right."""
        return self.nominal.outcome != OK

    def nominal_failure(self) -> str:
        """The line said first when the nominal run failed."""
        outcome = DIFFERS_AS.get(self.nominal.outcome, self.nominal.outcome)
        return (
            f"NOMINAL RUN FAILED ({outcome}): the kernel is wrong without any perturbation; "
            "the runs below are compared with that failing run (exit status 1)"
        )

    def to_json(self) -> dict[str, Any]:
        """The ``kbdebug.explore/1`` document."""
        runs = []
        for seed in self.seeds:
            row = self.rows.get(seed)
            if row is None:
                continue
            doc = {"seed": seed, **_row_json(row)}
            doc["differs"] = differences(self.nominal, row)
            explained = explaining_hazards(self.nominal, row) if doc["differs"] else []
            doc["hazards"] = [{"id": h, "label": label} for h, label in explained]
            doc["command"] = self.reproduce(seed)
            runs.append(doc)
        return {
            "schema": SCHEMA,
            "scenario": self.scenario,
            "seeds": {"first": self.seeds[0], "count": len(self.seeds)},
            "bounds": self.bounds,
            "nominal": _row_json(self.nominal),
            "finished": len(self.rows),
            "differ": len(self.differing()),
            "timing_only": len(self.timing_only()),
            "interrupted": self.interrupted,
            "runs": runs,
            "first": None if self.first is None else self.first.to_json(),
        }

    def _head(self) -> str:
        first, last = self.seeds[0], self.seeds[-1]
        latency = self.bounds.get("perturb_latency")
        window = self.bounds.get("perturb_grant_window")
        delay = self.bounds.get("perturb_grant_delay")
        spread = f"+/-{latency:.0%}" if latency <= 1 else f"0..{1 + latency:g}x their nominal"
        return (
            f"explore: {escape(self.scenario, 200)}, {len(self.seeds)} runs (seeds "
            f"{first}..{last}), DMA and IPCQ latencies {spread}, DMA grants delayed up to "
            f"{delay:g}x the HBM latency, read grants among the {window} oldest waiting"
        )

    def _nominal_line(self) -> str:
        row = self.nominal
        said = f": {escape(row.message, 300)}" if row.message else ""
        # "deadlock on PEs 0, 1 at cycle 4: ..." names its outcome: said once.
        outcome = "" if (row.message or "").startswith(row.outcome) else f"{row.outcome}, "
        return f"nominal: {outcome}end cycle {_cycle(row.end_cycle)}{said}"

    def _counts_line(self) -> str:
        differing = self.differing()
        finished = len(self.rows)
        of = (
            f"the {finished} runs that finished (of {len(self.seeds)})"
            if self.interrupted
            else f"{finished}"
        )
        kinds: dict[str, int] = {}
        for _, _, found in differing:
            for kind in found:
                kinds[kind] = kinds.get(kind, 0) + 1
        why = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
        head = (
            f"runs:    {len(differing)} of {of} differ from the nominal ({why})"
            if differing
            else f"runs:    none of {of} differs from the nominal"
        )
        timing = self.timing_only()
        if timing:
            cycles = [r.end_cycle for r in timing if r.end_cycle is not None]
            spread = f" {min(cycles):,}..{max(cycles):,}" if cycles else ""
            head += f"; {len(timing)} gave the nominal result at end cycles{spread} (timing only)"
        return head

    def _table(self, differing: list[tuple[int, Row, list[str]]]) -> str:
        rows = [["seed", "differs", "end cycle", "hazard", "reproduce"]]
        for seed, row, kinds in differing:
            hazards = [label for _, label in explaining_hazards(self.nominal, row)]
            rows.append(
                [
                    str(seed),
                    ", ".join(kinds),
                    _cycle(row.end_cycle),
                    escape(", ".join(hazards) or "none found", 120),
                    escape(self.reproduce(seed), 400),
                ]
            )
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        out = []
        for r in rows:
            cells = [r[0].rjust(widths[0]), r[1].ljust(widths[1]), r[2].rjust(widths[2])]
            out.append("  ".join([*cells, r[3].ljust(widths[3]), r[4]]).rstrip())
        return "\n".join(out)

    def _first_lines(self, first: FirstFailure) -> list[str]:
        row = self.rows[first.seed]
        said = f": {escape(row.message, 300)}" if row.message else ""
        if first.wrong_block:  # the block message `run` gives, not numpy's text cut short
            said = f": {escape(first.wrong_block[0], 500)}"
        lines = [f"first differing run, seed {first.seed}{said}"]
        lines += [f"  {escape(line.strip(), 500)}" for line in first.wrong_block[1:]]
        if first.lo is not None:
            where = f"  HBM bytes 0x{first.lo:x}..0x{first.hi:x} differ from the nominal run's"
            where += f" ({first.count:,} bytes)"
            if first.store_line is not None and first.store_ordinal is not None:
                nth, of = first.store_ordinal
                where += (
                    f"; the first lies in the {first.store_bytes:,}-byte tile at "
                    f"0x{first.store_addr:x} of store {nth} of {of} at "
                    f"{escape(first.store_line, 200)}"
                )
            lines.append(where)
        hazards = [label for _, label in explaining_hazards(self.nominal, row)]
        if hazards:
            lines.append(f"  hazard: {escape('; '.join(hazards), 400)} (kbdebug report lists it)")
        else:
            lines.append("  hazard: none found in this run")
        lines.append(f"  reproduce: {escape(self.reproduce(first.seed), 400)}")
        if first.trace is not None:
            lines.append(f"  trace: {escape(first.trace, 300)}")
        return lines


def _row_json(row: Row) -> dict[str, Any]:
    return {
        "outcome": row.outcome,
        "message": row.message,
        "end_cycle": row.end_cycle,
        "output_digest": row.output_digest,
    }


def _cycle(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
