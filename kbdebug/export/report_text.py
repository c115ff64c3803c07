"""The report as text (``kbdebug report``): status first, then the figures, futures, findings.

Every string that comes from the trace is escaped here before it reaches a terminal.
"""

from __future__ import annotations

import os
import textwrap

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.across_pes import short_id, where_text
from kbdebug.analysis.contention import HbmContention
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.gate import one_line, percent
from kbdebug.analysis.hazards import Hazard
from kbdebug.analysis.model import PEBound, launch_efficiency
from kbdebug.analysis.perturbation import FIGURES_NOTE, Perturbation
from kbdebug.analysis.select import share_of
from kbdebug.analysis.summary import FutureRow, Summary
from kbdebug.analysis.wait_chain import STALL, TRANSIT, WORK, ChainRoot, WaitChain
from kbdebug.export.pe_savings import launch_saving, pe_savings_within_gap
from kbdebug.export.report_hazards import hazard_lines
from kbdebug.export.report_spread import BUSY_SPREAD_FROM, SPREAD_FROM, busy_spread, pe_spread
from kbdebug.safe_text import escape

#: Futures the text report lists in issue order, then the worst stalls.
FIRST_FUTURES = 20
WORST_STALLS = 10
#: Rules about a PE's whole kernel rather than one line (their saving closes each PE's gap).
WHOLE_KERNEL = ("KB106", "KB111")
#: Wait lines the text report lists.
STALL_LINES = 10
#: Links of a wait chain the text report shows before the root (--json has them all).
CHAIN_LINKS = 4


def _status_line(summary: Summary, reason: str | None) -> str:
    if reason is None:
        # The output check the trace records (kbdebug run): a wrong output is no "ok"
        # (diff heads such a run "completed, output check failed" too).
        if summary.check is None:
            return "status: ok"
        check = escape(summary.check.text(), 2048)
        return f"status: ok; {check}" if summary.check.ok else f"status: completed, {check}"
    why = escape(one_line(reason))
    # The reason names the status ("deadlock on PEs 0, 1 at cycle 4: ..."): said once.
    line = f"status: the run did not complete: {why}"
    if summary.n_events:
        line += "; the numbers below cover what was recorded"
    return line


#: A short name for why a run did not complete, by its status (the status line has the why).
_STOPPED_BY = {"deadlock": "deadlock", "error": "kernel error", "interrupted": "interrupted"}


def _no_bound_line(summary: Summary) -> str:
    """The bound of a run that did not complete: none (its end is where it stopped, not
    when its work was done, so a bound or an efficiency would contradict the trace)."""
    if summary.n_events == 0:
        why = "no events"
    else:
        why = _STOPPED_BY.get(summary.status, "the trace was cut off")
    return f"bound: none (the run did not complete: {why})"


