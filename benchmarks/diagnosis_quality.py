"""Diagnosis quality over tests/corpus: are the findings true, on the right line, honest in cycles?

    python benchmarks/diagnosis_quality.py [--out DIR]

For every pair (a kernel with one serialization bug and its fixed twin) and
every clean kernel, at every size the module gives (``sizes``: small and
large; a module without ``sizes`` has one, ``default``), records the traces,
runs ``kbdebug.analysis.find_all`` and prints per rule and size: pairs, recall
(the bug got a finding of its rule on every affected PE), right-line rate
(that finding names the marked line, and the marked call line for helpers),
saving accuracy (median |saving - measured| / measured, measured = bug end
cycle - fixed end cycle per affected PE) and false positives (findings on
fixed twins and clean kernels, and findings of other rules or on other PEs on
bug kernels); then the clean kernels and the totals per size, and the totals
over every size.
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

from corpus._harness import DEFAULT_SIZE, SIZE_LABELS, entries, record, same_place  # noqa: E402

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

    stats = defaultdict(_blank)  # by (rule, size)
    clean = defaultdict(lambda: dict(kernels=0, fp=0))  # by size
    for entry in entries():
        where = entry.id
        if not entry.is_pair:
            c = clean[entry.size]
            c["kernels"] += 1
            findings, _ = _findings(entry, "clean", directory)
            c["fp"] += len(findings)
            for f in findings:
                print(f"  false positive on clean {where}: {f.rule} pe{f.pe} line {f.loc.line}")
            continue
        s = stats[entry.rule, entry.size]
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
            print(f"  false positive on {where} ({which}): {f.rule} pe{f.pe} line {f.loc.line}")
        if not (found and right):
            print(f"  missed or misplaced: {where} ({entry.rule} at line {entry.line})")

    sizes_seen = sorted({size for _, size in stats} | set(clean), key=_size_order)
    header = f"{'rule':6s} {'size':7s} {'pairs':>5s} {'recall':>7s} {'right line':>10s} "
    header += f"{'saving err':>10s} {'within 20%':>10s} {'false pos':>9s}"
    print(header)
    for rule in sorted({rule for rule, _ in stats}):
        for size in sizes_seen:
            if (rule, size) in stats:
                _row(rule, size, stats[rule, size])
    per_size = {}
    for size in sizes_seen:
        t = _blank()
        for (_, sz), s in stats.items():
            if sz == size:
                _add(t, s)
        t["fp"] += clean[size]["fp"] if size in clean else 0
        per_size[size] = t
    for size in sizes_seen:
        c = clean.get(size, dict(kernels=0, fp=0))
        print(
            f"{'clean':6s} {size:7s} {c['kernels']:5d} {'':>7s} {'':>10s} {'':>10s} {'':>10s} "
            f"{c['fp']:9d}"
        )
    total = _blank()
    for size in sizes_seen:
        _row("total", size, per_size[size])
        _add(total, per_size[size])
    _row("total", "all", total)
    if tmp is not None:
        tmp.cleanup()
    return 0


def _blank():
    return dict(pairs=0, found=0, right=0, errors=[], fp=0)


def _add(into, s):
    for key in ("pairs", "found", "right", "fp"):
        into[key] += s[key]
    into["errors"] += s["errors"]


def _size_order(size):
    order = (*SIZE_LABELS, DEFAULT_SIZE)
    return (order.index(size) if size in order else len(order), size)


def _row(name, size, s):
    pairs = s["pairs"]
    recall = f"{s['found'] / pairs:.0%}" if pairs else "-"
    right = f"{s['right'] / pairs:.0%}" if pairs else "-"
    err = f"{statistics.median(s['errors']):.1%}" if s["errors"] else "-"
    errors = s["errors"]
    close = f"{sum(e <= 0.2 for e in errors)}/{len(errors)}" if errors else "-"
    print(
        f"{name:6s} {size:7s} {pairs:5d} {recall:>7s} {right:>10s} {err:>10s} {close:>10s} "
        f"{s['fp']:9d}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
