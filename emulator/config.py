"""HardwareConfig: every parameter of the modelled processing elements, loadable from TOML."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from emulator.errors import ConfigError


@dataclass(frozen=True)
class HardwareConfig:
    """Parameters of the PE mesh; times in cycles, sizes in bytes.

    The defaults make GQA decode attention (8 query heads per KV head, 64x128
    f16 tiles) KV-load-bound: a K tile's transfer (342 cycles) takes about as
    long as its Q.K^T (256 cycles), and a tile's K+V transfer exceeds its
    compute.
    """

    #: PE mesh rows and columns; PE ids run row-major.
    mesh_rows: int = 1
    mesh_cols: int = 1
    #: Whether IPCQ links wrap around the mesh edges (a ring / torus).
    mesh_wrap: bool = True
    #: Clock used to convert cycles to wall time in exports.
    clock_mhz: float = 1000.0
    #: Bytes one DMA channel moves per cycle (its occupancy is bytes / this).
    hbm_bytes_per_cycle: int = 48
    #: Cycles from a transfer leaving its channel to its data being usable.
    hbm_latency: int = 500
    #: Number of independent DMA read channels per PE.
    dma_read_channels: int = 1
    #: Number of DMA write channels per PE.
    dma_write_channels: int = 1
    #: Cycles the kernel spends pushing one command descriptor.
    issue_cycles: int = 4
    #: Multiply-accumulates the GEMM engine does per cycle.
    gemm_macs_per_cycle: int = 256
    #: Elements the MATH (vector) engine processes per cycle.
    math_elems_per_cycle: int = 128
    #: Bytes an IPCQ link moves per cycle.
    ipcq_bytes_per_cycle: int = 32
    #: Cycles from a message leaving its link to its arrival.
    ipcq_latency: int = 100
    #: On-chip scratch capacity per PE.
    scratch_bytes: int = 1 << 20
    #: Tiles a tl.composite keeps in flight ahead of its GEMM.
    composite_depth: int = 2

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool":
                if not isinstance(value, bool):
                    raise ConfigError(f'"{f.name}" must be true or false, got {value!r}')
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f'"{f.name}" must be a number, got {value!r}')
            if f.type == "int" and not isinstance(value, int):
                raise ConfigError(f'"{f.name}" must be an integer, got {value!r}')
            if not math.isfinite(value):
                raise ConfigError(f'"{f.name}" must be finite, got {value!r}')
            minimum = 0 if f.name in ("hbm_latency", "ipcq_latency", "issue_cycles") else 1
            if value < minimum:
                raise ConfigError(f'"{f.name}" must be >= {minimum}, got {value!r}')

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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

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
        """Load from a TOML file whose top level (or ``[hardware]`` table) holds the fields."""
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except OSError as e:
            raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: not valid TOML: {e}") from None
        if "hardware" in data and isinstance(data["hardware"], dict):
            data = data["hardware"]
        return cls.from_dict(data, source=str(path))
