"""The lines of a hazard's accesses: no performance finding is built on them.

A load and a store of the same bytes that nothing orders (a hazard, KB201-KB203) give
a result that depends on timing. Any placement advice for either line (issue the load
earlier, move or drop a wait on the store) keeps that race or widens it; a line whose
accesses reach outside their tensor (KB204) moves bytes it did not mean to. So the
findings leave these lines out until the hazard is fixed: the hazard comes first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kbdebug.analysis.hazard_order import accesses_of, unordered_pairs, without
from kbdebug.analysis.oob import outside_commands

if TYPE_CHECKING:
    from kbdebug.analysis.model import Model


def unsafe_lines(model: Model) -> frozenset[tuple[int, int]]:
    """(PE, issue line's loc id) of every access in an unordered pair or outside its
    tensor, once per model."""
    cached = model.__dict__.get("_unsafe_lines")
    if cached is not None:
        return cached
    index = model.index
    outside = outside_commands(index)
    acc = without(accesses_of(index), outside)
    pairs = unordered_pairs(index, acc)
    sides = np.concatenate([pairs.first, pairs.second])
    cmds = np.concatenate([acc.cmd[sides].astype(np.int64), np.fromiter(outside, dtype=np.int64)])
    pes = np.asarray(index.commands.pe, dtype=np.int64)[cmds]
    locs = np.asarray(index.commands.loc, dtype=np.int64)[cmds]
    out = frozenset(zip(pes.tolist(), locs.tolist(), strict=True))
    model.__dict__["_unsafe_lines"] = out
    return out


def on_unsafe_line(d, cmds) -> bool:
    """Whether any of ``cmds`` (of a PE's diagnosis ``d``) is issued at such a line."""
    racy = unsafe_lines(d.model)
    if not racy:
        return False
    pe = d.prog.pe
    return any((pe, int(d.loc[c])) in racy for c in cmds if 0 <= c < len(d.loc))
