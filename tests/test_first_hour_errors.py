"""First-hour mistakes say what was wrong and what to do: tl.free of a tile that owns no
scratch, `kbdebug run` given the kernel (or another function that is no launcher)."""

from __future__ import annotations

import inspect
import textwrap

import pytest

from emulator import EmulatorError, Memory, run_kernel
from kbdebug.cli import main

FREEABLE = "only tiles from tl.load, or from tl.wait on a tl.load_async or tl.recv_async"


def free_error(kernel) -> str:
    """The message of the error ``kernel`` raises, run on one PE."""
    with pytest.raises(EmulatorError) as info:
        run_kernel(kernel, (), (1,), Memory(1 << 16))
    return str(info.value)


def line_of(kernel, marker: str) -> int:
    lines, first = inspect.getsourcelines(kernel)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def test_free_of_a_dot_result_names_the_argument_and_the_dot_line():
    def kernel(tl):
        a = tl.load(0, (8, 8), "f32")
        d = tl.dot(a, a)  # <- dot
        tl.free(a); tl.free(d)  # fmt: skip  # noqa: E702

    message = free_error(kernel)
    dot = line_of(kernel, "# <- dot")
    assert f": tl.free(d): d is the result of tl.dot at tests/test_first_hour_errors.py:{dot}," in (
        message
    )
    assert "owns no scratch buffer" in message and FREEABLE in message


def test_free_of_a_tile_bound_twice_says_computed_without_guessing_the_line():
    def kernel(tl):
        acc = tl.zeros((8, 8), "f32")
        acc = acc + 1.0
        tl.free(acc)

    message = free_error(kernel)
    assert ": tl.free(acc): acc is a computed tile (of tl.dot, tl.zeros," in message
    assert " at tests/" not in message and FREEABLE in message


def test_free_of_a_store_handle_or_a_number_says_what_it_is():
    def store(tl):
        tl.free(tl.store(0, tl.zeros((4,), "f32")))

    def number(tl):
        tl.free(3)

    message = free_error(store)
    assert "tl.free(tl.store(0, tl.zeros((4,), 'f32'))): " in message
    assert "is the handle of a tl.store or tl.send" in message
    assert "tl.free(3): 3 is a int, not a tile" in free_error(number)


LAUNCH_FILE = textwrap.dedent(
    """
    import numpy as np
    from emulator import Memory
    from emulator.scenarios import Scenario

    def gemm_kernel(tl, a_ptr, n):
        tl.wait(tl.load_async(a_ptr, (4, 4), "f32"))

    def helper(n=1):
        return None

    def launch(n=1):
        mem = Memory(1 << 16)
        ptr = mem.put(np.ones((4, 4), np.float32))
        return Scenario(kernel=gemm_kernel, args=(ptr, n), grid=(1,), memory=mem)

    def built() -> Scenario:
        return launch()
    """
)


@pytest.fixture
def launch_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text(LAUNCH_FILE)
    return tmp_path


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_run_of_the_kernel_says_it_is_one_and_names_the_launchers(launch_dir, capsys):
    assert main(["run", "mine.py:gemm_kernel", "-o", "k.kbt"]) == 2
    assert one_line(capsys) == (
        "kbdebug run: mine.py:gemm_kernel looks like a kernel (its first parameter is tl): "
        "give the function that returns an emulator.scenarios.Scenario, "
        "e.g. mine.py:launch (or built)"
    )
    assert not (launch_dir / "k.kbt").exists()


def test_run_of_a_function_returning_none_names_the_launchers(launch_dir, capsys):
    assert main(["run", "mine.py:helper", "-o", "h.kbt"]) == 2
    assert one_line(capsys) == (
        "kbdebug run: mine.py:helper returned None, not an emulator.scenarios.Scenario: "
        "give the function that returns one, e.g. mine.py:launch (or built)"
    )


def test_without_a_visible_launcher_the_non_kernels_are_listed(launch_dir, capsys):
    text = LAUNCH_FILE.replace("return Scenario(", "scenario = Scenario(").replace(
        "def built() -> Scenario:", "def built():"
    )
    (launch_dir / "hidden.py").write_text(
        text.replace("memory=mem)", "memory=mem)\n    return scenario")
    )
    assert main(["run", "hidden.py:gemm_kernel"]) == 2
    assert one_line(capsys).endswith(
        "Scenario, none in hidden.py visibly does "
        "(functions there not kernels: helper, launch, built)"
    )
