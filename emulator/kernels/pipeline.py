"""TilePipeline: the shared double-buffering helper (ADR-0062 D4) every async kernel uses."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from emulator.kernel.futures import LoadFuture
from emulator.kernel.tensor import TensorHandle


class TilePipeline:
    """Keeps ``depth`` loads in flight on each of several tile streams (K and V, say).

    ``streams`` are functions from a tile index to ``(ptr, shape, dtype)``.
    Priming issues tiles 0..depth-1 interleaved across streams (K0, V0, K1,
    V1) so the first tiles of every stream arrive first. ``next(s)`` waits for
    the oldest load of stream ``s`` and at once issues the load ``depth``
    tiles ahead, so the next tiles' DMA runs under the compute that follows.

    Priming happens at the first ``next()``, not at construction: called
    inside the loop's ``tl.scope()``, the primed buffers then belong to the
    loop's scopes and are recycled tile by tile, so the pipeline needs
    scratch for ``depth + 1`` tiles per stream. Primed at construction,
    outside any scope, they would stay allocated until the kernel ends.
    """

    def __init__(
        self,
        tl,
        streams: Sequence[Callable[[int], tuple[int, tuple[int, ...], str]]],
        n_tiles: int,
        depth: int = 2,
    ):
        if depth < 1:
            raise ValueError(f'"depth" must be >= 1, got {depth}')
        self.tl = tl
        self.streams = streams
        self.n_tiles = n_tiles
        self.depth = depth
        self._in_flight: list[deque[LoadFuture]] = [deque() for _ in streams]
        self._next_tile = [0] * len(streams)
        self._primed = False

    def _prime(self) -> None:
        self._primed = True
        for _ in range(min(self.depth, self.n_tiles)):
            for s in range(len(self.streams)):
                self._issue(s)

    def _issue(self, s: int) -> None:
        j = self._next_tile[s]
        ptr, shape, dtype = self.streams[s](j)
        self._in_flight[s].append(self.tl.load_async(ptr, shape, dtype))
        self._next_tile[s] = j + 1

    def next(self, s: int = 0) -> TensorHandle:
        """The next tile of stream ``s``, keeping that stream's pipeline full."""
        if not self._primed:
            self._prime()
        tile = self.tl.wait(self._in_flight[s].popleft())
        if self._next_tile[s] < self.n_tiles:
            self._issue(s)
        return tile
