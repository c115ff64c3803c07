"""What the code-review formats (SARIF, GitHub, JUnit, Markdown) share: the rules' help,
their levels, the findings in report order and where each one is in the source.

Every writer reads an :class:`~kbdebug.analysis.Analysis`, never the app. Strings from
the trace stay as recorded here; each writer escapes them for its own format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from emulator.trace.schema import SourceLoc
from kbdebug.analysis.finding import RULES
from kbdebug.analysis.gate import percent
from kbdebug.analysis.hazards import HAZARD_RULES, Hazard, hazard_kind
from kbdebug.analysis.select import in_report_order, share_of
from kbdebug.export.report_text import findings_lines
from kbdebug.safe_text import escape

if TYPE_CHECKING:
    from kbdebug.analysis import Analysis
    from kbdebug.analysis.finding import Finding

#: SARIF levels (GitHub's annotation kinds are ``error``, ``warning`` and ``notice``).
ERROR, WARNING, NOTE = "error", "warning", "note"
#: Rules about a whole kernel or the launch's bound, not one line to change: notes.
NOTE_RULES = ("KB106", "KB111", "KB113")


@dataclass(frozen=True)
class RuleHelp:
    """What a rule finds (one line) and how to read and fix it (a paragraph)."""

    short: str
    full: str


#: Each rule's help, from the rule table of docs/findings.md.
RULE_HELP = {
    "KB101": RuleHelp(
        "A blocking tl.load whose transfer could run ahead, under other work.",
        "The kernel stalls on a blocking tl.load while its transfer could have run "
        "under the work before the value's first use. Issue it as tl.load_async a few "
        "tiles ahead and tl.wait right before the first use. The line named is the load.",
    ),
    "KB102": RuleHelp(
        "A load_async waited right after its issue, with (almost) no work between.",
        "A tl.load_async issued below work it could precede and waited with (almost) "
        "none between, so its whole transfer and latency stall the kernel. Issue it "
        "as many tiles ahead as the fix says, each right after the wait of the tile "
        "that many before it. The line named is the issue.",
    ),
    "KB103": RuleHelp(
        "A load queued on the read channel behind loads needed later.",
        "The read channel serves transfers in issue order; this load was queued behind "
        "loads whose values are needed after its own. Move its issue above theirs. The "
        "line named is the issue to move up.",
    ),
    "KB104": RuleHelp(
        "A tl.wait on a load placed well before its data's first use.",
        "A tl.wait on a load placed before work that does not need its data: the kernel "
        "stalls where it could have worked (a receive's is KB109). Move the wait down to "
        "the data's first use. The line named is the wait.",
    ),
    "KB106": RuleHelp(
        "The kernel runs well below its critical-path bound, unexplained by other rules.",
        "Bound / achieved is under 90 % and the other findings leave the gap unexplained. "
        "Open the trace in kbdebug to see where the kernel stalls. The line named is the "
        "kernel's def.",
    ),
    "KB107": RuleHelp(
        "A prefetch issued as early as the loop allows still stalls: too shallow.",
        "The load is issued as early as the loop allows and still stalls; the suggestion "
        "gives the prefetch depth that hides the transfer and its latency. The line named "
        "is the issue.",
    ),
    "KB108": RuleHelp(
        "A wait on a store or send long before anything needs it landed.",
        "A tl.wait on a store or send stalls long before anything needs it: drop it when "
        "nothing reads the bytes back, or wait right before the load that reads them. "
        "The line named is the wait.",
    ),
    "KB109": RuleHelp(
        "A receive waited before work that does not need the message.",
        "A receive is waited before work that does not need the message, whatever the "
        "sender's speed. Move the wait to the message's first use (receives waited side "
        "by side are moved together). The line named is the wait.",
    ),
    "KB110": RuleHelp(
        "Consecutive tl.composite calls over the same B, one per row tile.",
        "Each composite call restarts the pipeline and reads B and its first A tile cold. "
        "Make one call over all the rows. The line named is the first composite call.",
    ),
    "KB111": RuleHelp(
        "A few PEs do clearly more work than the rest and end well after them.",
        "One PE or a few end well after the rest and do at least 1.25x the median PE's "
        "work. Split the work evenly over the PEs. The line named is the kernel's def.",
    ),
    "KB112": RuleHelp(
        "A tl.send issued below work its data does not need, while its receiver waited.",
        "The send's data was ready at an earlier line while the receive on another PE "
        "waited for the message. Issue the send right after the line that produces its "
        "data. The line named is the send.",
    ),
    "KB113": RuleHelp(
        "PEs sharing an HBM stack queued on it (information, never a finding).",
        "PEs sharing an HBM stack queued on it; its slots end to end bound the launch. "
        "Move fewer bytes (tiling, reuse) or spread the traffic over more stacks or over "
        "time.",
    ),
    "KB201": RuleHelp(
        "A load and a store of overlapping bytes that no wait or message orders: the "
        "load may read the old or the new bytes.",
        "A store and a later load of overlapping HBM bytes, on one PE or across PEs, with "
        "no wait (and no waited message) ordering the store's landing before the load's "
        "read: the value read depends on timing. Wait on the store (or send after the "
        "waited store) before the load; the suggestion names the latest point that orders "
        "them. The line named is the second access.",
    ),
    "KB202": RuleHelp(
        "A store may land over bytes before a load that no wait orders has read them.",
        "A load and a later store of overlapping HBM bytes with nothing ordering the "
        "load's read before the store's landing: the load may read the new bytes. Wait on "
        "the load before the store. The line named is the second access.",
    ),
    "KB203": RuleHelp(
        "Two stores to overlapping bytes that no wait orders: which lands last depends on timing.",
        "Two stores of overlapping HBM bytes with nothing ordering their landings: the bytes "
        "left depend on timing. Wait on the first store before the second. The line named is "
        "the second store.",
    ),
    "KB204": RuleHelp(
        "A load or store reaches outside the tensor it starts in.",
        "A load or store whose byte range starts in one named tensor and runs past its end "
        "(into another tensor or bytes no tensor names), or starts before one and runs into "
        "it: it read or wrote bytes its line did not mean to (an index or page past the "
        "end). Keep the range inside the tensor. The line named is the access.",
    ),
}


def is_hazard_rule(rule: str) -> bool:
    """Whether ``rule`` is a hazard's (KB2xx: a result that depends on timing)."""
    return rule.startswith("KB2")


