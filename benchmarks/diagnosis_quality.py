"""Diagnosis quality over tests/corpus: are the findings true, on the right line, honest in cycles?

    python benchmarks/diagnosis_quality.py [--out DIR]

For every pair (a kernel with one serialization bug and its fixed twin) and
every clean kernel, records the traces, runs ``kbdebug.analysis.find_all``
and prints per rule: pairs, recall (the bug got a finding of its rule on every
affected PE), right-line rate (that finding names the marked line, and the
marked call line for helpers), saving accuracy (median |saving - measured| /
measured, measured = bug end cycle - fixed end cycle per affected PE) and
false positives (findings on fixed twins and clean kernels, and findings of
other rules or on other PEs on bug kernels); then totals.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from corpus._harness import entries, record, same_place  # noqa: E402

from kbdebug.analysis import find_all  # noqa: E402
from kbdebug.replay import Replay  # noqa: E402


def _findings(entry, variant, directory):
    trace, result = record(entry, variant, directory)
    return find_all(Replay.open(trace)), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="keep the traces in this directory")
    args = parser.parse_args(argv)
    tmp = None
    if args.out is None:
        tmp = tempfile.TemporaryDirectory()
        directory = Path(tmp.name)
    else:
        directory = args.out
        directory.mkdir(parents=True, exist_ok=True)

    stats = defaultdict(lambda: dict(pairs=0, found=0, right=0, errors=[], fp=0))
    clean_fp = 0
    n_clean = 0
    for entry in entries():
        if not entry.is_pair:
            n_clean += 1
            findings, _ = _findings(entry, "clean", directory)
            clean_fp += len(findings)
            for f in findings:
                print(
                    f"  false positive on clean {entry.name}: {f.rule} pe{f.pe} line {f.loc.line}"
                )
            continue
        s = stats[entry.rule]
        s["pairs"] += 1
        bug_findings, bug = _findings(entry, "bug", directory)
        fixed_findings, fixed = _findings(entry, "fixed", directory)
        found = right = True
        for pe in entry.pes:
            mine = [f for f in bug_findings if f.pe == pe and f.rule == entry.rule]
            found &= bool(mine)
            named = [f for f in mine if same_place(f.loc, entry.path, entry.line)]
            if entry.call_line is not None:
                named = [f for f in named if same_place(f.call_loc, entry.path, entry.call_line)]
            right &= bool(named)
            measured = bug.pe_end_times[pe] - fixed.pe_end_times[pe]
            claimed = sum(f.saving for f in (named or mine))
            if measured > 0 and mine:
                s["errors"].append(abs(claimed - measured) / measured)
        s["found"] += found
        s["right"] += found and right
        stray = [f for f in bug_findings if f.pe not in entry.pes or f.rule != entry.rule]
        s["fp"] += len(stray) + len(fixed_findings)
        for f in stray + fixed_findings:
            which = "fixed" if f in fixed_findings else "bug"
            print(
                f"  false positive on {entry.name} ({which}): {f.rule} pe{f.pe} line {f.loc.line}"
            )
        if not (found and right):
            print(f"  missed or misplaced: {entry.name} ({entry.rule} at line {entry.line})")

    header = f"{'rule':6s} {'pairs':>5s} {'recall':>7s} {'right line':>10s} "
    header += f"{'saving err':>10s} {'false pos':>9s}"
    print(header)
    totals = dict(pairs=0, found=0, right=0, errors=[], fp=0)
    for rule in sorted(stats):
        s = stats[rule]
        for key in ("pairs", "found", "right", "fp"):
            totals[key] += s[key]
        totals["errors"] += s["errors"]
        _row(rule, s)
    totals["fp"] += clean_fp
    print(f"{'clean':6s} {n_clean:5d} {'':>7s} {'':>10s} {'':>10s} {clean_fp:9d}")
    _row("total", totals)
    if tmp is not None:
        tmp.cleanup()
    return 0


def _row(name, s):
    pairs = s["pairs"]
    recall = f"{s['found'] / pairs:.0%}" if pairs else "-"
    right = f"{s['right'] / pairs:.0%}" if pairs else "-"
    err = f"{statistics.median(s['errors']):.1%}" if s["errors"] else "-"
    print(f"{name:6s} {pairs:5d} {recall:>7s} {right:>10s} {err:>10s} {s['fp']:9d}")


if __name__ == "__main__":
    raise SystemExit(main())
