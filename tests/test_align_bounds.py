"""Line alignment in bounded time (kbdebug.analysis.align): the sources that used to take
minutes or hours (edited 9,000-character lines, 30,000 blank lines, one 16 MiB line, a
changed block of long look-alike lines) align in seconds with sensible pairs, through
``LineMap`` on the sources (what diff and compare build) and through ``kbdebug diff`` and
the compare app's ``Comparison`` on traces that embed them."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
from trace_synth import KERNEL_FILE, KERNEL_SOURCE, decode_like_events, make_header

from emulator.trace.writer import TraceWriter
from kbdebug.analysis import line_pairing
from kbdebug.analysis.align import LineMap
from kbdebug.analysis.compare import Comparison
from kbdebug.cli import main
from kbdebug.replay import Replay

#: Seconds any one alignment below may take (each took 26 s to hours before).
LIMIT = 5.0
F = "k.py"


def timed(a: str | dict, b: str | dict) -> tuple[LineMap, float]:
    """A LineMap of ``a`` and ``b`` (sources of ``k.py``, or dicts), every line looked up
    once, and the seconds that took."""
    a, b = ({F: a} if isinstance(a, str) else a), ({F: b} if isinstance(b, str) else b)
    start = time.perf_counter()
    lines = LineMap(a, b)
    for file, text in a.items():
        for line in range(1, min(len(text.splitlines()), 2000) + 1):
            lines.b_line(file, line)
    return lines, time.perf_counter() - start


def words(seed: int, n: int) -> str:
    """``n`` characters of lower-case words, different for each seed."""
    rng = random.Random(seed)
    out: list[str] = []
    while sum(map(len, out)) + len(out) < n:
        out.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8)))
    return " ".join(out)[:n]


def long_lines(edited: bool) -> str:
    """The kernel, then six 9,000-character lines (some 60 KB), edited in their middle."""
    lines = [f"x{k} = '{words(k, 9000)}'" for k in range(6)]
    if edited:
        lines = [line[:4500] + "EDIT" + line[4504:] for line in lines]
    return KERNEL_SOURCE + "\n".join(lines) + "\n"


BLANK_TAIL = KERNEL_SOURCE + "\n" * 30_000
ONE_LINE = "x = 1  # " + "y" * (16 * 1024 * 1024 - 100)


# --- LineMap on the sources --------------------------------------------------------------


def test_edited_long_lines_pair_with_their_edits_in_bounded_time():
    a, b = long_lines(False), "# a new first line\n" + long_lines(True)
    lines, seconds = timed(a, b)
    assert seconds < LIMIT
    n = len(a.splitlines())
    assert [lines.b_line(F, x) for x in range(1, n + 1)] == [(F, x + 1) for x in range(1, n + 1)]
    assert lines.a_line(F, 1) is None


def test_a_kernel_ending_in_30000_blank_lines_aligns_with_itself_and_an_edit():
    lines, seconds = timed(BLANK_TAIL, BLANK_TAIL)
    assert seconds < LIMIT
    n = len(BLANK_TAIL.splitlines())
    assert all(lines.b_line(F, x) == (F, x) for x in (1, 9, 12, n // 2, n))
    # A line inserted above the wait and one blank line fewer at the end.
    edited = BLANK_TAIL.replace(
        "        k = tl.wait(f_k)\n", "        x = 1\n        k = tl.wait(f_k)\n"
    )
    lines, seconds = timed(BLANK_TAIL, edited[:-1])
    assert seconds < LIMIT
    wait = KERNEL_SOURCE.splitlines().index("        k = tl.wait(f_k)") + 1
    assert lines.b_line(F, wait - 1) == (F, wait - 1)
    assert lines.b_line(F, wait) == (F, wait + 1)
    assert lines.a_line(F, wait) is None
    end = len(KERNEL_SOURCE.splitlines())
    assert lines.b_line(F, end) == (F, end + 1) and lines.b_line(F, n) == (F, n)


@pytest.mark.parametrize("edited", [False, True], ids=["itself", "edited"])
def test_a_source_of_one_16_mib_line_aligns_in_seconds(edited):
    other = ONE_LINE[:5_000_000] + "z" + ONE_LINE[5_000_001:] if edited else ONE_LINE
    lines, seconds = timed(ONE_LINE, other)
    assert seconds < LIMIT
    assert lines.b_line(F, 1) == (F, 1) and lines.a_line(F, 1) == (F, 1)


def test_a_changed_block_of_long_look_alike_lines_stays_within_its_budget():
    """Lines of 2 letters are difflib's worst case: as many as the budget allows pair by
    similarity in about a second; a larger block of as many lines pairs by position."""
    rng = random.Random(0)

    def block(n: int) -> str:
        return "\n".join("".join(rng.choice("ab") for _ in range(200)) for _ in range(n))

    for n in (30, 300):
        lines, seconds = timed(block(n), block(n))
        assert seconds < LIMIT, n
        assert lines.b_line(F, 1) is not None
    assert [lines.b_line(F, x) for x in (1, 150, 300)] == [(F, 1), (F, 150), (F, 300)]


def test_huge_files_align_by_position_around_their_common_start_and_end():
    n = line_pairing.HUGE_LINES
    a = "".join(f"line {k}\n" for k in range(n))
    b = a.replace("line 1000\n", "line 1000\nnew\n", 1)
    lines, seconds = timed(a, b)
    assert seconds < LIMIT
    assert lines.b_line(F, 1000) == (F, 1000) and lines.b_line(F, 1001) == (F, 1001)
    assert lines.b_line(F, 1002) == (F, 1003) and lines.b_line(F, n) == (F, n + 1)
    assert lines.a_line(F, 1002) is None and lines.a_line(F, n + 1) == (F, n)
    same_size = b.replace("line 7\n", "", 1)
    lines, _ = timed(a, same_size)
    assert lines.b_line(F, 7) == (F, 7) and lines.b_line(F, n) == (F, n)


def test_no_unique_line_and_many_repeated_stretches_stay_fast():
    lines, seconds = timed("x\ny\n" * 40_000, "y\nx\n" * 40_000)
    assert seconds < LIMIT
    assert lines.b_line(F, 2) == (F, 2)  # nothing to anchor on: by position

    def stretches(seed: int) -> str:
        rng = random.Random(seed)
        return "".join(
            f"anchor_{k}()\n" + "".join(rng.choice("xyzw ") + "\n" for _ in range(99))
            for k in range(600)
        )

    lines, seconds = timed(stretches(1), stretches(2))
    assert seconds < LIMIT
    anchors = [k for k, line in enumerate(stretches(1).splitlines(), 1) if "anchor" in line]
    assert all(lines.b_line(F, x) == (F, x) for x in anchors)


def test_renames_among_many_unrelated_files_stay_fast():
    a = {f"a{i}.py": "\n".join(words(i, 2000).split()) for i in range(60)}
    b = {f"b{i}.py": "\n".join(words(1000 + i, 2000).split()) for i in range(60)}
    b["b7.py"] = a["a3.py"] + "\nextra = 1"
    start = time.perf_counter()
    assert LineMap(a, b).renamed == {"a3.py": "b7.py"}
    assert time.perf_counter() - start < LIMIT


def test_a_moved_line_pairs_rather_than_one_more_blank_line():
    a = "def f(tl):\n    x = tl.load(p)\n\n\n    return x\n\n\ndef g():\n    pass\n"
    b = "def f(tl):\n    x = tl.load(p)\n\n\n\n    return x\n\ndef g():\n    pass\n"
    lines, _ = timed(a, b)
    assert lines.b_line(F, 5) == (F, 6)  # "return x" moved past a blank line


# --- through kbdebug diff and the compare app, on traces --------------------------------


def write(path: Path, source: str) -> str:
    writer = TraceWriter(path)
    writer.begin(make_header())
    writer.add_source(KERNEL_FILE, source)
    events = decode_like_events(400)
    for event in events:
        writer.emit(*event)
    writer.end({"status": "ok", "end_time": events[-1][1], "error": None, "error_loc": None})
    return str(path)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (long_lines(False), long_lines(True)),
        (BLANK_TAIL, BLANK_TAIL),
        (ONE_LINE, ONE_LINE[:1000] + "z" + ONE_LINE[1001:]),
    ],
    ids=["long-lines", "blank-tail", "16MiB-line"],
)
def test_diff_and_compare_of_the_reproducers_finish_in_seconds(tmp_path, capsys, a, b):
    a_path, b_path = write(tmp_path / "a.kbt", a), write(tmp_path / "b.kbt", b)
    start = time.perf_counter()
    assert main(["diff", a_path, b_path, "--json"]) == 0
    assert time.perf_counter() - start < 2 * LIMIT
    doc = json.loads(capsys.readouterr().out)
    assert doc["stall_by_line"]
    start = time.perf_counter()
    comparison = Comparison(Replay.open(a_path), Replay.open(b_path))
    events = comparison.calls.calls("a")
    assert all(comparison.other_call("a", int(e)) == int(e) for e in events[:50])
    assert time.perf_counter() - start < LIMIT
