"""Source paths in a trace, and so finding ids, do not depend on the working directory.

A launch's paths are relative to the root of its launch file (the nearest folder
holding pyproject.toml, setup.py, setup.cfg or .git, else the file's own folder):
one kernel recorded from its project's root and from a folder inside it gives the
same ids, so ``kbdebug diff --fail-on-regression`` passes and ``--fail-on`` selectors
copied from one run match the other.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from emulator import Memory, run_kernel
from emulator.kernel.source import LocationCache, launch_root, relative_path
from kbdebug.analysis import Analysis
from kbdebug.cli import main
from kbdebug.replay import Replay

HELPERS = """\
TILE_BYTES = 64 * 64 * 2


def fetch(tl, a_ptr, j):
    f = tl.load_async(a_ptr + j * TILE_BYTES, (64, 64), "f16")
    return tl.wait(f)
"""

KERNEL = """\
import numpy as np

from emulator import Memory
from emulator.scenarios import Scenario
from helpers import fetch


def kernel(tl, a_ptr, n):
    for j in range(n):
        with tl.scope():
            x = fetch(tl, a_ptr, j)  # waited right after its issue: KB102
            tl.dot(x, x)


def launch(n_tiles: int = 16) -> Scenario:
    memory = Memory(size_bytes=1 << 22)
    a_ptr = memory.put(np.ones((n_tiles * 64, 64), np.float16))
    return Scenario(kernel, (a_ptr, n_tiles), (1,), memory)
"""

MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def write_kernel(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "helpers.py").write_text(HELPERS)
    (folder / "k.py").write_text(KERNEL)
    return folder / "k.py"


def kbdebug_run(cwd: Path, spec: str, out: Path) -> None:
    """``kbdebug run SPEC -o OUT`` in a fresh process started in ``cwd``."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-m", "kbdebug", "run", spec, "-o", str(out), "-q", "--no-check"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def ids_of(trace: Path) -> list[str]:
    replay = Replay.open(trace)
    return sorted(f.id for f in Analysis(replay).findings)


def no_marker_above(folder: Path) -> bool:
    return not any((d / m).exists() for d in (folder, *folder.parents) for m in MARKERS)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> dict[str, Path]:
    """One kernel in a project, recorded from its root, from kernels/ and from elsewhere."""
    top = tmp_path_factory.mktemp("proj")
    (top / "pyproject.toml").write_text('[project]\nname = "proj"\n')
    write_kernel(top / "kernels")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    traces = {
        "root": top / "from_root.kbt",
        "kernels": top / "from_kernels.kbt",
        "elsewhere": top / "from_elsewhere.kbt",
    }
    kbdebug_run(top, "kernels/k.py:launch", traces["root"])
    kbdebug_run(top / "kernels", "k.py:launch", traces["kernels"])
    kbdebug_run(elsewhere, f"{top / 'kernels' / 'k.py'}:launch", traces["elsewhere"])
    return {"top": top, **traces}


def test_finding_ids_are_equal_from_the_project_root_and_from_a_folder_inside(project):
    a, b, c = (ids_of(project[k]) for k in ("root", "kernels", "elsewhere"))
    assert a, "the helper waits each load right after its issue: a KB102 finding"
    assert a == b == c
    assert all(i.startswith("KB102:kernels/helpers.py::fetch::") for i in a), a
    assert all("@kernels/k.py::kernel::fetch(tl,a_ptr,j)#0" in i for i in a), a


