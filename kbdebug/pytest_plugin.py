"""The pytest plugin (entry point ``pytest11``): a ``kbdebug`` fixture that records a kernel
and gates a test on its findings, and ``--kbdebug-keep`` for the traces of failing tests.

::

    def test_decode_is_pipelined(kbdebug):
        run = kbdebug("decode_prefetch", n_tiles=64, hbm_latency=800)
        run.assert_no_findings(min_saving=0.05)
        run.assert_efficiency(at_least=0.9)

The fixture's call runs a built-in scenario or ``FILE.py:FUNCTION`` (a path relative to
the test's file, else to the working directory) with its settings (scenario parameters
and hardware fields, as ``kbdebug run --set`` takes them), records the trace under the
test's ``tmp_path`` and returns a :class:`KbdebugRun`. An assertion's failure message is
the findings as ``kbdebug report`` lists them; a failing test's report names its traces
and the ``kbdebug TRACE`` command that opens each. ``--kbdebug-keep`` copies them to
``--kbdebug-keep-dir`` (default ``kbdebug-traces``), which is printed at the end.

pytest loads this module in every session once kbdebug is installed: it imports
nothing of kbdebug or the emulator until a test calls the fixture, and leaves tests
that do not use it as they are.
"""

from __future__ import annotations

import re
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kbdebug.analysis import Analysis
    from kbdebug.analysis.finding import Finding
    from kbdebug.analysis.hazards import Hazard

#: The traces a test recorded, on its item.
TRACES = pytest.StashKey[list]()
#: (test id, kept trace) of every trace --kbdebug-keep kept, on the config.
KEPT = pytest.StashKey[list]()
#: What a message calls a keyword setting of the fixture's call (``--set`` on the command line).
SETTING = "setting"
#: Characters of a test id kept in the name of its folder of kept traces.
FOLDER_CHARS = 120


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kbdebug", "kbdebug: kernel traces and their findings")
    group.addoption(
        "--kbdebug-keep",
        action="store_true",
        help="keep the traces the kbdebug fixture recorded in failing tests (in "
        "--kbdebug-keep-dir) and print the command that opens each",
    )
    group.addoption(
        "--kbdebug-keep-dir",
        default="kbdebug-traces",
        metavar="DIR",
        help="where --kbdebug-keep keeps traces, one folder per test (default: %(default)s, "
        "relative to the directory pytest was started in)",
    )


@dataclass
class KbdebugRun:
    """One recorded run: its trace, figures, findings and hazards, and assertions on them."""

    #: The trace (under the test's tmp_path).
    trace: Path
    #: The analysis of the trace (kbdebug.analysis.Analysis), for anything else.
    analysis: Analysis = field(repr=False)
    #: ok, error, deadlock, interrupted or truncated.
    status: str
    #: Why the run did not complete (a kernel error, a deadlock), None when it did.
    error: str | None
    #: The cycle the run ended.
    end_cycle: int
    #: The launch's critical-path bound, in cycles from its start.
    bound: int
    #: bound / achieved for the launch; None when the run did not complete.
    efficiency: float | None
    #: The findings, largest estimated saving first.
    findings: list[Finding]
    #: The hazards: results that depend on timing (KB2xx), whatever their size.
    hazards: list[Hazard]

    @property
    def complete(self) -> bool:
        """Whether the run ended normally."""
        return self.error is None

    def findings_text(self, findings: list[Finding | Hazard] | None = None) -> str:
        """``findings`` (the hazards and the findings by default) as ``kbdebug report``
        lists them."""
        from kbdebug.export.review import listed

        shown = [*self.hazards, *self.findings] if findings is None else findings
        return listed(shown, self.analysis)

    def assert_no_findings(self, min_saving: float | str = 0.0, select: str = "any") -> None:
        """Fail unless the run completed with no hazard and no finding picked by ``select``
        (``any``, rule codes, ids, as ``--fail-on`` takes them) whose estimated saving
        reaches ``min_saving`` of its PE's time (``0.05`` or ``"5%"``). An id that picks
        nothing passes with a warning, as ``--fail-on`` says it on stderr."""
        __tracebackhide__ = True
        from kbdebug.analysis.gate import Gate, percent
        from kbdebug.analysis.select import parse_selectors

        self._assert_complete()
        share = _share(min_saving)
        gate = Gate.check(
            parse_selectors([select]),
            share,
            self.findings,
            self.analysis.bounds,
            None,
            self.hazards,
        )
        for line in gate.unmatched_lines(self.trace, "select"):  # passes, but may be a typo
            warnings.warn(f"kbdebug: {line}", stacklevel=2)
        failing = [*self.hazards, *(f for f, _ in gate.matched)]
        if failing:
            hazards, n = len(self.hazards), len(failing) - len(self.hazards)
            said = [f"{hazards} hazard{'s' if hazards != 1 else ''}"] if hazards else []
            if n:
                worth = f" worth at least {percent(share)} of the kernel time" if share else ""
                said.append(f"{n} finding{'s' if n != 1 else ''}{worth}")
            raise AssertionError(
                f"kbdebug: {' and '.join(said)} in {self.trace}:\n{self.findings_text(failing)}"
            )

    def assert_efficiency(self, at_least: float) -> None:
        """Fail unless the launch's efficiency (bound / achieved) is ``at_least`` (0..1)."""
        __tracebackhide__ = True
        self._assert_complete()
        assert self.efficiency is not None
        if self.efficiency < at_least:
            listed = self.findings_text() or "  (no finding explains the gap)"
            raise AssertionError(
                f"kbdebug: efficiency {self.efficiency:.1%} is below {at_least:.1%} "
                f"(bound {self.bound:,} cycles, end cycle {self.end_cycle:,}) in "
                f"{self.trace}; the findings:\n{listed}"
            )

    def _assert_complete(self) -> None:
        __tracebackhide__ = True
        if self.error is not None:
            raise AssertionError(
                f"kbdebug: the run did not complete: {self.error} "
                f"(trace {self.trace}; its findings cover only what ran)"
            )


