"""The values file beside a trace, ``OUT.kbt.values.npz``: tensors kept by ``run --values``.

An ``.npz`` (numpy's zip of ``.npy`` arrays, read with ``allow_pickle=False``): one
member ``f<future>`` per tensor kept, and ``meta``, the UTF-8 JSON of
``{"format": "kbdebug-values", "version": 1, "trace_bytes": int, "trace_crc32": int,
"kept": int, "cut": int, "tensor_limit": int, "total_limit": int, "note": str}``.
The trace's size and CRC-32 tie the file to its trace: a values file left by
another run is not read. Everything read is bounded before it is allocated.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FORMAT = "kbdebug-values"
VERSION = 1
SUFFIX = ".values.npz"
#: Default limits: bytes of one tensor kept, and of all of them.
TENSOR_LIMIT = 1 << 20
TOTAL_LIMIT = 64 << 20
#: What a reader takes at most, whatever the file says: per member, members, meta bytes.
MAX_MEMBER_BYTES = 256 << 20
MAX_MEMBERS = 1 << 20
MAX_META_BYTES = 1 << 16


class ValuesFileError(ValueError):
    """A values file that cannot be read (one line, naming the file)."""


def values_path(trace_path: str | os.PathLike[str]) -> Path:
    """Where the values of the trace at ``trace_path`` go: ``TRACE.values.npz`` beside it."""
    path = Path(trace_path)
    return path.with_name(path.name + SUFFIX)


def is_values_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a values file this module wrote (so it may be replaced)."""
    try:
        with zipfile.ZipFile(path) as archive:
            meta = _meta(archive, str(path))
    except (OSError, zipfile.BadZipFile, ValuesFileError, ValueError):
        return False
    return meta.get("format") == FORMAT


