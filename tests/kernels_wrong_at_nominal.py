"""A kernel whose output is wrong at every timing (it scales by 2 where its check
expects 3): for tests/test_explore_nominal.py."""

from __future__ import annotations

import numpy as np

from emulator import Memory
from emulator.scenarios import Scenario

SHAPE = (8, 16)


def kernel_wrong_scale(tl, src, dst):
    """Loads one tile and stores it times 2."""
    x = tl.wait(tl.load_async(src, SHAPE, "f32"))
    tl.wait(tl.store(dst, x * 2.0))


def launch_wrong() -> Scenario:
    """The check expects the tile times 3: the nominal run fails it."""
    mem = Memory(size_bytes=1 << 16)
    x = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    src = mem.put(x, name="X")
    dst = mem.alloc(x.nbytes)
    mem.name("O", dst, SHAPE, "f32")

    def check(memory):
        np.testing.assert_allclose(memory.get(dst, SHAPE, "f32"), x * 3.0)

    return Scenario(kernel_wrong_scale, (src, dst), (1,), mem, check=check)