def test_diff_of_two_recordings_from_different_folders_is_no_regression(project, capsys):
    a, b = str(project["root"]), str(project["kernels"])
    assert main(["diff", a, b, "--fail-on-regression"]) == 0
    capsys.readouterr()
    assert main(["diff", a, b, "--json", "--fail-on-regression"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["findings"]["added"] == doc["findings"]["removed"] == []
    assert doc["findings"]["kept"] == ids_of(project["root"])


def test_a_selector_from_one_recording_matches_the_other(project, capsys):
    (stable,) = {i for i in ids_of(project["root"]) if i.startswith("KB102:")}
    assert main(["report", str(project["kernels"]), "--fail-on", stable]) == 1
    capsys.readouterr()


def test_embedded_sources_use_the_same_relative_paths(project):
    for which in ("root", "kernels", "elsewhere"):
        sources = Replay.open(project[which]).index.sources
        assert set(sources) == {"kernels/k.py", "kernels/helpers.py"}
        assert sources["kernels/k.py"] == KERNEL and sources["kernels/helpers.py"] == HELPERS
    # Nothing in the trace depends on where it was recorded from: the files are equal.
    data = {project[k].read_bytes() for k in ("root", "kernels", "elsewhere")}
    assert len(data) == 1


def test_a_kernel_in_a_folder_without_a_project_marker(tmp_path):
    loose = tmp_path / "loose"
    k = write_kernel(loose)
    kbdebug_run(loose, "k.py:launch", tmp_path / "a.kbt")
    kbdebug_run(tmp_path, "loose/k.py:launch", tmp_path / "b.kbt")
    a, b = ids_of(tmp_path / "a.kbt"), ids_of(tmp_path / "b.kbt")
    assert a and a == b
    assert (
        main(["diff", str(tmp_path / "a.kbt"), str(tmp_path / "b.kbt"), "--fail-on-regression"])
        == 0
    )
    if no_marker_above(loose):  # else the root is that marker's folder: still equal
        assert launch_root(k) == loose.resolve()
        assert set(Replay.open(tmp_path / "a.kbt").index.sources) == {"k.py", "helpers.py"}
        assert all(i.startswith("KB102:helpers.py::fetch::") for i in a), a


def test_run_kernel_uses_the_kernel_functions_file_whatever_the_cwd(tmp_path, monkeypatch):
    top = tmp_path / "proj"
    top.mkdir()
    (top / ".git").mkdir()
    path = write_kernel(top / "kernels")
    helpers_spec = importlib.util.spec_from_file_location("helpers", path.parent / "helpers.py")
    helpers = importlib.util.module_from_spec(helpers_spec)
    helpers_spec.loader.exec_module(helpers)
    monkeypatch.setitem(sys.modules, "helpers", helpers)
    spec = importlib.util.spec_from_file_location("proj_k", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def record(cwd: Path) -> set[str]:
        monkeypatch.chdir(cwd)
        n = 4
        memory = Memory(size_bytes=1 << 20)
        a_ptr = memory.put(np.ones((n * 64, 64), np.float16))
        result = run_kernel(module.kernel, (a_ptr, n), (1,), memory, keep_events=True)
        return {f.file for e in result.events for f in e[3:] if hasattr(f, "file")}

    assert record(top) == record(top / "kernels") == record(tmp_path)
    assert record(tmp_path) >= {"kernels/k.py", "kernels/helpers.py"}


LAUNCHER = """\
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "kernels"))
from k import launch as launch_k


def launch(n_tiles: int = 16):
    return launch_k(n_tiles)
"""


def test_kbdebug_run_takes_the_root_of_file_py_not_of_the_kernels_file(tmp_path):
    """FILE.py of ``kbdebug run FILE.py:FUNCTION`` is the launch file, even when the
    kernel it launches lives in another folder."""
    top = tmp_path / "top"
    write_kernel(top / "kernels")
    (top / "run_me.py").write_text(LAUNCHER)
    kbdebug_run(top, "run_me.py:launch", tmp_path / "a.kbt")
    kbdebug_run(top / "kernels", "../run_me.py:launch", tmp_path / "b.kbt")
    assert ids_of(tmp_path / "a.kbt") == ids_of(tmp_path / "b.kbt")
    if no_marker_above(top):  # the root is run_me.py's folder, not kernels/
        sources = Replay.open(tmp_path / "a.kbt").index.sources
        assert set(sources) == {"kernels/k.py", "kernels/helpers.py"}


def test_a_built_in_scenario_names_its_kernel_from_kbdebugs_root_from_anywhere(
    tmp_path, monkeypatch
):
    from emulator.scenarios import SCENARIOS

    monkeypatch.chdir(tmp_path)
    result = SCENARIOS["decode_prefetch"](n_tiles=2).run(keep_events=True)
    files = {f.file for e in result.events for f in e[3:] if hasattr(f, "file")}
    assert "emulator/kernels/attention.py" in files
    assert all(f.startswith("emulator/kernels/") for f in files), files


# --- the root and the names --------------------------------------------------------------


@pytest.mark.parametrize("marker", MARKERS)
def test_the_root_is_the_nearest_folder_with_a_marker(tmp_path, marker):
    inner = tmp_path / "a" / "b" / "c"
    inner.mkdir(parents=True)
    (inner / "k.py").write_text("")
    if marker == ".git":
        (tmp_path / "a" / marker).mkdir()
    else:
        (tmp_path / "a" / marker).write_text("")
    assert launch_root(inner / "k.py") == (tmp_path / "a").resolve()
    # A nearer marker wins over the farther one.
    (tmp_path / "a" / "b" / "setup.cfg").write_text("")
    assert launch_root(inner / "k.py") == (tmp_path / "a" / "b").resolve()


def test_names_that_are_not_files_have_no_root_and_stay_as_they_are():
    assert launch_root(None) is None
    assert launch_root("<string>") is None
    assert relative_path("<string>") == "<string>"


def test_files_outside_the_root_keep_their_base_name_and_never_share_one(tmp_path, monkeypatch):
    top = tmp_path / "proj"
    (top / "kernels").mkdir(parents=True)
    (top / "pyproject.toml").write_text("")
    lib_a, lib_b = tmp_path / "lib_a", tmp_path / "lib_b"
    for lib in (lib_a, lib_b):
        lib.mkdir()
        (lib / "util.py").write_text(f"# {lib.name}\n")
    (top / "kernels" / "k.py").write_text("# kernel\n")
    root = launch_root(top / "kernels" / "k.py")

    def names(cwd: Path) -> dict[str, str]:
        monkeypatch.chdir(cwd)
        embedded: dict[str, str] = {}
        cache = LocationCache(embedded.__setitem__, root)
        got = [cache.file(str(p)) for p in (top / "kernels" / "k.py", lib_a / "util.py")]
        got.append(cache.file(str(lib_b / "util.py")))
        assert cache.file(str(lib_a / "util.py")) == got[1]  # cached, not renamed
        assert list(embedded) == got
        return dict(zip(got, embedded.values(), strict=True))

    first = names(top)
    assert list(first) == ["kernels/k.py", "util.py", "lib_b/util.py"]
    assert first["util.py"] == "# lib_a\n" and first["lib_b/util.py"] == "# lib_b\n"
    assert names(lib_b) == names(tmp_path) == first
