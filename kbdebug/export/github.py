"""The findings as GitHub Actions annotations (``kbdebug report --format github``).

``::warning file=F,line=L,title=T::MESSAGE`` lines put each finding on its line of the
pull request. GitHub shows at most ten annotations of each kind (error, warning,
notice) per step, so the largest findings of each kind are annotated (hazards first,
as errors) and one plain line says how many more there are. Values are escaped as the
Actions toolkit escapes them (``%``, CR and LF in the message; ``:`` and ``,`` too in
a property), and what is left of control characters is made visible.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kbdebug.analysis.gate import one_line
from kbdebug.export import review
from kbdebug.safe_text import escape

if TYPE_CHECKING:
    from kbdebug.analysis import Analysis
    from kbdebug.analysis.finding import Finding

#: Annotations GitHub shows per step, per kind.
PER_KIND = 10
#: GitHub's annotation command of each SARIF level.
COMMAND = {review.ERROR: "error", review.WARNING: "warning", review.NOTE: "notice"}
#: Characters of trace text kept in one annotation at most.
MESSAGE_CHARS = 1024


def escape_data(text: str) -> str:
    """A command's message escaped as GitHub's toolkit does (``%``, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A command's property value escaped as GitHub's toolkit does (``%``, CR, LF, ``:``, ``,``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotations(analysis: Analysis, trace: str) -> str:
    """The annotation lines of ``analysis``, then a line counting the findings left out."""
    lines: list[str] = []
    used = dict.fromkeys(COMMAND.values(), 0)
    reason = analysis.incomplete
    if reason is not None:
        lines.append(_command("error", {"title": "kbdebug"}, f"the run did not complete: {reason}"))
        used["error"] += 1
    left = 0
    for f in [*review.hazards(analysis), *review.ranked(analysis)]:
        kind = COMMAND[review.level(f.rule)]
        if used[kind] >= PER_KIND:
            left += 1
            continue
        used[kind] += 1
        lines.append(_annotation(f, analysis))
    if left:
        lines.append(
            f"kbdebug: {left} more finding{'s' if left != 1 else ''} not annotated (GitHub shows "
            f"{PER_KIND} of each kind per step); kbdebug report {escape(trace, 512)} lists them all"
        )
    return "".join(line + "\n" for line in lines)


def _annotation(f: Finding, analysis: Analysis) -> str:
    properties = {}
    if review.in_source(f.loc):
        properties = {"file": f.loc.file, "line": str(f.loc.line)}
    properties["title"] = f"{f.rule} {f.title} ({review.pes_text(f)})"
    message = f"{f.message}; fix: {f.suggestion}; {review.saving_text(f, analysis)}; id {f.id}"
    return _command(COMMAND[review.level(f.rule)], properties, message)


def _command(kind: str, properties: dict[str, str], message: str) -> str:
    shown = ",".join(f"{k}={_safe(escape_property(_cut(v)))}" for k, v in properties.items())
    return f"::{kind} {shown}::{_safe(escape_data(_cut(one_line(message))))}"


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def _safe(text: str) -> str:
    # The toolkit's escapes first, so the control characters left are the ones a terminal
    # would act on.
    return escape(text, 4 * MESSAGE_CHARS)
