"""A launched scenario's numpy check: what failed, in one line, and the verdict a trace's
footer carries (what `kbdebug run` and explore's kept trace both write)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from emulator.scenarios import Scenario
from kbdebug.launch.check_failure import check_failure
from kbdebug.launch.check_report import CheckReport, wrong_block_report


def run_check(scenario: Scenario, traceback: bool = False) -> tuple[str | None, float, str | None]:
    """Run the scenario's numpy check: (None, or what failed; wall seconds it took; what
    the failed assertion said in one line, None unless the output was wrong).

    A check that raises anything but AssertionError is a bug in the check, not a wrong
    output: one line naming the exception and the check's line that raised it."""
    started = time.perf_counter()
    try:
        scenario.check(scenario.memory)
    except AssertionError as e:
        said, detail = check_failure(e)
        lines = [f"output check failed: {said}", *(f"  {line}" for line in detail)]
        return "\n".join(lines), time.perf_counter() - started, said
    except Exception as e:  # noqa: BLE001 - the user's code: say what it raised, where
        if traceback:
            import traceback as tb

            tb.print_exc(file=sys.stderr)
        where = _check_line(scenario.check, e)
        text = " ".join(str(e).split())[:500]
        return (
            f"the scenario's check raised {type(e).__name__}: {text}{where} (the trace is "
            "written; --traceback shows the check's traceback)",
            time.perf_counter() - started,
            None,
        )
    return None, time.perf_counter() - started, None


def checked_verdict(
    scenario: Scenario, trace: Path | None, traceback: bool = False
) -> tuple[str | None, float, CheckReport | None, dict | None]:
    """Check ``scenario``'s output and, when it is wrong, find the first wrong block in
    ``trace`` (written but for its footer; None: a stream, not searched): (what failed or
    None, seconds, the wrong block's report or None, the footer's verdict or None when
    the check itself raised)."""
    message, seconds, said = run_check(scenario, traceback)
    found = None
    if message is not None and trace is not None:
        found = wrong_block_report(trace, scenario, cache=False)
    if message is None:
        return None, seconds, None, {"ok": True, "message": None, "block": None}
    if said is None:  # the check raised something else: a bug in it, not a verdict
        return message, seconds, found, None
    block = found.block if found is not None else None
    return message, seconds, found, {"ok": False, "message": said, "block": block}


def _check_line(check, error: BaseException) -> str:
    """`` at FILE:LINE``: the deepest line of the check's own file in the traceback."""
    import traceback as tb

    code = getattr(check, "__code__", None)
    frames = tb.extract_tb(error.__traceback__)
    mine = [f for f in frames if code is not None and f.filename == code.co_filename]
    frame = (mine or frames or [None])[-1]
    return "" if frame is None else f" at {Path(frame.filename).name}:{frame.lineno}"