def level(rule: str) -> str:
    """The rule's SARIF level: hazards are errors, whole-kernel rules notes, the rest warnings."""
    if is_hazard_rule(rule):
        return ERROR
    return NOTE if rule in NOTE_RULES else WARNING


def rule_help(rule: str, title: str = "") -> RuleHelp:
    """The help of ``rule``; a rule this table does not know gets its title as help."""
    known = RULE_HELP.get(rule)
    if known is not None:
        return known
    name = title or RULES.get(rule, rule)
    what = "A result that depends on timing (a missing wait)" if is_hazard_rule(rule) else name
    return RuleHelp(f"{what}.", f"{rule} {name}: see kbdebug report for the lines and the fix.")


def ranked(analysis: Analysis) -> list[Finding]:
    """The findings in report order: largest estimated saving first (then share, PE, id)."""
    return in_report_order(analysis.findings, analysis.bounds)


def hazards(analysis: Analysis) -> list[Hazard]:
    """The hazards (KB2xx: results that depend on timing, bytes outside their tensor),
    listed before the findings."""
    return list(analysis.hazards)


def all_rules(analysis: Analysis) -> list[tuple[str, str]]:
    """(code, name) of every rule a result may name: each KB rule, hazards' included, and
    any rule of this trace's hazards the tables do not know."""
    rules = {**RULES, **HAZARD_RULES}
    for h in hazards(analysis):
        rules.setdefault(h.rule, h.title)
    return sorted(rules.items())


def hazard_lines(hazard: Hazard) -> list[str]:
    """A hazard as the text report lists a finding: rule, lines, what happened, the fix
    and its id, escaped."""
    first, second = hazard.first, hazard.second
    pes = f"across PEs {first.pe} and {second.pe}" if hazard.across_pes else f"on PE {second.pe}"
    times = f"{hazard.count:,} time{'s' if hazard.count != 1 else ''}"
    return [
        f"  {escape(hazard.rule, 16)} {escape(_loc_text(second.loc), 512)}  "
        f"{escape(hazard.title, 64)}",
        f"      {pes}; {times}; {escape(hazard.where, 256)}",
        (
            f"      {escape(second.op, 32)} at {escape(_loc_text(second.loc), 512)}"
            if first is second  # one access outside its tensor (KB204), no pair
            else f"      first {escape(first.op, 32)} at {escape(_loc_text(first.loc), 512)}, "
            f"then {escape(second.op, 32)} at {escape(_loc_text(second.loc), 512)}"
        ),
        f"      {escape(hazard.message)}",
        f"      fix: {escape(hazard.suggestion)}",
        f"      id: {escape(hazard.id, 512)}",
    ]


def listed(items: list[Finding | Hazard], analysis: Analysis) -> str:
    """Hazards and findings as the text report lists them, one line each, escaped."""
    n_pes = len(analysis.bounds) or analysis.summary.n_pes
    lines = []
    for item in items:
        if isinstance(item, Hazard):
            lines += hazard_lines(item)
        else:
            lines += findings_lines([item], analysis.bounds, n_pes)
    return "\n".join(lines)


def _loc_text(loc: SourceLoc | None) -> str:
    return "?" if loc is None else f"{loc.file}:{loc.line}"


def caller_of(f: Finding | Hazard) -> SourceLoc | None:
    """The kernel line that called the helper holding the finding's line (None outside one)."""
    return f.call_loc or (f.loc.caller if f.loc is not None else None)


def in_source(loc: SourceLoc | None) -> bool:
    """Whether ``loc`` names a line of a file (not ``<string>``, not line 0)."""
    return loc is not None and loc.line >= 1 and bool(loc.file) and not loc.file.startswith("<")


def saving_text(f: Finding | Hazard, analysis: Analysis) -> str:
    """``est. saving 4,120 cycles, 18 % of the kernel time``; hazards have none."""
    if is_hazard_rule(f.rule):
        return f"{hazard_kind(f.rule)}: fix it whatever its size"
    share = share_of(f, analysis.bounds)
    return f"est. saving {f.saving:,} cycles, {percent(share)} of the kernel time"


def pes_text(f: Finding | Hazard) -> str:
    """``PE 0``, ``PEs 0, 1, 2`` or ``64 PEs``: where the finding holds."""
    pes = f.pes or (f.pe,)
    if len(pes) == 1:
        return f"PE {pes[0]}"
    if len(pes) > 8:
        return f"{len(pes)} PEs"
    return "PEs " + ", ".join(map(str, pes))
