"""Rewriting an index cache file as a forger would: its map and arrays changed at will,
then its lengths and checksums made right again, so only the cache's own checks of what
it holds stand between the file and the replay."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from kbdebug.replay import cache as index_cache

PREAMBLE = index_cache._PREAMBLE
ALIGN = index_cache._ALIGN


def read(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The map and the arrays (copies, by name) of the cache file at ``path``."""
    data = path.read_bytes()
    _, meta_len, _, _, _ = PREAMBLE.unpack_from(data)
    meta = msgpack.unpackb(data[PREAMBLE.size : PREAMBLE.size + meta_len], raw=False)
    start = PREAMBLE.size + meta_len
    arrays = {}
    for name, dtype, shape, at in meta["arrays"]:
        count = int(np.prod(shape))
        arrays[name] = np.frombuffer(data, np.dtype(dtype), count, start + at).copy()
    return meta, arrays


def write(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """The cache file of ``meta`` and ``arrays`` (laid out as the cache lays them out, in
    the map's order), its lengths and CRC-32s right."""
    places, body = [], b""
    for name, *_ in meta["arrays"]:
        array = arrays[name]
        body += b"\0" * (-len(body) % ALIGN)
        places.append([name, array.dtype.str, list(array.shape), len(body)])
        body += np.ascontiguousarray(array).tobytes()
    meta = {**meta, "arrays": places}
    packed = msgpack.packb(meta, use_bin_type=True)
    preamble = PREAMBLE.pack(
        index_cache.MAGIC, len(packed), zlib.crc32(packed), len(body), zlib.crc32(body)
    )
    path.write_bytes(preamble + packed + body)


def forge(path: Path, change: Callable[[dict[str, Any], dict[str, np.ndarray]], Any]) -> None:
    """Apply ``change(meta, arrays)`` to the cache file at ``path``, checksums made right."""
    meta, arrays = read(path)
    change(meta, arrays)
    write(path, meta, arrays)


def forge_map(path: Path, change: Callable[[dict[str, Any], int], int | None]) -> None:
    """Apply ``change(meta, arrays_len)`` to the map of the cache file at ``path``, its
    arrays' bytes left as they are and the map's checksum made right. If ``change``
    returns a length, the preamble claims that many bytes of arrays and the file is cut
    or extended (sparse: nothing is written) to be as long as that says."""
    data = path.read_bytes()
    magic, meta_len, _, arrays_len, arrays_crc = PREAMBLE.unpack_from(data)
    meta = msgpack.unpackb(data[PREAMBLE.size : PREAMBLE.size + meta_len], raw=False)
    body = data[PREAMBLE.size + meta_len :]
    claimed = change(meta, arrays_len)
    arrays_len = arrays_len if claimed is None else claimed
    packed = msgpack.packb(meta, use_bin_type=True)
    preamble = PREAMBLE.pack(magic, len(packed), zlib.crc32(packed), arrays_len, arrays_crc)
    path.write_bytes(preamble + packed + body[:arrays_len])
    os.truncate(path, len(preamble) + len(packed) + arrays_len)


def claim_length(meta: dict[str, Any], name: str, length: int) -> int:
    """Make ``meta`` claim ``length`` elements of array ``name``, the arrays after it placed
    past them as the cache places arrays; the length of all the arrays it then claims."""
    offset = 0
    for place in meta["arrays"]:
        offset += -offset % ALIGN
        place[3] = offset
        if place[0] == name:
            place[2] = [length]
        offset += place[2][0] * np.dtype(place[1]).itemsize
    return offset
