"""A hazard standing for several pairs of its two lines says how often this run did what
breaks the result, not only what its first pair did: the racy read-back's count of old
reads is the count of output tiles that came out wrong."""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from kbdebug.analysis import find_hazards
from kbdebug.replay import Replay
from tests import kernels_store_load_race as race

N_TILES = 4


def old_reads_and_wrong_tiles(tmp_path, seed: int) -> tuple[int, int, str]:
    scenario = race.launch_race(N_TILES)
    scenario.config = dataclasses.replace(scenario.config, perturb_seed=seed)
    path = tmp_path / f"seed{seed}.kbt"
    scenario.run(trace=path)
    (hazard,) = find_hazards(Replay.open(path).index)
    told = re.search(r"the load read the old bytes (\d+) of (\d+) times", hazard.message)
    assert told and int(told.group(2)) == hazard.count == N_TILES, hazard.message
    x = np.arange(N_TILES * race.ROWS * race.COLS, dtype=np.float32)
    x = x.reshape(N_TILES, race.ROWS, race.COLS)
    got = scenario.memory.get(scenario.args[3], x.shape, "f32")
    wrong = sum(not np.array_equal(got[i], x[i] * 2 + 1) for i in range(N_TILES))
    return int(told.group(1)), wrong, hazard.message


def test_old_reads_told_per_occurrence_match_the_wrong_tiles(tmp_path):
    seen_some_old = False
    for seed in range(0, 12):
        old, wrong, message = old_reads_and_wrong_tiles(tmp_path, seed)
        assert old == wrong, (seed, message)
        seen_some_old |= 0 < old < N_TILES
        if seen_some_old:
            break
    assert seen_some_old, "some seed reads old bytes on some pairs, new on others"
