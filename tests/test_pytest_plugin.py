"""The pytest plugin: the ``kbdebug`` fixture, its assertions and ``--kbdebug-keep``, run
with pytester in sessions of their own (the plugin comes from its pytest11 entry point)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from kbdebug.replay import Replay

pytest_plugins = ["pytester"]

HELPER_KERNEL = Path(__file__).parent / "corpus" / "sync_fetch_helper_three_tiles.py"
#: A launch file whose kernel reads back a store it never waited: a hazard (KB201).
HAZARD_LAUNCH = """
import numpy as np

from emulator import HardwareConfig, Memory
from emulator.scenarios import Scenario


def read_back_unwaited(tl, x, buf, out):
    t = tl.load(x, (8, 16), "f32")
    tl.store(buf, t * 2)
    back = tl.wait(tl.load_async(buf, (8, 16), "f32"))
    tl.wait(tl.store(out, back))


def launch():
    memory = Memory(size_bytes=1 << 14)
    x = memory.put(np.arange(128, dtype=np.float32).reshape(8, 16))
    buf, out = memory.alloc(512), memory.alloc(512)
    return Scenario(read_back_unwaited, (x, buf, out), (1,), memory, HardwareConfig())


def raises_midway(tl, x, buf, out):
    tl.load(x, (8, 16), "f32")
    raise ValueError("boom")


def launch_raises():
    scenario = launch()
    scenario.kernel = raises_midway
    return scenario
"""
HAZARD_LINE = next(n for n, text in enumerate(HAZARD_LAUNCH.splitlines(), 1) if "back =" in text)


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester whose sessions keep the replay's cache away from $HOME, as ours does."""
    assert os.environ.get("KBDEBUG_CACHE_DIR"), "tests/conftest.py sets it for every test"
    # The snapshot plugin keeps one temporary folder per process and removes it when a
    # session ends: an in-process session of its own would remove the outer one's.
    pytester.makeini(
        "[pytest]\naddopts = -p no:cacheprovider -p no:textual-snapshot\n"
        "asyncio_default_fixture_loop_scope = function\n"
    )
    return pytester


def test_plugin_is_registered_by_its_entry_point_and_imports_nothing_heavy():
    (entry,) = [e for e in entry_points(group="pytest11") if e.name == "kbdebug"]
    assert entry.value == "kbdebug.pytest_plugin"
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, kbdebug.pytest_plugin; print(sorted(m for m in sys.modules "
            "if m.startswith(('kbdebug.', 'emulator', 'numpy', 'simpy'))))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "['kbdebug.pytest_plugin']"


def test_fixture_records_runs_and_its_assertions_fail_with_the_findings(inner):
    (inner.path / "kernels.py").write_text(HELPER_KERNEL.read_text())
    (inner.path / "hazard_launch.py").write_text(HAZARD_LAUNCH)
    inner.makepyfile(
        test_kernels=f"""
        import os
        import pytest

        CACHE_DIR = {os.environ["KBDEBUG_CACHE_DIR"]!r}

        def test_flawed(kbdebug, tmp_path):
            assert os.environ["KBDEBUG_CACHE_DIR"] == CACHE_DIR  # never the user's cache
            run = kbdebug("flawed_prefetch", n_tiles=4)
            assert run.complete and run.status == "ok" and run.end_cycle > 0
            assert run.trace.parent == tmp_path and run.trace.exists()
            assert 0 < run.efficiency < 0.6 and run.bound < run.end_cycle
            assert [f.rule for f in run.findings] == ["KB102"] and run.hazards == []
            with pytest.raises(AssertionError) as failed:
                run.assert_no_findings()
            text = str(failed.value)
            assert "KB102 attention.py:85" in text and "fix: issue it" in text
            run.assert_no_findings(select="KB104")
            run.assert_no_findings(min_saving="90%")
            with pytest.raises(AssertionError, match="efficiency 4"):
                run.assert_efficiency(at_least=0.9)
            run.assert_efficiency(at_least=0.3)

        def test_settings_reach_the_hardware(kbdebug):
            slow = kbdebug("decode_prefetch", n_tiles=4, hbm_latency=2000)
            fast = kbdebug("decode_prefetch", n_tiles=4)
            assert slow.end_cycle > fast.end_cycle and slow.trace != fast.trace
            fast.assert_no_findings(min_saving=0.2)

        def test_a_hazard_fails_whatever_its_size(kbdebug):
            run = kbdebug("hazard_launch.py:launch")
            assert [h.rule for h in run.hazards] == ["KB201"]
            with pytest.raises(AssertionError, match="kbdebug: 1 hazard in") as failed:
                run.assert_no_findings(min_saving=0.99)
            assert "KB201 hazard_launch.py:{HAZARD_LINE}  read-after-write" in str(failed.value)

        def test_a_kernel_error_is_the_runs_not_an_exception(kbdebug):
            run = kbdebug("hazard_launch.py:launch_raises")
            assert not run.complete and run.status == "error" and "boom" in run.error
            assert run.efficiency is None
            said = "did not complete: kernel error on PE 0: .*boom"
            with pytest.raises(AssertionError, match=said):
                run.assert_efficiency(at_least=0.5)

        def test_a_bad_setting_fails_in_one_line(kbdebug):
            kbdebug("decode_prefetch", n_tilez=4)

        def test_helper_kernel(kbdebug):
            kbdebug("kernels.py:launch_bug").assert_no_findings()
        """
    )
    source = HELPER_KERNEL.read_text().splitlines()
    line = next(n for n, text in enumerate(source, 1) if "# expect: KB102" in text)
    caller = next(n for n, text in enumerate(source, 1) if "# expect-call" in text)
    result = inner.runpytest()
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines(["*kbdebug('decode_prefetch'): setting n_tilez: not a param*"])
    result.stdout.fnmatch_lines(
        [
            "*kbdebug: 1 finding in *kernels.launch_bug.kbt:",
            f"*KB102 kernels.py:{line} ← kernels.py:{caller}  wait-right-after-issue",
            "*open with:",
            "kbdebug *kernels.launch_bug.kbt",
            "(--kbdebug-keep keeps the traces of failing tests past pytest's tmp dirs)",
        ]
    )


def test_keep_copies_the_traces_of_failing_tests_and_prints_how_to_open_them(inner):
    inner.makepyfile(
        test_keep="""
        def test_fails(kbdebug):
            kbdebug("flawed_prefetch", n_tiles=4).assert_efficiency(at_least=0.9)

        def test_passes(kbdebug):
            kbdebug("decode_prefetch", n_tiles=4)
        """
    )
    result = inner.runpytest("--kbdebug-keep", "--kbdebug-keep-dir", "kept")
    result.assert_outcomes(passed=1, failed=1)
    folder = inner.path / "kept"
    (kept,) = folder.rglob("*.kbt")
    assert kept.name == "flawed_prefetch.kbt" and "test_fails" in kept.parent.name
    assert Replay.open(kept, cache=False).index.header
    result.stdout.fnmatch_lines(
        [
            f"*kbdebug: traces of failing tests kept in {folder}*",
            f"test_keep.py::test_fails: kbdebug {kept}",
        ]
    )