class KbdebugRunner:
    """The ``kbdebug`` fixture: call it to record a run (:meth:`__call__`)."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path):
        self._request = request
        self._tmp_path = tmp_path
        self.traces: list[Path] = []
        request.node.stash[TRACES] = self.traces

    def __call__(
        self,
        scenario: str,
        /,
        *,
        config: str | Path | None = None,
        check: bool = True,
        **settings: Any,
    ) -> KbdebugRun:
        """Record ``scenario`` (a built-in name or ``FILE.py:FUNCTION``) with ``settings``
        (parameters and hardware fields), on the hardware of the TOML file ``config``
        when given; with ``check``, fail when its output differs from the numpy
        reference. A kernel error or deadlock is the run's ``error``, not an exception."""
        __tracebackhide__ = True
        from emulator.errors import EmulatorError
        from kbdebug.errors import UserError
        from kbdebug.launch.launcher import load
        from kbdebug.launch.settings import read_config, with_hardware

        try:
            launcher = load(self._resolved(scenario))
            values = {
                key: (
                    launcher.typed(SETTING, key, value)
                    if launcher.is_parameter(SETTING, key)
                    else value
                )
                for key, value in settings.items()
            }
            params, hw = launcher.split(values)
            base = read_config(None if config is None else str(config))
            hardware = with_hardware(base, hw, lambda key: SETTING)
            built = launcher.build(
                params, hw, hardware, config_given=config is not None, option_of=lambda key: SETTING
            )
        except UserError as e:
            refused = f"kbdebug({scenario!r}): {e}"
        else:
            refused = None
        if refused is not None:  # outside the except: no "during handling" chain
            pytest.fail(refused, pytrace=False)
        path = self._trace_path(launcher.name)
        self.traces.append(path)
        failure = None
        try:
            with launcher.importing():
                built.run(trace=path)
        except EmulatorError as e:
            failure = e
        if failure is None and check and built.check is not None:
            try:
                built.check(built.memory)
            except AssertionError as e:
                raise AssertionError(
                    f"kbdebug: {launcher.name}: output check failed: {e}"
                ) from None
        return _analysed(path, failure)

    def _resolved(self, scenario: str) -> str:
        """``FILE.py:FUNCTION`` with FILE relative to the test's file when it is there."""
        file, sep, function = scenario.rpartition(":")
        if not sep or Path(file).is_absolute():
            return scenario
        beside = Path(self._request.path).parent / file
        return f"{beside}:{function}" if beside.is_file() else scenario

    def _trace_path(self, name: str) -> Path:
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "run"
        path, n = self._tmp_path / f"{stem}.kbt", 1
        while path.exists() or path in self.traces:
            n += 1
            path = self._tmp_path / f"{stem}-{n}.kbt"
        return path


def _analysed(path: Path, failure: BaseException | None) -> KbdebugRun:
    from kbdebug.analysis import Analysis
    from kbdebug.export import review
    from kbdebug.replay import Replay

    # Opened once: no index cache, so a test never writes to the user's cache folder.
    analysis = Analysis(Replay.open(path, cache=False))
    summary = analysis.summary
    reason = analysis.incomplete
    bound, efficiency = analysis.launch_efficiency
    return KbdebugRun(
        trace=path,
        analysis=analysis,
        status=summary.status,
        error=None if failure is None and reason is None else str(reason or failure),
        end_cycle=int(summary.end_time),
        bound=int(bound),
        efficiency=efficiency,
        findings=review.ranked(analysis),
        hazards=review.hazards(analysis),
    )


def _share(value: float | str) -> float:
    """``0.05``, ``"0.05"`` or ``"5%"`` as 0.05; ValueError outside 0..1."""
    text = str(value).strip()
    share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"min_saving={value!r}: expected a share from 0 to 1 (0.05) or '5%'")
    return share


@pytest.fixture
def kbdebug(request: pytest.FixtureRequest, tmp_path: Path) -> KbdebugRunner:
    """Record a kernel's run and assert on its findings: ``kbdebug("SCENARIO", **settings)``."""
    return KbdebugRunner(request, tmp_path)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    traces = [p for p in item.stash.get(TRACES, ()) if p.exists()]
    if report.when != "call" or not report.failed or not traces:
        return
    if item.config.getoption("kbdebug_keep"):
        traces = _keep(item, traces)
        how = ""
    else:
        how = "\n(--kbdebug-keep keeps the traces of failing tests past pytest's tmp dirs)"
    lines = [f"kbdebug {p}" for p in traces]
    report.sections.append(("kbdebug traces", "open with:\n" + "\n".join(lines) + how))


def _keep(item: pytest.Item, traces: list[Path]) -> list[Path]:
    root = Path(item.config.invocation_params.dir) / item.config.getoption("kbdebug_keep_dir")
    folder = root.resolve() / re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid)[:FOLDER_CHARS]
    folder.mkdir(parents=True, exist_ok=True)
    kept = []
    for trace in traces:
        target = folder / trace.name
        shutil.copyfile(trace, target)
        kept.append(target)
        item.config.stash.setdefault(KEPT, []).append((item.nodeid, target))
    return kept


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    kept = config.stash.get(KEPT, [])
    if not kept:
        return
    folder = kept[0][1].parent.parent
    terminalreporter.write_sep("-", f"kbdebug: traces of failing tests kept in {folder}")
    for nodeid, trace in kept:
        terminalreporter.write_line(f"{nodeid}: kbdebug {trace}")