@dataclass
class ValueKeeper:
    """Collects tensors as the emulator hands them (``keep``), within the limits, and
    writes them beside the trace (``save``)."""

    tensor_limit: int = TENSOR_LIMIT
    total_limit: int = TOTAL_LIMIT
    arrays: dict[int, np.ndarray] = field(default_factory=dict)
    total: int = 0
    #: Tensors not kept: over the per-tensor limit, or once the total was reached.
    too_large: int = 0
    over_total: int = 0
    #: The first future not kept for the total limit (-1: none).
    first_over_total: int = -1

    def keep(self, future: int, array: np.ndarray) -> None:
        """Keep a copy of ``array`` as ``future``'s tensor, if the limits allow."""
        if array.nbytes > self.tensor_limit:
            self.too_large += 1
            return
        if self.total + array.nbytes > self.total_limit:
            self.over_total += 1
            if self.first_over_total < 0:
                self.first_over_total = future
            return
        self.arrays[future] = np.array(array, copy=True)
        self.total += array.nbytes

    @property
    def cut(self) -> int:
        return self.too_large + self.over_total

    def note(self) -> str:
        """What the limits left out, in one line ("" if nothing)."""
        parts = []
        if self.too_large:
            parts.append(
                f"{self.too_large} tensor(s) over the {_size(self.tensor_limit)} per-tensor limit"
            )
        if self.over_total:
            parts.append(
                f"{self.over_total} tensor(s) from future {self.first_over_total} on, past the "
                f"{_size(self.total_limit)} total limit"
            )
        if not parts:
            return ""
        return f"values kept for {len(self.arrays)} tensors; not kept: " + "; ".join(parts)

    def save(self, path: str | os.PathLike[str], trace_path: str | os.PathLike[str]) -> None:
        """Write the kept tensors to ``path``, tied to the trace at ``trace_path``."""
        size, crc = _fingerprint(trace_path)
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "trace_bytes": size,
            "trace_crc32": crc,
            "kept": len(self.arrays),
            "cut": self.cut,
            "tensor_limit": self.tensor_limit,
            "total_limit": self.total_limit,
            "note": self.note(),
        }
        members = {f"f{future}": array for future, array in self.arrays.items()}
        members["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
        tmp = Path(path).with_name(Path(path).name + f".partial-{os.getpid()}")
        try:
            with open(tmp, "wb") as out:
                np.savez(out, **members)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()


@dataclass
class KeptValues:
    """The values read from a values file: arrays by future, read on demand."""

    path: str
    members: dict[int, str]
    note: str
    _archive: zipfile.ZipFile

    def array(self, future: int) -> np.ndarray | None:
        """``future``'s tensor, None if it was not kept; ValuesFileError if it is bad."""
        name = self.members.get(future)
        if name is None:
            return None
        info = self._archive.getinfo(name)
        if info.file_size > MAX_MEMBER_BYTES:
            raise ValuesFileError(
                f"{self.path}: {name} is {info.file_size:,} bytes, over the limit"
            )
        try:
            with self._archive.open(info) as member:
                data = member.read(MAX_MEMBER_BYTES + 1)
            return load_npy(data)
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            raise ValuesFileError(f"{self.path}: {name} is not a numpy array ({e})") from None


def read_kept_values(
    path: str | os.PathLike[str], trace_path: str | os.PathLike[str]
) -> KeptValues | None:
    """The values file at ``path`` if it is there and of the trace at ``trace_path``;
    None otherwise (no file, or one of another run). ValuesFileError if it is bad."""
    name = str(path)
    if not os.path.isfile(path):
        return None
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise ValuesFileError(f"{name}: not a values file ({e})") from None
    try:
        meta = _meta(archive, name)
        if (meta.get("trace_bytes"), meta.get("trace_crc32")) != _fingerprint(trace_path):
            archive.close()
            return None
        infos = archive.infolist()
        if len(infos) > MAX_MEMBERS:
            raise ValuesFileError(f"{name}: {len(infos):,} members, over the limit")
        members = {}
        for info in infos:
            stem = info.filename.removesuffix(".npy")
            if stem.startswith("f") and stem[1:].isdigit() and len(stem) < 20:
                members[int(stem[1:])] = info.filename
        note = meta.get("note")
        return KeptValues(name, members, note if isinstance(note, str) else "", archive)
    except BaseException:
        archive.close()
        raise


def load_npy(data: bytes) -> np.ndarray:
    """The array of the ``.npy`` bytes ``data``, its header's size checked against the
    bytes there before anything is allocated; ValueError if it does not fit."""
    stream = io.BytesIO(data)
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise ValueError(f"npy version {version} unknown")
    if dtype.hasobject:
        raise ValueError("an object array")
    count = 1
    for dim in shape:
        count *= dim
    if count * dtype.itemsize > len(data) - stream.tell():
        raise ValueError(f"its header says {shape} {dtype}, more than its bytes")
    stream.seek(0)
    return np.load(stream, allow_pickle=False)


def _meta(archive: zipfile.ZipFile, name: str) -> dict:
    try:
        info = archive.getinfo("meta.npy")
    except KeyError:
        raise ValuesFileError(f"{name}: no meta member: not a values file") from None
    if info.file_size > MAX_META_BYTES:
        raise ValuesFileError(f"{name}: meta is {info.file_size:,} bytes, over the limit")
    try:
        with archive.open(info) as member:
            raw = load_npy(member.read(MAX_META_BYTES + 1))
        meta = json.loads(raw.tobytes().decode("utf-8"))
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ValuesFileError(f"{name}: unreadable meta ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValuesFileError(f"{name}: not a {FORMAT} file")
    if meta.get("version") != VERSION:
        raise ValuesFileError(f"{name}: values file version {meta.get('version')!r:.20} unknown")
    return meta


def _fingerprint(trace_path: str | os.PathLike[str]) -> tuple[int, int]:
    """The trace file's size and CRC-32 (what ties a values file to it)."""
    crc, size = 0, 0
    with open(trace_path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return size, crc


def _size(nbytes: int) -> str:
    if nbytes >= 1 << 20 and nbytes % (1 << 20) == 0:
        return f"{nbytes >> 20} MiB"
    if nbytes >= 1 << 10 and nbytes % (1 << 10) == 0:
        return f"{nbytes >> 10} KiB"
    return f"{nbytes:,} bytes"
