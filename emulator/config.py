"""HardwareConfig: every parameter of the modelled processing elements, loadable from TOML."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from emulator.errors import ConfigError


def _field(default: Any, unit: str, meaning: str) -> Any:
    """A field with its unit and meaning in its metadata (``kbdebug hw`` lists them)."""
    return dataclasses.field(default=default, metadata={"unit": unit, "meaning": meaning})


@dataclass(frozen=True)
class HardwareConfig:
    """Parameters of the PE mesh; times in cycles, sizes in bytes.

    The defaults make GQA decode attention (8 query heads per KV head, 64x128
    f16 tiles) KV-load-bound: a K tile's transfer (342 cycles) takes about as
    long as its Q.K^T (256 cycles), and a tile's K+V transfer exceeds its
    compute.
    """

    mesh_rows: int = _field(1, "PEs", "rows of the PE mesh; PE ids run row-major")
    mesh_cols: int = _field(1, "PEs", "columns of the PE mesh")
    mesh_wrap: bool = _field(
        True, "true/false", "IPCQ links wrap around the mesh edges (a ring / torus)"
    )
    clock_mhz: float = _field(1000.0, "MHz", "clock that converts cycles to wall time in exports")
    hbm_bytes_per_cycle: int = _field(
        48, "bytes/cycle", "bytes one DMA channel moves per cycle (occupancy = bytes / this)"
    )
    hbm_latency: int = _field(
        500, "cycles", "from a transfer leaving its channel to its data being usable"
    )
    dma_read_channels: int = _field(1, "channels", "independent DMA read channels per PE")
    dma_write_channels: int = _field(1, "channels", "DMA write channels per PE")
    issue_cycles: int = _field(4, "cycles", "the kernel's cost of pushing one command descriptor")
    gemm_macs_per_cycle: int = _field(
        256, "MACs/cycle", "multiply-accumulates the GEMM engine does per cycle"
    )
    math_elems_per_cycle: int = _field(
        128, "elements/cycle", "elements the MATH (vector) engine processes per cycle"
    )
    ipcq_bytes_per_cycle: int = _field(32, "bytes/cycle", "bytes an IPCQ link moves per cycle")
    ipcq_latency: int = _field(100, "cycles", "from a message leaving its link to its arrival")
    scratch_bytes: int = _field(1 << 20, "bytes", "on-chip scratch capacity per PE")
    composite_depth: int = _field(
        2, "tiles", "tiles a tl.composite keeps in flight ahead of its GEMM"
    )

    #: Fields that may be 0 (every other number must be at least 1).
    ZERO_ALLOWED: ClassVar[frozenset[str]] = frozenset(
        {"hbm_latency", "ipcq_latency", "issue_cycles"}
    )

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
            minimum = 0 if f.name in self.ZERO_ALLOWED else 1
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

    @classmethod
    def describe(cls) -> list[tuple[str, str, Any, str, str]]:
        """(name, type, default, unit, meaning) of every field, in declaration order."""
        return [
            (f.name, f.type, f.default, f.metadata.get("unit", ""), f.metadata.get("meaning", ""))
            for f in fields(cls)
        ]

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
