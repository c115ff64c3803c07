"""The report as JUnit XML (``kbdebug report --format junit``), for CI systems' test tabs.

One ``testsuite`` per trace and one ``testcase`` per PE that ran the kernel
(``classname`` ``kbdebug.KERNEL``, name ``PE N``). A PE's case fails when a finding
holds on it, its ``failure`` listing them as ``kbdebug report`` does; with
``--fail-on`` only the findings the gate counts fail it (the others are listed in its
``system-out``). Hazards always fail. A run that did not complete gives each case an
``error`` saying why. Every string is escaped (control characters are not XML).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from kbdebug.analysis.gate import Gate, one_line
from kbdebug.export import review
from kbdebug.safe_text import escape

if TYPE_CHECKING:
    from kbdebug.analysis import Analysis
    from kbdebug.analysis.finding import Finding
    from kbdebug.analysis.hazards import Hazard


def to_junit(analysis: Analysis, trace: str, gate: Gate | None = None) -> str:
    """The JUnit XML document of ``analysis`` (the trace ``trace``); ``gate``: the
    ``--fail-on`` outcome, whose matched findings alone fail a case when it has selectors."""
    summary = analysis.summary
    bounds = analysis.bounds
    kernel = escape(summary.kernel or "?", 256)
    found = [*review.hazards(analysis), *review.ranked(analysis)]
    counted = None
    if gate is not None and gate.selectors:
        counted = {f.id for f, _ in gate.matched}
    reason = analysis.incomplete
    pes = [b.pe for b in bounds] or list(range(summary.n_pes))

    suite = ET.Element("testsuite", name=f"kbdebug {kernel} ({escape(trace, 1024)})")
    properties = ET.SubElement(suite, "properties")
    bound, efficiency = analysis.launch_efficiency
    for name, value in (
        ("trace", escape(trace, 1024)),
        ("kernel", kernel),
        ("status", escape(summary.status, 32)),
        ("end_cycle", str(summary.end_time)),
        ("launch_bound", "" if reason is not None else str(bound)),  # none: it stopped
        ("launch_efficiency", "" if efficiency is None else f"{efficiency:.4f}"),
    ):
        ET.SubElement(properties, "property", name=name, value=value)
    failures = errors = 0
    for pe in pes:
        case = ET.SubElement(suite, "testcase", classname=f"kbdebug.{kernel}", name=f"PE {pe}")
        case.set("time", "0")
        here = [f for f in found if pe in (f.pes or (f.pe,))]
        failing = [
            f for f in here if counted is None or f.id in counted or review.is_hazard_rule(f.rule)
        ]
        text = _listed(failing, analysis)
        if reason is not None:
            errors += 1
            error = ET.SubElement(
                case, "error", message=f"the run did not complete: {escape(one_line(reason))}"
            )
            error.set("type", escape(summary.status, 32))
            error.text = text
        elif failing:
            failures += 1
            failure = ET.SubElement(case, "failure", message=_headline(failing))
            failure.set("type", ",".join(sorted({escape(f.rule, 16) for f in failing})))
            failure.text = text
        others = [f for f in here if f not in failing]
        if others:
            ET.SubElement(case, "system-out").text = (
                "findings below the --fail-on gate:\n" + _listed(others, analysis)
            )
    suite.set("tests", str(len(pes)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", "0")
    suite.set("time", "0")
    root = ET.Element("testsuites", name="kbdebug")
    for key in ("tests", "failures", "errors"):
        root.set(key, suite.get(key))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _headline(items: list[Finding | Hazard]) -> str:
    hazards = sum(review.is_hazard_rule(f.rule) for f in items)
    findings = len(items) - hazards
    parts = [f"{hazards} hazard{'s' if hazards != 1 else ''}"] if hazards else []
    if findings:
        largest = max(f.saving for f in items)
        parts.append(
            f"{findings} finding{'s' if findings != 1 else ''}, the largest est. saving "
            f"{largest:,} cycles"
        )
    return ", ".join(parts)


def _listed(items: list[Finding | Hazard], analysis: Analysis) -> str:
    return review.listed(items, analysis) + "\n" if items else ""
