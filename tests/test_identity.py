"""Edit-proof identity: call ids, selectors and line alignment, then `kbdebug diff` on a
kernel file edited between two runs (a comment added above it; a real fix)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from emulator import Memory, run_kernel
from emulator.trace.schema import SourceLoc
from kbdebug.analysis import Analysis
from kbdebug.analysis.align import LineMap
from kbdebug.analysis.findings import Finding
from kbdebug.analysis.identity import call_identity, finding_id, with_stable_ids
from kbdebug.analysis.select import matches, parse_selectors
from kbdebug.cli import main
from kbdebug.replay import Replay

SOURCE = """\
def helper(tl, x):
    return tl.dot(x, x)


def decode(tl, k_ptr, n):
    f = tl.load_async(k_ptr, (64, 64), 'f16')   # first tile
    for j in range(n):
        k = tl.wait(f)
        f = tl.load_async(
            k_ptr + j * 8192,
            (64, 64), "f16")
        s = k * 0.5
        k = tl.wait(f)
        helper(tl, k)
"""


class Index:
    def __init__(self, sources: dict[str, str]):
        self.sources = sources


def line_of(source: str, text: str, nth: int = 0) -> int:
    hits = [i + 1 for i, line in enumerate(source.splitlines()) if text in line]
    return hits[nth]


def ident(source: str, line: int, function: str = "decode", file: str = "qk.py") -> str:
    return call_identity(Index({file: source}), SourceLoc(file, line, function))


# --- call identity ---------------------------------------------------------------------


def test_identity_is_file_function_call_text_and_ordinal():
    assert ident(SOURCE, line_of(SOURCE, "k = tl.wait(f)")) == "qk.py::decode::tl.wait(f)#0"
    assert ident(SOURCE, line_of(SOURCE, "k = tl.wait(f)", 1)) == "qk.py::decode::tl.wait(f)#1"
    # Comments and whitespace go, quotes become double: shell-friendly in single quotes.
    first = ident(SOURCE, line_of(SOURCE, "'f16')"))
    assert first == 'qk.py::decode::tl.load_async(k_ptr,(64,64),"f16")#0'
    assert ident(SOURCE, line_of(SOURCE, "def decode")) == "qk.py::decode::def#0"
    assert ident(SOURCE, line_of(SOURCE, "s = k")) == "qk.py::decode::s=k*0.5#0"
    assert ident(SOURCE, 2, "helper") == "qk.py::helper::tl.dot(x,x)#0"


def test_a_call_spanning_lines_is_one_site_whatever_line_is_recorded():
    start = line_of(SOURCE, "f = tl.load_async(", 1)
    want = 'qk.py::decode::tl.load_async(k_ptr+j*8192,(64,64),"f16")#0'
    assert ident(SOURCE, start) == want
    assert ident(SOURCE, start + 1) == want and ident(SOURCE, start + 2) == want


def test_identity_survives_unrelated_edits_and_changes_with_the_call():
    edited = "# a comment\n\nimport math\n" + SOURCE.replace(
        "        s = k * 0.5\n", "        s = k * 0.5  # scale\n        t = math.pi\n"
    )
    for text, nth in (("k = tl.wait(f)", 0), ("k = tl.wait(f)", 1), ("8192", 0)):
        before = ident(SOURCE, line_of(SOURCE, text, nth))
        after = ident(edited, line_of(edited, text, nth))
        assert before == after
        assert line_of(SOURCE, text, nth) != line_of(edited, text, nth)
    changed = SOURCE.replace("k = tl.wait(f)\n        f =", "k = tl.wait(g)\n        f =")
    assert ident(changed, line_of(changed, "tl.wait(g)")) == "qk.py::decode::tl.wait(g)#0"


def test_identity_falls_back_to_the_line_without_source():
    loc = SourceLoc("qk.py", 12, "decode")
    assert call_identity(Index({}), loc) == "qk.py:12"
    assert call_identity(Index({"qk.py": "def broken(:\n"}), loc) == "qk.py:12"
    assert call_identity(Index({"qk.py": SOURCE}), SourceLoc("qk.py", 999, "decode")) == (
        "qk.py:999"
    )


def test_identity_in_a_helper_names_the_kernel_line_that_called_it():
    caller = SourceLoc("qk.py", line_of(SOURCE, "helper(tl, k)"), "decode")
    inner = SourceLoc("qk.py", 2, "helper", caller)
    got = call_identity(Index({"qk.py": SOURCE}), inner)
    assert got == "qk.py::helper::tl.dot(x,x)#0@qk.py::decode::helper(tl,k)#0"


def test_finding_id_has_the_rule_and_the_pe_suffix():
    loc = SourceLoc("qk.py", line_of(SOURCE, "k = tl.wait(f)"), "decode")
    index = Index({"qk.py": SOURCE})
    assert finding_id("KB104", index, loc, 0) == "KB104:qk.py::decode::tl.wait(f)#0"
    assert finding_id("KB104", index, loc, 3) == "KB104:qk.py::decode::tl.wait(f)#0:pe3"


# --- selectors -------------------------------------------------------------------------


def finding(pe: int = 0) -> Finding:
    loc = SourceLoc("qk.py", line_of(SOURCE, "k = tl.wait(f)"), "decode")
    base = Finding(
        id="",
        rule="KB104",
        title="out-of-order-wait",
        pe=pe,
        start=0,
        end=1,
        events=(0,),
        loc=loc,
        message="m",
        suggestion="s",
    )
    return with_stable_ids(Index({"qk.py": SOURCE}), [base])[0]


def test_selectors_match_rule_id_and_line_form_in_any_case():
    f, f3 = finding(), finding(3)
    assert f.id == "KB104:qk.py::decode::tl.wait(f)#0" and f.line_id == "KB104:qk.py:8"
    for sel in ("any", "ANY", "KB104", "kb104", f.id, f.id.lower().replace("qk", "qk", 1)):
        assert matches(f, sel), sel
    assert matches(f, "KB104:qk.py:8") and matches(f, "kb104:qk.py:8:pe0")
    assert not matches(f, "KB104:qk.py:9") and not matches(f, "KB102")
    assert not matches(f, "KB104:qk.py::decode::tl.wait(f)#1")
    # Without :peN a site selects every PE; with it, only that one.
    assert matches(f3, f.id) and matches(f3, f.id + ":pe3") and not matches(f3, f.id + ":pe2")
    assert matches(f3, "KB104:qk.py:8") and not matches(f, f.id + ":pe3")


def test_parse_selectors_splits_commas_outside_call_text():
    got = parse_selectors(["kb102,KB104", 'KB101:qk.py::decode::tl.load(a,(64,64),"f16")#0'])
    assert got == ["KB102", "KB104", 'KB101:qk.py::decode::tl.load(a,(64,64),"f16")#0']
    assert parse_selectors(["any, kb101:qk.py:3"]) == ["any", "KB101:qk.py:3"]
    for bad in (["KB999"], ["kb101,"], ["qk.py:3"], ["KB101:"]):
        with pytest.raises(ValueError, match="selector"):
            parse_selectors(bad)


# --- line alignment --------------------------------------------------------------------


def test_line_map_follows_inserted_deleted_edited_lines_and_renames():
    edited = "# new comment\n" + SOURCE.replace("        s = k * 0.5\n", "").replace(
        "k = tl.wait(f)\n        helper", "k = tl.wait(f, )\n        helper"
    )
    lines = LineMap(Index({"qk.py": SOURCE}), Index({"qk.py": edited}))
    wait = line_of(SOURCE, "k = tl.wait(f)")
    assert lines.b_line("qk.py", wait) == ("qk.py", wait + 1)
    assert lines.a_line("qk.py", wait + 1) == ("qk.py", wait)
    assert lines.b_line("qk.py", line_of(SOURCE, "s = k")) is None
    second = line_of(SOURCE, "k = tl.wait(f)", 1)
    assert lines.b_line("qk.py", second) == ("qk.py", line_of(edited, "tl.wait(f, )"))
    assert lines.a_line("qk.py", 1) is None
    renamed = LineMap(Index({"qk.py": SOURCE}), Index({"attn.py": edited}))
    assert renamed.b_file("qk.py") == "attn.py" and renamed.renamed == {"qk.py": "attn.py"}
    assert renamed.b_line("qk.py", wait) == ("attn.py", wait + 1)
    unrelated = LineMap(Index({"qk.py": SOURCE}), Index({"x.py": "print(1)\n" * 40}))
    assert unrelated.b_file("qk.py") is None and unrelated.b_line("qk.py", wait) is None
    assert unrelated.b_line("other.py", 5) == ("other.py", 5)


# --- kbdebug diff on an edited kernel file ---------------------------------------------

FLAWED = """\
TILE_BYTES = 64 * 64 * 2


