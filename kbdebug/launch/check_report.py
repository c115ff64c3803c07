"""What `kbdebug run` says under a failed check: the first wrong block, from the scenario's
reference per block (kbdebug.analysis.wrong_block), and where the app opens for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from emulator.scenarios import Scenario
from kbdebug.safe_text import escape


@dataclass(frozen=True)
class CheckReport:
    """The lines to print under the failed check, and the position to open the app at."""

    lines: list[str]
    position: int | None = None
    #: What the app's status says it stopped at (escaped), with ``position``.
    why: str = ""
    #: The first wrong block's slice (``O[16:32, :]``, as recorded), None without one.
    block: str | None = None

    @property
    def open_at(self) -> tuple[int, str] | None:
        """(position, why) for the app, None when there is no store to open at."""
        return None if self.position is None else (self.position, self.why)


def wrong_block_report(trace: Path, scenario: Scenario, *, cache: bool = True) -> CheckReport:
    """The first stored block of ``trace``'s run that differs from ``scenario.reference``.

    Without a reference per block, one line saying how to get one. Text from the trace
    and from the user's reference is escaped; a reference that raises is one line.
    ``cache`` False keeps the index of ``trace`` out of the cache (a trace still being
    written)."""
    if scenario.reference is None:
        return CheckReport(
            ["check:  a Scenario(reference=...) per block names the first wrong block here"]
        )
    from kbdebug.analysis.wrong_block import first_wrong_block
    from kbdebug.replay import Replay

    def read(addr: int, shape: tuple[int, ...], dtype: str):
        return scenario.memory.get(addr, shape, dtype)

    try:
        replay = Replay.open(trace, cache=cache)
        wrong = first_wrong_block(replay, scenario.reference, read)
    except (OSError, ValueError) as e:
        return CheckReport([f"check:  cannot point at the wrong block: {escape(str(e), 300)}"])
    except Exception as e:  # noqa: BLE001 - the user's reference: say what it raised
        text = escape(" ".join(str(e).split()), 300)
        return CheckReport([f"check:  the scenario's reference raised {type(e).__name__}: {text}"])
    if wrong is None:
        return CheckReport(["check:  every stored block matches the reference per block"])
    lines = [escape(line, 500) for line in wrong.lines()]
    return CheckReport(
        [f"check:  {lines[0]}", *(f"        {line.lstrip()}" for line in lines[1:])],
        wrong.position,
        escape(wrong.stop_text(), 300),
        wrong.store.where,
    )
