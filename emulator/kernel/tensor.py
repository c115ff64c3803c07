"""TensorHandle: a tile a kernel holds, with numpy data; arithmetic on it is charged to MATH."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from emulator.dtypes import name_of

if TYPE_CHECKING:
    from emulator.kernel.futures import Waitable
    from emulator.kernel.tl import TL


class Buffer:
    """A scratch allocation holding one loaded or received tile."""

    __slots__ = ("id", "nbytes", "fid", "future", "frame", "freed", "orphan", "host_read")

    def __init__(self, bid: int, nbytes: int):
        self.id = bid
        self.nbytes = nbytes
        #: Id of the load or receive that fills it (-1 until it is issued).
        self.fid = -1
        #: That load or receive while it is not waited yet; None once it is. Dropped at
        #: the wait so that a buffer and its future never reference each other: such a
        #: cycle would keep the tile's data until a full garbage collection.
        self.future: Waitable | None = None
        #: The scope frame (or the kernel's top frame) that recycles it, by buffer id;
        #: None once recycled or while its scope has closed on it in flight.
        self.frame: dict[int, Buffer] | None = None
        #: Recycled: its tensor may no longer be used.
        self.freed = False
        #: Its scope closed while the load was in flight; the scope that waits on it adopts it.
        self.orphan = False
        #: Kernel code read its values on the host (HOST_READ recorded, once per buffer).
        self.host_read = False


class TensorHandle:
    """A tensor on the PE. ``.data`` is a numpy array; operators go through the MATH engine."""

    __slots__ = ("_tl", "_data", "buffer", "producer")

    # Numpy operands on the left (np.float32(0.5) * x, row + x) must defer to
    # our reflected operators, or numpy computes the result itself, uncharged.
    __array_ufunc__ = None

    def __init__(self, tl: TL, data: np.ndarray, buffer: Buffer | None = None, producer: int = -1):
        self._tl = tl
        self._data = data
        #: The scratch buffer the data lives in (loaded and received tiles only).
        self.buffer = buffer
        #: The command whose result the data is: the compute that made it, or the load or
        #: receive whose wait gave it (a view keeps its base's); -1 for none (trace format
        #: 1.6 records it for each store and send: when the data it moves was ready).
        self.producer = producer

    @property
    def data(self) -> np.ndarray:
        """The values (raises RecycledBufferError if the scratch buffer was recycled).

        Kernel code reading them is recorded (HOST_READ): what it issues next may
        depend on them. The emulator's own uses go through ``_values``.
        """
        data = self._values()
        self._tl._host_read(self)
        return data

    def _values(self) -> np.ndarray:
        """The values, unrecorded (raises RecycledBufferError if the buffer was recycled)."""
        if self.buffer is not None and self.buffer.freed:
            self._tl._recycled(self)
        return self._data

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> str:
        return name_of(self._data.dtype)

    @property
    def nbytes(self) -> int:
        return self._data.nbytes

    def to(self, dtype: str) -> TensorHandle:
        """A copy converted to ``dtype`` (charged to MATH)."""
        return self._tl._cast(self, dtype)

    def __getitem__(self, index: Any) -> TensorHandle:
        # Indexing (x[:, None], x[0]) is a view: layout, not work.
        return TensorHandle(self._tl, self._values()[index], self.buffer, self.producer)

    def __add__(self, other):
        return self._tl._binary("add", np.add, self, other)

    def __radd__(self, other):
        return self._tl._binary("add", np.add, other, self)

    def __sub__(self, other):
        return self._tl._binary("sub", np.subtract, self, other)

    def __rsub__(self, other):
        return self._tl._binary("sub", np.subtract, other, self)

    def __mul__(self, other):
        return self._tl._binary("mul", np.multiply, self, other)

    def __rmul__(self, other):
        return self._tl._binary("mul", np.multiply, other, self)

    def __truediv__(self, other):
        return self._tl._binary("div", np.divide, self, other)

    def __rtruediv__(self, other):
        return self._tl._binary("div", np.divide, other, self)

    def __neg__(self):
        return self._tl._unary("neg", np.negative, self)

    def __array__(self, dtype=None, copy=None):
        data = self.data  # a host read, as np.asarray(x) in kernel code is
        return data if dtype is None else data.astype(dtype)

    def __repr__(self) -> str:
        return f"TensorHandle(shape={self.shape}, dtype={self.dtype})"
