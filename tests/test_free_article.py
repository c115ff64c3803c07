"""tl.free on a value that is no tile names its type with the right article."""

from __future__ import annotations

import numpy as np
import pytest

from emulator import EmulatorError, Memory, run_kernel


def _free_message(value) -> str:
    """The message of the error tl.free(value) raises, run on one PE."""

    def kernel(tl):
        tl.free(value)

    with pytest.raises(EmulatorError) as info:
        run_kernel(kernel, (), (1,), Memory(1 << 16))
    return str(info.value)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (3, "value is an int, not a tile"),
        (2.5, "value is a float, not a tile"),
        (np.zeros(2), "value is an ndarray, not a tile"),
        (None, "value is None, not a tile"),
    ],
)
def test_free_of_a_non_tile_says_what_it_is_with_its_article(value, said):
    assert f"tl.free(value): {said};" in _free_message(value)