def kernel(tl, a_ptr, n):
    for j in range(n):
        with tl.scope():
            f = tl.load_async(a_ptr + j * TILE_BYTES, (64, 64), "f16")
            x = tl.wait(f)
            tl.dot(x, x)
"""

FIXED = """\
TILE_BYTES = 64 * 64 * 2


def kernel(tl, a_ptr, n):
    f = tl.load_async(a_ptr, (64, 64), "f16")
    w = tl.zeros((64, 64), "f16")
    tl.dot(w, w)
    for j in range(n):
        with tl.scope():
            x = tl.wait(f)
            if j + 1 < n:
                f = tl.load_async(a_ptr + (j + 1) * TILE_BYTES, (64, 64), "f16")
            tl.dot(x, x)
"""


def record(root: Path, name: str, source: str) -> str:
    """Write ``source`` as ``root/name/a.py``, run its kernel on 8 tiles, return the trace."""
    folder = root / name
    folder.mkdir()
    path = folder / "a.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"kernel_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    n = 8
    memory = Memory(size_bytes=1 << 20)
    a_ptr = memory.put(np.ones((n * 64, 64), np.float16))
    trace = root / f"{name}.kbt"
    run_kernel(module.kernel, (a_ptr, n), (1,), memory, trace=trace)
    return str(trace)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("edits")
    commented = "# A comment line, and a blank one, above an unchanged kernel.\n\n" + FLAWED
    return {
        "flawed": record(root, "flawed", FLAWED),
        "commented": record(root, "commented", commented),
        "fixed": record(root, "fixed", FIXED),
    }


def diff_json(capsys, a: str, b: str) -> tuple[int, dict]:
    status = main(["diff", a, b, "--json", "--fail-on-regression"])
    return status, json.loads(capsys.readouterr().out)


def test_a_comment_above_an_unchanged_kernel_changes_no_finding(runs, capsys):
    a, b = Replay.open(runs["flawed"]), Replay.open(runs["commented"])
    fa = Analysis(a).findings
    fb = Analysis(b).findings
    assert fa, "the flawed kernel waits right after each issue: it must have findings"
    # The lines moved (the old ids would all differ) but the edit-proof ids did not.
    assert {f.line_id for f in fa}.isdisjoint({f.line_id for f in fb})
    assert {f.id for f in fa} == {f.id for f in fb}
    status, doc = diff_json(capsys, runs["flawed"], runs["commented"])
    assert status == 0 and not doc["regression"]
    assert doc["findings"]["added"] == doc["findings"]["removed"] == []
    assert sorted(doc["findings"]["kept"]) == sorted(f.id for f in fa)
    # Every stall line pairs with its moved self: nothing only in A or only in B.
    for row in doc["stall_by_line"]:
        assert row["line"] is not None and row["b_line"] == row["line"] + 2
        assert row["delta"] == 0


def test_a_selector_copied_from_one_run_still_matches_after_the_edit(runs, capsys):
    main(["report", runs["flawed"], "--json", "--min-saving", "0"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    stable, line = findings[0]["id"], findings[0]["line_id"]
    assert main(["report", runs["commented"], "--fail-on", stable, "--min-saving", "0"]) == 1
    assert main(["report", runs["commented"], "--fail-on", line, "--min-saving", "0"]) == 0
    capsys.readouterr()


def test_a_real_fix_shows_the_wait_stall_going_to_zero_on_its_moved_line(runs, capsys):
    wait_a = line_of(FLAWED, "x = tl.wait(f)")
    wait_b = line_of(FIXED, "x = tl.wait(f)")
    assert wait_a != wait_b
    status = main(["diff", runs["flawed"], runs["fixed"], "--fail-on-regression"])
    out = capsys.readouterr().out
    assert status == 0
    stall = next(ln for ln in out.splitlines() if f"at a.py:{wait_a} → a.py:{wait_b}" in ln).split()
    assert stall[0] == "stall" and stall[2:4] == ["→", "0"] and int(stall[1].replace(",", ""))
    assert "(new)" not in " ".join(stall) and "worse" not in stall
    _, doc = diff_json(capsys, runs["flawed"], runs["fixed"])
    assert doc["findings"]["added"] == [] and doc["findings"]["removed"]
    assert doc["findings"]["kept"] == [] or all("tl.wait" not in k for k in doc["findings"]["kept"])
