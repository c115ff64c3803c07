"""Values: what each future's tensor was (its digest, its slice, its kept values), per trace.

Pure and Textual-free. ``Values.of(replay)`` gathers, for a trace of format 1.5, the
header's named tensors and the digest of every tensor a kernel waited for, stored or
sent (read from the trace file the first time they are asked for: the replay's index
does not hold them, so a cached index stays as it was), and the values kept beside
the trace by ``kbdebug run --values`` (see kbdebug.replay.values_file). A trace
written before 1.5 has none of these: every slice is then None, every digest None,
and places are shown by address, as before.

The API that a failed check pointing at its tile builds on:

- ``Values.stores() -> list[StoreValue]``: per store event (in issue order), its
  future, command, PE, source line, HBM range, slice and digest;
- ``Values.waited() -> list[WaitedValue]``: per waited load or receive (in wait
  order), its future, PE, issue and wait lines, HBM range, slice and digest;
- ``Values.slice_of_future(future) -> TensorSlice | None`` and
  ``Values.where_future(future) -> str`` (the slice, else the address text).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from emulator.trace.digests import Digest, TensorDef, read_tensors
from emulator.trace.reader import read_trace_tables
from emulator.trace.schema import SourceLoc
from kbdebug.replay.slices import Tensors, TensorSlice, address_text
from kbdebug.replay.values_file import KeptValues, read_kept_values, values_path

if TYPE_CHECKING:
    from kbdebug.replay.replay import Replay

#: Ops whose future's tensor is read from HBM or received, then waited for.
WAITED_OPS = ("load", "load_async", "recv_async")
#: Ops whose tensor leaves the PE: written to HBM, or sent.
STORED_OPS = ("store", "send")


@dataclass(frozen=True)
class StoreValue:
    """A store (or send) event: what it wrote, where, from which line, on which PE."""

    future: int
    cmd: int
    pe: int
    op: str
    #: Where the store was issued (None if the trace does not say).
    loc: SourceLoc | None
    #: The HBM byte range written (addr -1 for a send).
    addr: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    #: The slice of a named tensor the range is, None if it is none (or the trace is older).
    slice: TensorSlice | None
    #: The digest of the tensor written, None before format 1.5.
    digest: Digest | None

    @property
    def where(self) -> str:
        """``O[0:8, :]``, else the address text."""
        return str(self.slice) if self.slice is not None else address_text(self.addr, self.nbytes)


@dataclass(frozen=True)
class WaitedValue:
    """A load or receive whose tensor the kernel waited for."""

    future: int
    cmd: int
    pe: int
    op: str
    #: Where it was issued, and where it was waited.
    loc: SourceLoc | None
    wait_loc: SourceLoc | None
    addr: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    slice: TensorSlice | None
    digest: Digest | None

    @property
    def where(self) -> str:
        """``K[128:192, :]``, else the address text (empty for a receive)."""
        return str(self.slice) if self.slice is not None else address_text(self.addr, self.nbytes)


_OF: weakref.WeakKeyDictionary[Replay, Values] = weakref.WeakKeyDictionary()


class Values:
    """The tensors, digests and kept values of one replay's trace."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        index = replay.index
        tensors: list[TensorDef] = []
        if tuple(index.header.get("version", (1, 0))) >= (1, 5) and "tensors" in index.header:
            tensors = read_tensors(index.header["tensors"])  # checked when the trace was read
        #: The trace's named tensors, found by address.
        self.tensors = Tensors(tensors)
        self._digests: dict[int, Digest] | None = None
        self._kept: KeptValues | None = None
        self._kept_read = False

    @classmethod
    def of(cls, replay: Replay) -> Values:
        """The Values of ``replay`` (made once per replay)."""
        values = _OF.get(replay)
        if values is None:
            values = _OF[replay] = cls(replay)
        return values

    # --- digests ---------------------------------------------------------------------

    @property
    def has_digests(self) -> bool:
        """Whether the trace can hold digests (format 1.5 with its tensors listed)."""
        header = self.replay.index.header
        return tuple(header.get("version", (1, 0))) >= (1, 5) and "tensors" in header

    @property
    def digests(self) -> dict[int, Digest]:
        """Every digest by future (read from the trace file the first time)."""
        digests = self._digests
        if digests is None:
            # Assigned once whole: a thread reading them leaves None until then.
            digests = {}
            if self.has_digests and self.replay.path is not None:
                trace = read_trace_tables(self.replay.path, _ignore)
                index = self.replay.index
                # A file rewritten since it was opened (a re-run) is another run's.
                if trace.header == index.header and _ending(trace.footer) == _ending(index.footer):
                    digests = trace.digests
            self._digests = digests
        return digests

    @property
    def digests_ready(self) -> bool:
        """Whether the digests were read (asking for one then reads nothing)."""
        return self._digests is not None or not self.has_digests or self.replay.path is None

    def digest(self, future: int) -> Digest | None:
        """The digest of ``future``'s tensor, None if the trace has none for it."""
        return self.digests.get(future)

    # --- kept values -----------------------------------------------------------------

    @property
    def kept(self) -> KeptValues | None:
        """The values kept beside the trace by ``kbdebug run --values``, if any."""
        if not self._kept_read:
            self._kept_read = True
            if self.replay.path is not None:
                self._kept = read_kept_values(values_path(self.replay.path), self.replay.path)
        return self._kept

    def array(self, future: int) -> np.ndarray | None:
        """The values of ``future``'s tensor when they were kept, else None."""
        kept = self.kept
        return None if kept is None else kept.array(future)

    # --- places ----------------------------------------------------------------------

    def slice_of_future(self, future: int) -> TensorSlice | None:
        """The slice of a named tensor ``future`` read or wrote, None if none."""
        index = self.replay.index
        f, k = index.futures, index.commands
        if not 0 <= future < len(f.cmd) or f.cmd[future] < 0:
            return None
        cmd = int(f.cmd[future])
        return self.tensors.slice_of(int(k.addr[cmd]), int(k.nbytes[cmd]))

    def where_future(self, future: int) -> str:
        """``K[128:192, :]`` for ``future``, else its address text (empty without one)."""
        index = self.replay.index
        f, k = index.futures, index.commands
        if not 0 <= future < len(f.cmd) or f.cmd[future] < 0:
            return ""
        cmd = int(f.cmd[future])
        return self.tensors.where(int(k.addr[cmd]), int(k.nbytes[cmd]))

    def where(self, addr: int, nbytes: int) -> str:
        """The slice a byte range is, else its address text."""
        return self.tensors.where(addr, nbytes)

    # --- the API for a failed check -------------------------------------------------------

    def stores(self) -> list[StoreValue]:
        """Every store and send, in issue order, with its slice, PE, line and digest."""
        return [self._store(cmd) for cmd in self._commands_of(STORED_OPS, by="issue")]

    def waited(self) -> list[WaitedValue]:
        """Every load and receive the kernel waited for, in wait order."""
        index = self.replay.index
        f, k = index.futures, index.commands
        out = []
        for cmd in self._commands_of(WAITED_OPS, by="wait"):
            future = int(k.future[cmd])
            wait_loc = index.loc(int(f.wait_loc[future])) if future >= 0 else None
            out.append(
                WaitedValue(
                    future,
                    cmd,
                    int(k.pe[cmd]),
                    index.string(int(k.op[cmd])),
                    index.loc(int(k.loc[cmd])),
                    wait_loc,
                    int(k.addr[cmd]),
                    int(k.nbytes[cmd]),
                    tuple(index.shapes[int(k.shape[cmd])]),
                    index.string(int(k.dtype[cmd])),
                    self.tensors.slice_of(int(k.addr[cmd]), int(k.nbytes[cmd])),
                    self.digest(future),
                )
            )
        return out

    def _store(self, cmd: int) -> StoreValue:
        index = self.replay.index
        k = index.commands
        future = int(k.future[cmd])
        return StoreValue(
            future,
            cmd,
            int(k.pe[cmd]),
            index.string(int(k.op[cmd])),
            index.loc(int(k.loc[cmd])),
            int(k.addr[cmd]),
            int(k.nbytes[cmd]),
            tuple(index.shapes[int(k.shape[cmd])]),
            index.string(int(k.dtype[cmd])),
            self.tensors.slice_of(int(k.addr[cmd]), int(k.nbytes[cmd])),
            self.digest(future),
        )

    def _commands_of(self, ops: tuple[str, ...], *, by: str) -> list[int]:
        """The commands with one of ``ops``, by issue (or, ``by="wait"``, those whose
        future was waited, by the wait's end)."""
        index = self.replay.index
        k, f = index.commands, index.futures
        op_ids = [index.string_id(op) for op in ops]
        op_ids = [i for i in op_ids if i >= 0]
        issued = k.issue >= 0
        mine = np.isin(k.op, op_ids) & issued
        cmds = np.flatnonzero(mine)
        if by == "wait":
            futures = k.future[cmds].astype(np.int64)
            ok = futures >= 0
            cmds, futures = cmds[ok], futures[ok]
            ends = f.wait_end[futures].astype(np.int64)
            waited = ends >= 0
            cmds, ends = cmds[waited], ends[waited]
            return cmds[np.argsort(ends, kind="stable")].tolist()
        return cmds[np.argsort(k.issue[cmds], kind="stable")].tolist()


def _ending(footer: dict | None) -> tuple | None:
    """What tells two runs' footers apart: their status, event count and end."""
    if footer is None:
        return None
    return footer.get("status"), footer.get("events"), footer.get("end_time")


def _ignore(_tables: object) -> None:
    """Drop the events (Values reads only the digests of the trace)."""
