"""A --fail-on selector that names one site (an id, a line id, a short id) and matches no
finding passes the gate, as a fixed finding must, but says so on stderr, one line each:
a typo or a stale id would otherwise never fail CI. A rule code, ``any`` or ``hazard``
matching nothing is a clean run and says nothing. The pytest plugin's ``select`` warns."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbdebug.cli import main
from kbdebug.pytest_plugin import _analysed

#: Two KB101 findings, at attention.py:46 and :48, no hazard.
TRACE = str(Path(__file__).resolve().parent.parent / "traces" / "decode_blocking.kbt")
FOUND = "KB101:emulator/kernels/attention.py:46"


def _gate(capsys, *selectors: str, min_saving: str | None = None) -> tuple[int, list[str]]:
    """The exit status of report --fail-on ``selectors`` and its stderr lines."""
    argv = ["report", TRACE, *(x for s in selectors for x in ("--fail-on", s))]
    argv += ["--min-saving", min_saving] if min_saving else []
    status = main(argv)
    return status, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(
    "selector",
    [
        "KB102:foo.py:12",
        "KB101:emulator/kernels/attention.py::decode_blocking::tl.load(q)#0",
        "KB101 attention.py:99",
    ],
)
def test_a_site_that_matches_nothing_passes_and_says_so(capsys, selector):
    status, err = _gate(capsys, selector)
    assert status == 0
    assert err == [
        f"kbdebug report: --fail-on {selector} matched no finding in {TRACE} (fixed, or a "
        f"typo? 'kbdebug report {TRACE}' lists the ids)"
    ]


@pytest.mark.parametrize("selector", ["KB104", "kb102", "hazard"])
def test_a_kind_that_matches_nothing_passes_quietly(capsys, selector):
    assert _gate(capsys, selector) == (0, [])


def test_a_site_that_matches_says_nothing_of_it(capsys):
    status, err = _gate(capsys, FOUND)
    assert status == 1 and not any("matched no finding" in line for line in err)
    # Matched, but below --min-saving: a finding is there, the selector is right.
    assert _gate(capsys, FOUND, min_saving="90%") == (0, [])


def test_each_selector_that_matches_nothing_has_its_line(capsys):
    status, err = _gate(capsys, f"{FOUND},KB101:attention.py:99", "KB102:foo.py:12")
    assert status == 1
    missed = [line for line in err if "matched no finding" in line]
    assert [line.split()[3] for line in missed] == ["KB101:attention.py:99", "KB102:foo.py:12"]


def test_the_pytest_plugins_select_warns_when_it_matches_nothing():
    run = _analysed(Path(TRACE), None)
    with pytest.warns(UserWarning, match=r"select KB102:foo\.py:12 matched no finding in"):
        run.assert_no_findings(select="KB102:foo.py:12")
    with pytest.raises(AssertionError):
        run.assert_no_findings(select=FOUND)
