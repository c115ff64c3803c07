"""The serialization corpus: every finding true, on the marked line, with an honest saving.

Each pair in tests/corpus/ is a kernel with exactly one serialization bug and
its fixed twin; each clean kernel is optimally pipelined in some unusual way.
Every test runs at each size a module gives (``sizes``: small and large; one
size, its ``params``, otherwise). Traces are recorded once per session. The
emulator is the ground truth: the saving a finding claims is compared with the
cycles the fix really saves.
"""

from __future__ import annotations

import pytest
from corpus._harness import entries, record, same_place

ENTRIES = entries()
PAIRS = [e for e in ENTRIES if e.is_pair]
CLEAN = [e for e in ENTRIES if not e.is_pair]

#: The fixed twin must be at least this much faster on each affected PE.
MIN_GAIN = 0.03
#: A kernel at its bound: achieved within this of the model's bound on every PE.
AT_BOUND = 0.05
#: A finding's saving against the measured end-cycle difference.
SAVING_TOLERANCE = 0.20


class Recorded:
    """Traces recorded on first use and analysed once, shared by the whole session."""

    def __init__(self, directory):
        self.directory = directory
        self._runs = {}
        self._analysis = {}

    def run(self, entry, variant):
        key = (entry.id, variant)
        if key not in self._runs:
            self._runs[key] = record(entry, variant, self.directory)
        return self._runs[key]

    def analysis(self, entry, variant):
        key = (entry.id, variant)
        if key not in self._analysis:
            from kbdebug.analysis import find_all, pe_bounds
            from kbdebug.replay import Replay

            trace, _ = self.run(entry, variant)
            replay = Replay.open(trace)
            self._analysis[key] = (find_all(replay), pe_bounds(replay))
        return self._analysis[key]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    return Recorded(tmp_path_factory.mktemp("corpus"))


def _ids(items):
    return [e.id for e in items]


# Where the analysis is known to fall short, said once here and checked to still fail
# (strict): a fix that lands makes its xfail an error, so the list cannot go stale.
# Keyed by module name: a limit holds at every size of the module.
#: Measured misses, by test and entry id (``name-size`` for an entry with sizes): strict,
#: so a change that makes one pass is noticed and its entry removed.
KNOWN_LIMITS = {
    ("line", "gather_rows_reverse_generator"): "waits inside a generator: the kernel frame "
    "is at the line that resumes the generator, not where it was created",
    ("saving", "circular_cache_stencil_blocking-small"): "a 3-tile kernel: the re-timed "
    "prefetch moves the prologue's loads differently from the fixed twin",
    ("saving", "gamma_blocking_prologue"): "the fix also issues the tiles before the gain; "
    "the re-timed edit only moves the gain's wait",
    ("saving", "window_newest_first"): "the re-timed fix waits in issue order but keeps "
    "each tile's work where it was; the real fix also reorders that work",
}
_AT_BOUND_MISSES = {
    ("twopass_workspace_store_waited-small-fixed", "bound"): "the read channel idles between "
    "the passes (the first reload waits for the last pass-1 store); the bound does not see it",
}


def _limit(test, entry):
    """Why ``entry`` is expected to fail ``test`` (None: it must pass)."""
    return KNOWN_LIMITS.get((test, entry.id))


def _params(test):
    return [
        pytest.param(
            e,
            id=e.id,
            marks=[pytest.mark.xfail(strict=True, reason=_limit(test, e))]
            if _limit(test, e)
            else [],
        )
        for e in PAIRS
    ]


def _describe(findings):
    return [f"{f.rule} pe{f.pe} {f.loc.file}:{f.loc.line} saving={f.saving}" for f in findings]


@pytest.mark.parametrize("entry", PAIRS, ids=_ids(PAIRS))
def test_fixed_twin_is_faster(corpus, entry):
    _, bug = corpus.run(entry, "bug")
    _, fixed = corpus.run(entry, "fixed")
    for pe in entry.pes:
        b, f = bug.pe_end_times[pe], fixed.pe_end_times[pe]
        assert f <= b * (1 - MIN_GAIN), f"PE {pe}: bug ends at {b}, fixed at {f}"


@pytest.mark.parametrize(
    ("entry", "variant"),
    [(e, "fixed") for e in PAIRS] + [(e, "clean") for e in CLEAN],
    ids=[f"{e.id}-fixed" for e in PAIRS] + [f"{e.id}-clean" for e in CLEAN],
)
def test_optimal_kernel_is_at_bound_with_no_finding(corpus, entry, variant):
    if (f"{entry.id}-{variant}", "bound") in _AT_BOUND_MISSES:
        pytest.xfail(_AT_BOUND_MISSES[(f"{entry.id}-{variant}", "bound")])
    findings, bounds = corpus.analysis(entry, variant)
    assert findings == [], _describe(findings)
    for b in bounds:
        assert b.achieved <= b.bound * (1 + AT_BOUND), (
            f"PE {b.pe}: achieved {b.achieved} cycles, bound {b.bound}"
        )


@pytest.mark.parametrize("entry", _params("line"))
def test_bug_finding_names_the_marked_line(corpus, entry):
    findings, _ = corpus.analysis(entry, "bug")
    for pe in entry.pes:
        on_pe = [f for f in findings if f.pe == pe and f.rule == entry.rule]
        assert on_pe, f"no {entry.rule} on PE {pe}; got {_describe(findings)}"
        named = [f for f in on_pe if same_place(f.loc, entry.path, entry.line)]
        assert named, f"{entry.rule} on PE {pe} does not name line {entry.line}: " + str(
            _describe(on_pe)
        )
        if entry.call_line is not None:
            assert any(same_place(f.call_loc, entry.path, entry.call_line) for f in named), (
                f"call_loc should be line {entry.call_line}: {[f.call_loc for f in named]}"
            )
    stray = [f for f in findings if f.pe not in entry.pes or f.rule != entry.rule]
    assert stray == [], f"only {entry.rule} on PEs {entry.pes} expected: {_describe(stray)}"


@pytest.mark.parametrize("entry", _params("saving"))
def test_bug_saving_matches_the_measured_fix(corpus, entry):
    findings, _ = corpus.analysis(entry, "bug")
    _, bug = corpus.run(entry, "bug")
    _, fixed = corpus.run(entry, "fixed")
    for pe in entry.pes:
        measured = bug.pe_end_times[pe] - fixed.pe_end_times[pe]
        claimed = sum(
            f.saving
            for f in findings
            if f.pe == pe and f.rule == entry.rule and same_place(f.loc, entry.path, entry.line)
        )
        assert abs(claimed - measured) <= SAVING_TOLERANCE * measured, (
            f"PE {pe}: finding claims {claimed} cycles, the fix saves {measured}"
        )


@pytest.mark.parametrize(
    ("entry", "variant"),
    [(e, v) for e in PAIRS for v in ("bug", "fixed")] + [(e, "clean") for e in CLEAN],
    ids=[f"{e.id}-{v}" for e in PAIRS for v in ("bug", "fixed")] + [f"{e.id}-clean" for e in CLEAN],
)
def test_kernel_computes_the_reference_result(corpus, entry, variant):
    # record() runs the scenario's numpy check and raises when the output is wrong.
    _, result = corpus.run(entry, variant)
    assert result.end_time > 0
