"""HardwareConfig: every parameter of the modelled processing elements, loadable from TOML."""

from __future__ import annotations

import dataclasses
import math
import reprlib
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from emulator.errors import ConfigError
from emulator.input_files import InputFileError, read_input_file
from emulator.trace import wire

#: Bytes of a --config file read at most (a hardware file is a few hundred bytes).
MAX_CONFIG_BYTES = 1 << 20

# The ranges of the fields: generous for real hardware, and within what a trace holds
# and its reader accepts (every value fits an int64; the whole mesh's channels fit the
# header's channel table, MAX_TRACE_CHANNELS). A run's end cannot be bounded by the
# configuration alone (a kernel may issue any number of commands, a dot any size), but
# at these bounds a transfer is at most a scratch-sized one at 1 byte a cycle (about
# 2**40 cycles) plus 10**9 of latency: it takes millions of the slowest commands to
# reach wire.MAX_CYCLES (2**53), and a run that does stops with the trace writer's
# error instead of writing a trace no reader takes.
MAX_LATENCY = 10**9  # cycles: one second at 1 GHz
MAX_ISSUE_CYCLES = 10**6
MAX_RATE = 10**9  # bytes, MACs or elements per cycle
MAX_CHANNELS = 64  # DMA read or write channels of one PE
MAX_SCRATCH_BYTES = 1 << 40
MAX_MESH_SIDE = wire.MAX_PES  # rows or columns; the bound on channels is the tighter
MAX_COMPOSITE_DEPTH = 1024
MAX_PERTURB_SEED = 2**32 - 1
MAX_GRANT_WINDOW = 1024  # waiting commands a perturbed grant picks among
MAX_PERTURB_SPREAD = 9.0  # a perturbed latency is at most 10 times its nominal
CLOCK_RANGE_MHZ = (1.0, 1e6)  # the clocks an export converts with (kbdebug.export.chrome)
#: Channels of a whole mesh at most (wire.MAX_ARRAY_LEN: the header's channel table).
MAX_TRACE_CHANNELS = wire.MAX_ARRAY_LEN


def _field(default: Any, unit: str, meaning: str, low: float, high: float) -> Any:
    """A field with its unit, meaning and range (both ends allowed) in its metadata
    (``kbdebug hw`` lists them)."""
    return dataclasses.field(
        default=default, metadata={"unit": unit, "meaning": meaning, "range": (low, high)}
    )


