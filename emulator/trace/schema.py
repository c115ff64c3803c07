"""Event kinds and their fields: the one vocabulary the emulator and every trace reader share.

The hardware and the kernel runner emit events through a recorder as
``recorder.emit(kind, time, pe, *fields)`` (or several of one cycle at once as
``recorder.emit_compound(code, time, pe, *fields)``, see ``COMPOUNDS``); the
fields of each kind are listed in ``FIELDS`` in order, each with a type tag:

- ``int``: a Python int (may be -1 for "none" where the field says so);
- ``bool``: a Python bool;
- ``str``: a short string (op names, dtypes, categories); writers intern them;
- ``loc``: a :class:`SourceLoc` (or ``None``); writers intern them;
- ``shape``: a tuple of ints.

This module imports nothing from the rest of the project so that both sides
(the emulator and ``kbdebug.replay``) can import it.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class SourceLoc(NamedTuple):
    """Where a tl call was made: a project-relative file, a line and a function name.

    ``caller`` is set when the call was made inside a helper function (anything the
    kernel function called, directly or not): it is the kernel function's own line
    that called into the helper (its ``caller`` is None). Two call sites of one
    helper line are two locs. ``str()`` is ``file:line`` of the call itself.
    """

    file: str
    line: int
    function: str
    caller: SourceLoc | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class Kind(IntEnum):
    """Small integer code of each event kind (stable across format versions)."""

    KERNEL_START = 1
    KERNEL_END = 2
    KERNEL_ERROR = 3
    ISSUE = 4
    CHAN_REQUEST = 5
    CHAN_GRANT = 6
    CHAN_RELEASE = 7
    COMPLETE = 8
    WAIT_BEGIN = 9
    WAIT_END = 10
    OP_LOG = 11
    SCRATCH_ALLOC = 12
    SCRATCH_FREE = 13
    IPCQ_SEND = 14
    IPCQ_RECV = 15
    DEADLOCK = 16
    HOST_READ = 17
    # 18..24 are compound record codes (COMPOUNDS), never event kinds.
    READS = 25
    HBM_SHARE = 26
    PROVENANCE = 27


# Fields after the common (kind, time, pe) prefix, in emission order.
FIELDS: dict[Kind, tuple[tuple[str, str], ...]] = {
    # loc: the kernel function's definition.
    Kind.KERNEL_START: (("name", "str"), ("loc", "loc")),
    Kind.KERNEL_END: (),
    # loc: innermost kernel frame of the exception (None if unknown).
    Kind.KERNEL_ERROR: (("message", "str"), ("loc", "loc")),
    # One per command a kernel (or a composite) issues. future is -1 for commands
    # that return nothing waitable; addr is -1 for commands without an HBM address;
    # shape/dtype describe the data moved or produced.
    Kind.ISSUE: (
        ("cmd", "int"),
        ("op", "str"),
        ("future", "int"),
        ("addr", "int"),
        ("nbytes", "int"),
        ("shape", "shape"),
        ("dtype", "str"),
        ("blocking", "bool"),
        ("loc", "loc"),
    ),
    # channel: index into the header's channel table (DMA channels, engines, IPCQ links).
    Kind.CHAN_REQUEST: (("channel", "int"), ("cmd", "int")),
    Kind.CHAN_GRANT: (("channel", "int"), ("cmd", "int")),
    Kind.CHAN_RELEASE: (("channel", "int"), ("cmd", "int")),
    # The command's result is available (data landed, compute done); future -1 if none.
    Kind.COMPLETE: (("cmd", "int"), ("future", "int")),
    Kind.WAIT_BEGIN: (("future", "int"), ("loc", "loc")),
    # stalled: cycles the kernel was blocked by this wait (0 on the fast path).
    Kind.WAIT_END: (("future", "int"), ("stalled", "int")),
    Kind.OP_LOG: (("category", "str"), ("op", "str")),
    # in_use: scratch bytes in use on this PE after the change.
    Kind.SCRATCH_ALLOC: (("buffer", "int"), ("nbytes", "int"), ("in_use", "int")),
    Kind.SCRATCH_FREE: (("buffer", "int"), ("nbytes", "int"), ("in_use", "int")),
    # Emitted by the sender when the message enters the link.
    Kind.IPCQ_SEND: (("cmd", "int"), ("dst_pe", "int"), ("nbytes", "int")),
    # Emitted on the receiver when a message is matched to a RecvFuture.
    Kind.IPCQ_RECV: (("cmd", "int"), ("src_pe", "int"), ("future", "int")),
    # One per blocked PE when the run can make no more progress.
    Kind.DEADLOCK: (("future", "int"), ("loc", "loc")),
    # Kernel code read a tensor's values on the host (``.data``, ``np.asarray``), so what
    # it issues next may depend on them (a page table). future: the load or receive
    # whose buffer holds the tensor, -1 for a computed tensor (may depend on any data
    # waited so far). At most once per future; for -1, at most once between commands.
    # Since format 1.1.
    Kind.HOST_READ: (("future", "int"),),
    # Command cmd, issued just before (a compute, a store or a send), consumes the data
    # of load or receive future: one of its operands is a tensor in that future's
    # scratch buffer, or a view of one (x[...], tl.trans(x)). Not through computed
    # tensors (a READS names only direct operands); host reads are HOST_READ. Written
    # right after cmd's ISSUE (or the compound record holding it), on its PE at its
    # cycle, once per (cmd, future): a command reads at most a few. Since format 1.3.
    Kind.READS: (("cmd", "int"), ("future", "int")),
    # A DMA transfer, granted its channel, got its slot of the bandwidth of the HBM stack
    # its PE shares with others (only when the hardware shares one: hbm_stack_pes > 0;
    # the header's hbm_stacks lists each stack's PEs). Written right after cmd's
    # CHAN_GRANT, on its PE at its cycle. stack: index into hbm_stacks; stalled: cycles
    # from the grant to the slot's start (waiting for other PEs' transfers); held: the
    # slot's length (nbytes over the stack's rate). The channel is released at the later
    # of the grant plus the transfer's own time and the slot's end. Since format 1.4.
    Kind.HBM_SHARE: (("cmd", "int"), ("stack", "int"), ("stalled", "int"), ("held", "int")),
    # Store or send cmd, issued just before, moves the result of command made_by: the
    # compute that made its tensor, or the load or receive whose wait gave it (a view of
    # either included); -1 for none (data the kernel made on the host: ready at issue).
    # So the analysis knows when the value was ready, not only what it reads. Written
    # right after cmd's ISSUE and READS, on its PE at its cycle, once per store and send
    # of a run whose header has "provenance". Since format 1.6.
    Kind.PROVENANCE: (("cmd", "int"), ("made_by", "int")),
}

# The format version that added each event kind a file of an older version must not
# hold (its code is unknown there, as any other). HOST_READ (1.1) predates this check:
# a reader still takes it in a 1.0 file.
KIND_SINCE: dict[Kind, tuple[int, int]] = {
    Kind.READS: (1, 3),
    Kind.HBM_SHARE: (1, 4),
    Kind.PROVENANCE: (1, 6),
}
# The format version that added compound records.
COMPOUNDS_SINCE = (1, 2)

# Compound records (format 1.2): one record standing for a run of events that happen on
# one PE in one cycle, one right after the other, in the order listed. Its fields are
# those of its components concatenated, in order: [code, dt, pe, *fields(first),
# *fields(second), ...]. A reader expands it into exactly those events, so a compound
# record loses nothing and changes no event's place; it only saves the writer calls and
# bytes of repeating (kind, dt, pe). Codes are fixed forever once released.
COMPOUNDS: dict[int, tuple[Kind, ...]] = {
    # A command issued and its op logged (a store, a send, a receive).
    18: (Kind.ISSUE, Kind.OP_LOG),
    # A compute command issued to a free engine: logged, requested, granted at once.
    19: (Kind.ISSUE, Kind.OP_LOG, Kind.CHAN_REQUEST, Kind.CHAN_GRANT),
    # A compute command issued to a busy engine: logged, requested, queued.
    20: (Kind.ISSUE, Kind.OP_LOG, Kind.CHAN_REQUEST),
    # A load issued: logged, its scratch buffer allocated.
    21: (Kind.ISSUE, Kind.OP_LOG, Kind.SCRATCH_ALLOC),
    # A command's release of its channel that is also its completion (no latency).
    22: (Kind.CHAN_RELEASE, Kind.COMPLETE),
    # A command's release of its channel and the grant of that channel to the next one.
    23: (Kind.CHAN_RELEASE, Kind.CHAN_GRANT),
    # A wait on a future already done: it began and ended in one cycle (stalled 0).
    24: (Kind.WAIT_BEGIN, Kind.WAIT_END),
}


def event_codes(version: tuple[int, int]) -> frozenset[int]:
    """The record codes that stand for events (event kinds and compound records) in a
    file of format ``version``: those this module defines and that version had."""
    codes = {int(kind) for kind in FIELDS if KIND_SINCE.get(kind, (1, 0)) <= version}
    if version >= COMPOUNDS_SINCE:
        codes.update(COMPOUNDS)
    return frozenset(codes)


def expand(code: int, time: int, pe: int, fields: tuple | list) -> list[tuple]:
    """The events ``(kind, time, pe, *fields)`` compound record ``code`` stands for.

    The reference decoding every reader must agree with (fields as written: ids, not
    interned values). Raises ValueError for a wrong field count.
    """
    kinds = COMPOUNDS[code]
    out: list[tuple] = []
    at = 0
    for kind in kinds:
        width = len(FIELDS[kind])
        out.append((kind, time, pe, *fields[at : at + width]))
        at += width
    if at != len(fields):
        raise ValueError(f"compound record {code} has {len(fields)} fields, expected {at}")
    return out


# Channel kinds named in the header's channel table.
CHANNEL_KINDS = ("dma_read", "dma_write", "gemm", "math", "ipcq")

# Run outcomes written in a trace footer ("interrupted": stopped by SIGINT/SIGTERM, since 1.1).
STATUSES = ("ok", "error", "deadlock", "interrupted")


def field_index(kind: Kind, name: str) -> int:
    """Position of field ``name`` of ``kind`` within the fields after (kind, time, pe)."""
    for i, (field, _) in enumerate(FIELDS[kind]):
        if field == name:
            return i
    raise KeyError(f"{kind.name} has no field {name!r}")
