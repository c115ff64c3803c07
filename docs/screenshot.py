"""Regenerate docs/kbdebug.svg: the app stopped at the first stalled wait of a bundled trace.

Run from the repository root: ``python docs/screenshot.py`` (``--help`` for options).
The app is driven headless by Textual's test harness, as a user would drive it:
``w`` (break on stalled ``tl.wait``), ``c`` (continue: the first stop is the
blocking ``tl.load`` of ``q``), ``c`` again (the ``tl.wait`` that waits right after
its ``load_async``, the flaw), then ``5`` (the findings pane, once the findings have
arrived). It opens the trace through ``kbdebug.commands.replay.make_app``, the entry
point ``kbdebug TRACE`` uses, so the picture is what the command shows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT / "traces" / "flawed_prefetch.kbt"
DEFAULT_OUT = ROOT / "docs" / "kbdebug.svg"
#: Columns and rows of the headless terminal: wide enough for every pane's main columns.
DEFAULT_SIZE = (120, 36)
#: How long to wait for the trace to open, the stop and the findings before giving up.
DEADLINE_SECONDS = 60.0
#: Stops at stalled waits before the picture: the second is the flawed "prefetch".
STOPS = 2


async def wait_until(pilot, ready, what: str, deadline: float) -> None:
    """Let the app run until ``ready()`` holds; SystemExit naming ``what`` past ``deadline``."""
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshot: gave up waiting for {what}")
        await pilot.pause(0.05)


async def capture(trace: Path, out: Path, size: tuple[int, int]) -> str:
    """Open ``trace``, stop at its second stalled wait, show the findings, write the SVG."""
    from kbdebug.commands.replay import make_app

    app = make_app(trace)
    deadline = time.monotonic() + DEADLINE_SECONDS
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: app.replay is not None, "the trace to open", deadline)
        await pilot.press("w")
        for stop in range(1, STOPS + 1):
            before = app.position
            await pilot.press("c")
            await wait_until(
                pilot,
                lambda before=before: app.position != before,
                f"stop {stop} at a stalled wait",
                deadline,
            )
        stopped_at = str(app.status)
        await wait_until(pilot, lambda: app.findings is not None, "the findings", deadline)
        await pilot.press("5")
        await pilot.pause()
        svg = app.export_screenshot(title=f"kbdebug {trace.name}")
    out.write_text(svg, encoding="utf-8")
    return stopped_at


def main(argv: list[str] | None = None) -> int:
    """Write the screenshot and say where the app stopped."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="a .kbt trace")
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT, help="the SVG to write")
    parser.add_argument(
        "--size",
        default=f"{DEFAULT_SIZE[0]}x{DEFAULT_SIZE[1]}",
        help="terminal COLUMNSxROWS (default %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        columns, rows = (int(n) for n in args.size.lower().split("x"))
    except ValueError:
        parser.error(f"--size: expected COLUMNSxROWS, e.g. 120x36, not {args.size!r}")
    if not args.trace.is_file():
        parser.error(f"--trace: no such file: {args.trace}")
    # Keep the index cache out of $HOME unless the caller chose a place.
    os.environ.setdefault("KBDEBUG_CACHE_DIR", str(Path(tempfile.gettempdir()) / "kbcache-docs"))
    status = asyncio.run(capture(args.trace, args.out, (columns, rows)))
    print(f"wrote {args.out} ({columns}x{rows}): {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