def _cycle(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def _where(loc: SourceLoc | None, caller: bool = False) -> str:
    """``FILE:LINE``; with ``caller``, `` ← FILE:LINE`` of the kernel line that called the
    helper holding it (one helper line called from two kernel lines is two places)."""
    if loc is None:
        return "?"
    text = escape(f"{loc.file}:{loc.line}", 512)
    up = loc.caller if caller else None
    if up is None:
        return text
    return f"{text} ← {escape(f'{os.path.basename(up.file)}:{up.line}', 512)}"


def _futures_rows(rows: list[FutureRow]) -> list[str]:
    # A trace naming its tensors (format 1.5) shows the slice moved where it had the address.
    named = any(r.where for r in rows)
    header = [
        "id",
        "op",
        "PE",
        "tensor" if named else "addr",
        "bytes",
        "issued",
        "granted",
        "done",
        "waited",
        "resolved",
        "stall",
        "line",
    ]
    body = [
        [
            str(r.id),
            escape(r.op, 64),
            str(r.pe),
            escape(r.where, 64) if r.where else "-" if r.addr is None else f"{r.addr:#x}",
            f"{r.nbytes:,}",
            _cycle(r.issued),
            _cycle(r.granted),
            _cycle(r.done),
            _cycle(r.waited),
            _cycle(r.resolved),
            f"{r.stall:,}",
            _where(r.loc) if r.loc is not None else "-",
        ]
        for r in rows
    ]
    return _table([header, *body], right={0, 2, 4, 5, 6, 7, 8, 9, 10})


def _finding_lines(f: Finding, share: float, n_pes: int) -> list[str]:
    at = f"at {_where(f.loc)}"
    if f.loc is not None and f.loc.function:
        at += f" in {escape(f.loc.function, 256)}"
    call_loc = f.call_loc or (getattr(f.loc, "caller", None) if f.loc is not None else None)
    if call_loc is not None:
        at += f", called from {_where(call_loc)}"
    pes = f.pes or (f.pe,)
    saving = f"est. saving {f.saving:,} cycles ({percent(share)})"
    if len(pes) > 1:
        low, high = min(f.pe_savings or (0,)), max(f.pe_savings or (0,))
        each = (
            f"{low:,} on each PE"
            if low == high
            else f"per PE {low:,} / {f.pe_saving:,} / {high:,} (min / median / max)"
        )
        how = "the line fixed on every PE" if f.rule not in WHOLE_KERNEL else "all of them fixed"
        saving += f" on the launch's end, {how}; {each}"
    elif f.pe_saving and f.pe_saving != f.saving:
        saving += f" with the line fixed on every PE that has it, {f.pe_saving:,} on this PE"
    times = f"{f.count:,} time{'s' if f.count != 1 else ''}"
    # The message is one PE's: say whose when the finding holds on several.
    named = f.message.startswith("PE")
    message = f"PE {pes[0]}: {f.message}" if len(pes) > 1 and not named else f.message
    lines = [
        f"  {escape(short_id(f), 512)}  {escape(f.title, 64)}",
        f"      {where_text(f, n_pes)}; {times}; {saving}",
        f"      {at}",
        *(f"      with {_where(x, caller=True)}" for x in f.also),
        f"      {escape(message)}",
        f"      fix: {escape(f.suggestion)}",
        f"      id: {escape(f.id, 512)}" + (f"  [{escape(f.line_id, 512)}]" if f.line_id else ""),
    ]
    return lines


def findings_lines(findings: list[Finding], bounds: list[PEBound], n_pes: int) -> list[str]:
    """The findings as the report lists them (what JUnit failures and the pytest plugin's
    assertions show), each escaped."""
    return [line for f in findings for line in _finding_lines(f, share_of(f, bounds), n_pes)]


def _short(loc: SourceLoc | None) -> str:
    """``attention.py:120`` (`` ← kernel.py:40`` for a line in a helper), escaped."""
    if loc is None:
        return "?"
    text = f"{os.path.basename(loc.file) or loc.file}:{loc.line}"
    if loc.caller is not None:
        text += f" ← {os.path.basename(loc.caller.file) or loc.caller.file}:{loc.caller.line}"
    return escape(text, 512)


def _root_text(root: ChainRoot) -> str:
    if root.kind == WORK:
        return f"root: PE {root.pe}'s own work ({root.cycles:,} cycles busy before the send)"
    if root.kind == TRANSIT:
        return (
            f"root: PE {root.pe}'s send was issued before the wait began; "
            f"the message took {root.cycles:,} cycles to arrive"
        )
    if root.kind == STALL:
        return (
            f"root: PE {root.pe} stalled {root.cycles:,} cycles at {_short(root.loc)} "
            f"on a {escape(root.op, 32) or 'command'}"
        )
    why = {
        "unmatched": "a receive no send ever matched",
        "cycle": "the chain comes back to a wait it passed",
        "depth": "followed as far as the chain limit",
    }.get(root.kind, escape(root.kind, 32))
    return f"stops at PE {root.pe} {_short(root.loc)}: {why}"


def wait_chain_lines(chains: list[WaitChain]) -> list[str]:
    """The "waits on other PEs" section: each chain's links, then its root."""
    if not chains:
        return []
    lines = ["", "waits on other PEs (the longest receive waits, followed to their root cause):"]
    for chain in chains:
        first, *rest = chain.links
        lines.append(
            f"  PE {first.pe} {_short(first.wait_loc)} waited {first.stall:,} cycles for "
            f"PE {first.sender}'s send at {_short(first.send_loc)} "
            f"(issued cycle {first.issued:,})"
        )
        for link in rest[: CHAIN_LINKS - 1]:
            lines.append(
                f"      late because PE {link.pe} waited {link.stall:,} cycles at "
                f"{_short(link.wait_loc)} for PE {link.sender}'s send at "
                f"{_short(link.send_loc)} (issued cycle {link.issued:,})"
            )
        if len(rest) > CHAIN_LINKS - 1:
            lines.append(f"      ... {len(rest) - CHAIN_LINKS + 1} more links (--json lists them)")
        lines.append(f"      {_root_text(chain.root)}")
    return lines


def _launch_time(bounds: list[PEBound]) -> int:
    """The launch's time: its first PE's start to its last PE's end."""
    if not bounds:
        return 0
    return max(b.end for b in bounds) - min(b.start for b in bounds)


def render(
    path: str,
    summary: Summary,
    futures: list[FutureRow],
    findings: list[Finding],
    bounds: list[PEBound] | None = None,
    reason: str | None = None,
    *,
    per_pe: bool = False,
    chains: list[WaitChain] | None = None,
    launch: tuple[int, float | None] | None = None,
    contention: list[HbmContention] | None = None,
    hazards: list[Hazard] | None = None,
    perturbation: Perturbation | None = None,
) -> str:
    """The report as text, the status line first; on many PEs the per-PE and busy tables
    are spreads (min, median, max) unless ``per_pe``; ``chains``: the longest receive
    waits followed across PEs (``Analysis.worst_wait_chains``); ``hazards`` are listed
    before the findings (None: not checked, no section); ``perturbation``: the run's,
    said under the kernel and beside the bound's figures."""
    bounds = bounds or []
    shares = bounds
    ran = len(bounds) or summary.n_pes
    spread = ran >= SPREAD_FROM and not per_pe
    busy_spread_too = ran >= BUSY_SPREAD_FROM and not per_pe
    summed = f" (summed over {ran} PEs)" if ran > 1 else ""
    lines = [_status_line(summary, reason), f"trace: {escape(str(path), 1024)}"]
    grid = "x".join(str(g) for g in summary.grid) or "?"
    lines.append(
        f"kernel: {escape(summary.kernel, 256) or '?'} (grid {grid}, {summary.n_pes} PE"
        f"{'s' if summary.n_pes != 1 else ''})"
    )
    if perturbation is not None:
        lines.append(f"perturbed: {perturbation.label()}")
    lines.append(f"end cycle: {summary.end_time:,}  events: {summary.n_events:,}")
    if reason is not None:
        lines.append(_no_bound_line(summary))
        # Nor a PE's: its time is where the run stopped (findings keep their shares).
        bounds, launch = [], None
    elif launch is not None and ran > 1:
        bound, efficiency = launch
        eff = "did not complete" if efficiency is None else f"efficiency {efficiency:.1%}"
        balanced = bound < launch_efficiency(bounds)[0]
        limits = [c for c in contention or () if c.limits]
        if limits:
            how = f"HBM stack {limits[0].stack}'s slots end to end, KB113"
        elif balanced:
            how = "with the late PEs' extra work spread over the others, KB111"
        else:
            how = "no placement of the PEs' issues and waits ends sooner"
        lines.append(f"launch: bound {bound:,} cycles ({how}), {eff} (launch bound / launch time)")
        moved = launch_saving(findings)
        if moved:
            took = _launch_time(bounds)
            share = f" ({percent(moved / took)})" if took else ""
            lines.append(
                f"  KB111 saves up to ~{moved:,}{share} of the launch's time, none of a "
                "PE's gap to its own bound"
            )
    for c in contention or ():
        lines.append(f"  {c.rule} {escape(c.message)}")
        lines.append(f"      fix: {escape(c.suggestion)}")
    lines.append(
        f"stall cycles: {summary.stall_cycles:,}{summed}  dma_read_count: "
        f"{summary.counts['dma_read_count']:,}{summed}"
    )
    if summary.channels and busy_spread_too:
        lines += ["", "busy share by channel kind, per PE (--per-pe lists every channel):"]
        lines += _table(busy_spread(summary.channels), right=set())
    elif summary.channels:
        lines += ["", "busy (grant to release cycles / end cycle):"]
        lines += _table(
            [
                [escape(ch.name, 128), f"{ch.busy_cycles:,}", f"{ch.share:.1%}"]
                for ch in summary.channels
            ],
            right={1, 2},
        )
    if bounds and spread:
        lines += [
            "",
            f"per PE, over {len(bounds)} PEs: kernel time, its critical-path bound, "
            "efficiency (its bound / its kernel time) and what the findings save within its gap "
            "(--per-pe lists each PE):",
        ]
        lines += _table(pe_spread(bounds, pe_savings_within_gap(findings, bounds)), right=set())
    elif bounds:
        savings = pe_savings_within_gap(findings, bounds)
        lines += [
            "",
            "per PE: kernel time, its critical-path bound (the least any placement of its "
            "issues allows), efficiency (its bound / its kernel time) and what the findings save "
            "together, at most that gap:",
        ]
        lines += _table(
            [
                [
                    f"PE{b.pe}",
                    f"achieved {b.achieved:,}",
                    f"bound {b.bound:,}",
                    "did not complete"
                    if b.efficiency is None
                    else f"efficiency {b.efficiency:.1%}",
                    f"findings save up to ~{savings.get(b.pe, 0):,}"
                    + (f" ({percent(savings.get(b.pe, 0) / b.achieved)})" if b.achieved else ""),
                ]
                for b in bounds
            ],
            right=set(),
        )
    if perturbation is not None and (bounds or launch is not None):
        lines += textwrap.wrap(
            f"note: {FIGURES_NOTE}.", width=100, initial_indent="  ", subsequent_indent="    "
        )
    if summary.stall_by_line:
        shown = summary.stall_by_line[:STALL_LINES]
        more = len(summary.stall_by_line) - len(shown)
        title = f"stall by wait line{summed}:" + (f" ({more} more in --json)" if more else "")
        lines += ["", title]
        lines += _table(
            [
                [
                    _where(s.loc, caller=True),
                    f"{s.waits:,} wait{'s' if s.waits != 1 else ''}",
                    f"{s.stall_cycles:,} cycles",
                ]
                for s in shown
            ],
            right={1, 2},
        )
    lines += wait_chain_lines(chains or [])
    if futures:
        first = futures[:FIRST_FUTURES]
        if len(futures) > len(first):
            title = f"futures (first {len(first)} of {len(futures):,} by id; --json lists all):"
        else:
            title = f"futures ({len(futures)}):"
        lines += ["", title]
        lines += _futures_rows(first)
        worst = sorted((r for r in futures if r.stall > 0), key=lambda r: (-r.stall, r.id))
        worst = worst[:WORST_STALLS]
        if worst:
            lines += ["", f"worst stalls ({len(worst)} futures):"]
            lines += _futures_rows(worst)
    if hazards is not None:
        lines += hazard_lines(hazards)
    if findings:
        lines += ["", f"findings ({len(findings)}, largest estimated saving first):"]
    else:
        lines += ["", "findings: none"]
    lines += findings_lines(findings, shares, ran)
    return "\n".join(lines) + "\n"