@dataclass(frozen=True)
class HardwareConfig:
    """Parameters of the PE mesh; times in cycles, sizes in bytes.

    The defaults make GQA decode attention (8 query heads per KV head, 64x128
    f16 tiles) KV-load-bound: a K tile's transfer (342 cycles) takes about as
    long as its Q.K^T (256 cycles), and a tile's K+V transfer exceeds its
    compute.
    """

    mesh_rows: int = _field(1, "PEs", "rows of the PE mesh; PE ids run row-major", 1, MAX_MESH_SIDE)
    mesh_cols: int = _field(1, "PEs", "columns of the PE mesh", 1, MAX_MESH_SIDE)
    mesh_wrap: bool = _field(
        True, "true/false", "IPCQ links wrap around the mesh edges (a ring / torus)", 0, 1
    )
    clock_mhz: float = _field(
        1000.0, "MHz", "clock that converts cycles to wall time in exports", *CLOCK_RANGE_MHZ
    )
    hbm_bytes_per_cycle: int = _field(
        48,
        "bytes/cycle",
        "bytes one DMA channel moves per cycle (occupancy = bytes / this)",
        1,
        MAX_RATE,
    )
    hbm_latency: int = _field(
        500,
        "cycles",
        "from a transfer leaving its channel to its data being usable",
        0,
        MAX_LATENCY,
    )
    dma_read_channels: int = _field(
        1, "channels", "independent DMA read channels per PE", 1, MAX_CHANNELS
    )
    dma_write_channels: int = _field(1, "channels", "DMA write channels per PE", 1, MAX_CHANNELS)
    hbm_stack_pes: int = _field(
        0,
        "PEs",
        "PEs sharing one HBM stack's bandwidth, by consecutive PE id (PE p on stack "
        "p // this); 0: nothing shared, each DMA channel has hbm_bytes_per_cycle of its own",
        0,
        wire.MAX_PES,
    )
    hbm_stack_bytes_per_cycle: int = _field(
        192,
        "bytes/cycle",
        "bytes one HBM stack moves per cycle, shared in grant order by its PEs' DMA reads "
        "and writes (with hbm_stack_pes > 0)",
        1,
        MAX_RATE,
    )
    issue_cycles: int = _field(
        4, "cycles", "the kernel's cost of pushing one command descriptor", 0, MAX_ISSUE_CYCLES
    )
    gemm_macs_per_cycle: int = _field(
        256, "MACs/cycle", "multiply-accumulates the GEMM engine does per cycle", 1, MAX_RATE
    )
    math_elems_per_cycle: int = _field(
        128, "elements/cycle", "elements the MATH (vector) engine processes per cycle", 1, MAX_RATE
    )
    ipcq_bytes_per_cycle: int = _field(
        32, "bytes/cycle", "bytes an IPCQ link moves per cycle", 1, MAX_RATE
    )
    ipcq_latency: int = _field(
        100, "cycles", "from a message leaving its link to its arrival", 0, MAX_LATENCY
    )
    scratch_bytes: int = _field(
        1 << 20, "bytes", "on-chip scratch capacity per PE", 1, MAX_SCRATCH_BYTES
    )
    composite_depth: int = _field(
        2, "tiles", "tiles a tl.composite keeps in flight ahead of its GEMM", 1, MAX_COMPOSITE_DEPTH
    )
    perturb_seed: int = _field(
        0,
        "seed",
        "perturbs DMA and IPCQ timing, the same seed the same run (kbdebug run --perturb, "
        "kbdebug explore); 0: off, the nominal timing",
        0,
        MAX_PERTURB_SEED,
    )
    perturb_latency: float = _field(
        1.0,
        "fraction",
        "with perturb_seed: each DMA transfer's and IPCQ message's latency is drawn within "
        "+/- this fraction of its nominal, never below 0 (a link still delivers in order)",
        0.0,
        MAX_PERTURB_SPREAD,
    )
    perturb_grant_delay: float = _field(
        1.5,
        "fraction",
        "with perturb_seed: each DMA command waits, its channel idle, up to this fraction "
        "of hbm_latency (drawn at random) before it is granted: a load then reads HBM later",
        0.0,
        MAX_PERTURB_SPREAD,
    )
    perturb_grant_window: int = _field(
        2,
        "commands",
        "with perturb_seed: a DMA read channel grants one of this many oldest waiting "
        "commands, drawn at random when it grants (1: oldest first, as without "
        "perturbation; a write channel keeps its stores in order)",
        1,
        MAX_GRANT_WINDOW,
    )

    #: Fields that may be 0 (every other number must be at least 1).
    ZERO_ALLOWED: ClassVar[frozenset[str]] = frozenset(
        {
            "hbm_latency",
            "ipcq_latency",
            "issue_cycles",
            "hbm_stack_pes",
            "perturb_seed",
            "perturb_latency",
            "perturb_grant_delay",
        }
    )
    #: The fields of shared HBM bandwidth, left out of a trace's header while it is off
    #: (``hbm_stack_pes`` 0): such a run records the header it did before they existed.
    HBM_SHARING_FIELDS: ClassVar[tuple[str, ...]] = ("hbm_stack_pes", "hbm_stack_bytes_per_cycle")
    #: The fields of the timing perturbation, left out of a trace's header while it is off
    #: (``perturb_seed`` 0): a nominal run records the header it did before they existed.
    PERTURB_FIELDS: ClassVar[tuple[str, ...]] = (
        "perturb_seed",
        "perturb_latency",
        "perturb_grant_delay",
        "perturb_grant_window",
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool":
                if not isinstance(value, bool):
                    raise ConfigError(f'"{f.name}" must be true or false, got {_brief(value)}')
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f'"{f.name}" must be a number, got {_brief(value)}')
            if f.type == "int" and not isinstance(value, int):
                raise ConfigError(f'"{f.name}" must be an integer, got {_brief(value)}')
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f'"{f.name}" must be finite, got {value!r}')
            low, high = f.metadata["range"]
            if value < low:
                raise ConfigError(f'"{f.name}" must be >= {range_text(low)}, got {_brief(value)}')
            if value > high:
                raise ConfigError(
                    f'"{f.name}" must be <= {range_text(high)} {f.metadata["unit"]}, '
                    f"got {_brief(value)}"
                )
        channels = self.num_channels
        if channels > MAX_TRACE_CHANNELS:
            raise ConfigError(
                f"a {self.mesh_rows}x{self.mesh_cols} mesh with {self.dma_read_channels} read "
                f"and {self.dma_write_channels} write DMA channels per PE has {channels:,} "
                f"channels, more than the {MAX_TRACE_CHANNELS:,} a trace holds: fewer PEs "
                "or channels"
            )

    @property
    def num_channels(self) -> int:
        """Channels of the whole mesh, as emulator.hardware.mesh builds them: per PE its DMA
        read and write channels, GEMM and MATH, and an IPCQ link to each neighbour."""
        rows, cols = self.mesh_rows, self.mesh_cols
        per_pe = self.dma_read_channels + self.dma_write_channels + 2
        across = 0 if cols == 1 else rows * 2 * (cols if self.mesh_wrap else cols - 1)
        down = 0 if rows == 1 else cols * 2 * (rows if self.mesh_wrap else rows - 1)
        return rows * cols * per_pe + across + down

    @classmethod
    def ranges(cls) -> dict[str, tuple[float, float]]:
        """(lowest, highest) value of every number field, both allowed, in declaration order."""
        return {f.name: f.metadata["range"] for f in fields(cls) if f.type != "bool"}

    @property
    def num_pes(self) -> int:
        return self.mesh_rows * self.mesh_cols

    def replace(self, **changes: Any) -> HardwareConfig:
        """A copy with some fields changed (unknown names rejected)."""
        known = {f.name for f in fields(self)}
        for name in changes:
            if name not in known:
                raise ConfigError(f'unknown hardware field "{name}"')
        return dataclasses.replace(self, **changes)

    @classmethod
    def describe(cls) -> list[tuple[str, str, Any, str, str]]:
        """(name, type, default, unit, meaning) of every field, in declaration order."""
        return [
            (f.name, f.type, f.default, f.metadata.get("unit", ""), f.metadata.get("meaning", ""))
            for f in fields(cls)
        ]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def hbm_stacks(self) -> list[list[int]]:
        """The PEs of each HBM stack whose bandwidth they share; [] when none is shared."""
        per_stack = self.hbm_stack_pes
        if not per_stack:
            return []
        pes = range(self.num_pes)
        return [list(pes[first : first + per_stack]) for first in range(0, len(pes), per_stack)]

    def header_dict(self) -> dict[str, Any]:
        """``to_dict`` as a trace header holds it: without the HBM sharing fields while it
        is off, nor the perturbation's while it is (a reader takes a missing field as its
        default)."""
        values = self.to_dict()
        if not self.hbm_stack_pes:
            for name in self.HBM_SHARING_FIELDS:
                del values[name]
        if not self.perturb_seed:
            for name in self.PERTURB_FIELDS:
                del values[name]
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any], *, source: str = "config") -> HardwareConfig:
        """Build from a mapping, naming the source and field of any bad value."""
        known = {f.name for f in fields(cls)}
        for name in values:
            if name not in known:
                raise ConfigError(f'{source}: unknown hardware field "{name}"')
        try:
            return cls(**values)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e.detail}") from None

    @classmethod
    def from_toml(cls, path: str | Path) -> HardwareConfig:
        """Load from a TOML file whose top level (or ``[hardware]`` table) holds the fields.

        The file must be a regular file of at most MAX_CONFIG_BYTES, in UTF-8; anything
        else (a FIFO, a device, bytes that are not UTF-8, arrays nested too deeply to
        read) is a ConfigError naming the file, and the line when it is known.
        """
        path = Path(path)
        try:
            raw = read_input_file(path, MAX_CONFIG_BYTES, "a hardware file")
        except InputFileError as e:
            raise ConfigError(f"{path}: {e}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            column = e.start - raw.rfind(b"\n", 0, e.start)
            raise ConfigError(
                f"{path}: line {line}: not UTF-8 (byte 0x{raw[e.start]:02x} at column "
                f"{column}); a TOML file is UTF-8"
            ) from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: not valid TOML: {e}") from None
        except RecursionError:
            raise ConfigError(
                f"{path}: not readable: arrays or inline tables nested too deeply "
                "(hardware fields are plain numbers)"
            ) from None
        except (ValueError, MemoryError) as e:  # an integer of thousands of digits, say
            reason = str(e).partition(";")[0][:120] or type(e).__name__
            raise ConfigError(f"{path}: not readable: {reason}") from None
        if "hardware" in data and isinstance(data["hardware"], dict):
            data = data["hardware"]
        return cls.from_dict(data, source=str(path))


def range_text(value: float) -> str:
    """A range's end as TOML and ``--set`` spell it: ``64``, ``1_000_000_000``, ``1.0``."""
    return f"{value:_}" if abs(value) >= 10_000 else repr(value)


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel = 3
_BRIEF.maxstring = 60
_BRIEF.maxother = 60
_BRIEF.maxlong = 60


def _brief(value: Any) -> str:
    """``repr(value)``, cut short (a value from a file may be huge or nested deep)."""
    return _BRIEF.repr(value)
