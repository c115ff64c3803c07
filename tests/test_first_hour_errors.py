"""First-hour mistakes say what was wrong and what to do: tl.free of a tile that owns no
scratch, `kbdebug run` given the kernel (or another function that is no launcher)."""

from __future__ import annotations

import inspect
import json
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
    assert "tl.free(3): 3 is an int, not a tile" in free_error(number)


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


def test_a_builder_that_returned_none_is_not_offered_as_its_own_fix(launch_dir, capsys):
    maybe = "def maybe(flag=False) -> Scenario:\n    return launch() if flag else None\n"
    (launch_dir / "maybe.py").write_text(
        LAUNCH_FILE.replace("def built() -> Scenario:", "def built():").replace(
            "    return launch()\n", "    return launch()\n\n" + maybe
        )
    )
    assert main(["run", "maybe.py:maybe"]) == 2
    assert one_line(capsys).endswith("give the function that returns one, e.g. maybe.py:launch")


def test_without_a_visible_launcher_the_non_kernels_are_listed(launch_dir, capsys):
    text = LAUNCH_FILE.replace("return Scenario(", "scenario = Scenario(").replace(
        "def built() -> Scenario:", "def built():"
    )
    (launch_dir / "hidden.py").write_text(
        text.replace("memory=mem)", "memory=mem)\n    return scenario")
    )
    assert main(["run", "hidden.py:gemm_kernel"]) == 2
    assert one_line(capsys).endswith(
        "Scenario, no function in hidden.py visibly does; "
        "functions there not kernels: helper, launch, built"
    )


LONG_CALL = textwrap.dedent(
    """
    import numpy as np
    from emulator import Memory
    from emulator.scenarios import Scenario

    ROWS, COLS = 16, 64


    def kernel(tl, source_tiles_ptr, out_ptr, n_tiles):
        tile_bytes = ROWS * COLS * 4
        for tile_index in range(n_tiles):
            with tl.scope():
                x = tl.load(source_tiles_ptr + tile_index * tile_bytes, (ROWS, COLS), "f32")
                tl.store(out_ptr + tile_index * tile_bytes, tl.exp(x) * 2.0)


    def launch(n_tiles=6):
        mem = Memory(1 << 18)
        x_ptr = mem.put(np.zeros((n_tiles, ROWS, COLS), np.float32), name="X")
        out_ptr = mem.alloc(n_tiles * ROWS * COLS * 4)
        return Scenario(kernel=kernel, args=(x_ptr, out_ptr, n_tiles), grid=(1,), memory=mem)
    """
)
FULL_TEXT = "tl.load(source_tiles_ptr + tile_index * tile_bytes, (ROWS, COLS), 'f32')"


@pytest.fixture(scope="module")
def long_call_trace(tmp_path_factory):
    """A trace whose one finding (KB101) is on a call longer than an id keeps whole."""
    folder = tmp_path_factory.mktemp("long_call")
    (folder / "longcall.py").write_text(LONG_CALL)
    trace = folder / "l.kbt"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        assert main(["run", "longcall.py:launch", "-o", str(trace)]) == 0
    return trace


def gate(trace, selector: str) -> int:
    return main(["report", str(trace), "--fail-on", selector])


def test_a_long_call_id_is_cut_to_a_hash_and_selects_as_printed(long_call_trace, capsys):
    assert main(["report", str(long_call_trace), "--json"]) == 0
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert finding["id"].startswith("KB101:longcall.py::kernel::tl.load(source_tiles_ptr+")
    text = finding["id"].split("::")[2]
    # The first 54 characters, ~, 8 hex digits of a hash of the whole text.
    assert len(text.partition("#")[0]) == 63 and text[54] == "~", text
    assert gate(long_call_trace, finding["id"]) == 1
    assert gate(long_call_trace, finding["id"] + ":pe0") == 1


def test_a_long_call_typed_in_full_selects_it_too(long_call_trace, capsys):
    assert gate(long_call_trace, f"KB101:longcall.py::kernel::{FULL_TEXT}#0") == 1
    other = FULL_TEXT.replace("f32", "f16")
    assert gate(long_call_trace, f"KB101:longcall.py::kernel::{other}#0") == 0
