"""Wire constants of the .kbt format shared by its writer and reader (see traces/FORMAT.md)."""

from __future__ import annotations

# The header's "format" value: a file whose first object is not a map with it is not a trace.
FORMAT_NAME = "kbt"

# (major, minor) read by this reader, and the newest TraceWriter writes. A minor bump adds
# what older readers skip (1.2's compound records are skipped, and the footer's count then
# refuses the file; 1.3's READS events are skipped; 1.4's HBM_SHARE events and header
# hbm_stacks are skipped; 1.5's digest records and header tensors are skipped; 1.6's
# PROVENANCE events and header provenance are skipped: see traces/FORMAT.md, Versions).
FORMAT_VERSION = (1, 6)
# The version a trace that uses nothing a later one added is written as: the writer
# labels each trace with the oldest version that holds it (see written_version), so a
# run without shared HBM gives the bytes 1.3 gave, which every 1.3 reader takes.
BASE_WRITTEN_VERSION = (1, 3)
# Header keys a version added, with the event kinds that come with them: a header with
# one makes its trace that version at least.
HEADER_KEYS_SINCE = {"hbm_stacks": (1, 4), "tensors": (1, 5), "provenance": (1, 6)}

# Record codes outside the event kinds of emulator.trace.schema.Kind.
DEFINE_STRING = 0  # [0, text]: the next string id
DEFINE_LOC = 100  # [100, file, line, function]: the next loc id
EMBED_SOURCE = 101  # [101, file, text]: the source text of a kernel file
# [102, loc_id, caller_loc_id]: loc_id (a tl call inside a helper) was called from the
# kernel line caller_loc_id; follows loc_id's definition (since 1.1).
DEFINE_LOC_CALLER = 102
# [103, future, min, max, mean, nan, inf, crc32]: the digest of the tensor of a future
# (emulator.trace.digests); the file's header has "tensors" (since 1.5).
DEFINE_DIGEST = 103
# The version that added digest records and the header's tensors.
DIGESTS_SINCE = (1, 5)

# Codes of event records (event kinds 1..17 and 25..27, compound records 18..24, see
# schema.event_codes) and codes a newer minor version may add (28..99 for events,
# 104..127 for definitions). Event records of unknown kinds still start with
# [code, dt, pe] (the reader applies dt and skips them); definition records of
# unknown kinds are skipped whole.
EVENT_CODES = range(1, 100)
DEFINITION_CODES = range(100, 128)


def written_version(header: dict) -> tuple[int, int]:
    """The format version of a trace with ``header``: the oldest that has every header key
    it uses (the event kinds of a later version come only with such a key), never newer
    than FORMAT_VERSION."""
    needed = [since for key, since in HEADER_KEYS_SINCE.items() if key in header]
    return min(max([BASE_WRITTEN_VERSION, *needed]), FORMAT_VERSION)


# Header keys the writer owns; everything else comes from Recorder.begin().
OWN_HEADER_KEYS = ("format", "version", "producer")
# Header keys the emulator must pass to begin().
RUN_HEADER_KEYS = ("config", "mesh", "channels", "launch")
# Footer keys in the order they are written.
FOOTER_KEYS = ("status", "events", "end_time", "error", "error_loc")
# The footer's optional "check": the run's output check verdict, written after the other
# keys when the run checked its output (a reader that does not know the key drops it,
# as every 1.x reader drops footer keys it does not define: no version needed).
CHECK_KEYS = ("ok", "message", "block")
MAX_CHECK_MESSAGE_BYTES = 1024  # UTF-8 bytes of the check's message (writer truncates)
MAX_CHECK_BLOCK_BYTES = 256  # UTF-8 bytes of the first wrong block's slice text

# Limits the writer never exceeds and the reader enforces before allocating.
MAX_STRING_BYTES = 64 * 1024  # UTF-8 bytes of one interned string (writer truncates longer)
MAX_SOURCE_BYTES = 16 * 1024 * 1024  # UTF-8 bytes of one embedded source text
MAX_RECORD_BYTES = 32 * 1024 * 1024  # bytes of any one msgpack object: header, record, footer
MAX_ARRAY_LEN = 65536  # elements of any array (a record, a shape, the channel table)
MAX_MAP_LEN = 4096  # entries of any map (header, config, footer, a channel)
MAX_PES = 65536  # rows * cols of the mesh
# The smallest event record: a fixarray header, kind, dt and pe of one byte each. A
# file of n bytes holds at most n // MIN_EVENT_BYTES events, so command and future
# ids (one per command, each with an ISSUE event) are refused past that.
MIN_EVENT_BYTES = 4
# Any time or cycle count (an event's absolute time, a stall, the footer's end_time)
# beyond 2**53 cycles (104 days at 1 GHz) is refused as implausible: every cycle value
# then converts to a float64 exactly, and a sum of up to 1024 of them fits in an int64.
MAX_CYCLES = 2**53
