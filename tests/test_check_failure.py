"""`kbdebug run`'s failed check in one line: what failed, how many elements, the largest
error and where (as a wrong block's lines say it), not numpy.testing's whole printout;
another assertion's extra lines stay below it."""

from __future__ import annotations

import numpy as np
import pytest

from kbdebug.cli import main
from kbdebug.launch.check_failure import check_failure

LAUNCH = """
import numpy as np
from emulator import Memory
from emulator.scenarios import Scenario

def kernel(tl, x, o):
    tl.wait(tl.store(o, tl.load(x, (8, 8), "f32") * 2.0))

def launch(mode="allclose"):
    mem = Memory(1 << 16)
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    x, o = mem.put(a), mem.alloc(256)

    def check(memory):
        got, want = memory.get(o, (8, 8), "f32"), a * 2.0
        want[3, 5] += 7
        if mode == "allclose":
            np.testing.assert_allclose(got, want, rtol=1e-6)
        else:
            np.testing.assert_array_equal(got, want, err_msg="O is wrong")

    return Scenario(kernel=kernel, args=(x, o), grid=(1,), memory=mem, check=check)
"""


@pytest.mark.parametrize(
    ("mode", "what"),
    [
        ("allclose", "not equal to tolerance rtol=1e-06, atol=0"),
        ("equal", "O is wrong (arrays are not equal)"),
    ],
)
def test_a_numpy_check_fails_in_one_line_with_the_largest_error(tmp_path, capsys, mode, what):
    (tmp_path / "k.py").write_text(LAUNCH)
    argv = ["run", f"{tmp_path / 'k.py'}:launch", "--set", f"mode={mode!r}", "-q"]
    assert main([*argv, "-o", str(tmp_path / "k.kbt")]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"kbdebug run: output check failed: {what}: 1 of 64 elements differ, "
        "largest error 7 at [3, 5]: got 58, want 65\n"
    )


def test_another_assertions_lines_stay_below_its_first():
    said = check_failure(AssertionError("O differs\nrow 3 is shifted\n\nrow 4 too"))
    assert said == ("O differs", ["row 3 is shifted", "row 4 too"])
    assert check_failure(AssertionError("O differs")) == ("O differs", [])


def _numpy_error(assertion, got, want) -> AssertionError:
    try:
        assertion(got, want)
    except AssertionError as error:
        return error
    raise AssertionError("numpy found no difference")


@pytest.mark.parametrize("wrong", [3, 64], ids=["few", "many"])
@pytest.mark.parametrize(
    ("assertion", "what"),
    [
        (np.testing.assert_allclose, "not equal to tolerance rtol=1e-07, atol=0"),
        (np.testing.assert_array_equal, "arrays are not equal"),
    ],
    ids=["allclose", "array_equal"],
)
def test_numpys_own_messages_few_or_many_mismatches_leave_no_dangling_header(
    assertion, what, wrong
):
    # numpy 2.x lists "Mismatch at indices:" for a few, "First 5 mismatches are at
    # indices:" for many; the list goes, so its header must go with it.
    want = np.zeros((8, 8))
    got = want.copy()
    got.flat[:wrong] = np.arange(1, wrong + 1)
    error = _numpy_error(assertion, got, want)
    at = np.unravel_index(wrong - 1, got.shape)
    assert check_failure(error) == (
        f"{what}: {wrong} of 64 elements differ, largest error {wrong} at "
        f"[{at[0]}, {at[1]}]: got {wrong}, want 0",
        [],
    )
    # The same text with its arrays gone from the traceback still says the largest error.
    again = check_failure(AssertionError(str(error)))[0]
    assert again == f"{what}: {wrong} of 64 elements differ, largest error {wrong}"
    assert "indices" not in again
