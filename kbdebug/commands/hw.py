"""`kbdebug hw`: every hardware field with its default, unit and meaning, or a file's values."""

from __future__ import annotations

import argparse

from emulator.config import MAX_TRACE_CHANNELS, HardwareConfig, range_text
from emulator.errors import ConfigError
from emulator.trace.wire import MAX_CYCLES
from kbdebug.errors import UserError
from kbdebug.safe_text import escape

DESCRIPTION = """\
List the fields of the modelled hardware (emulator.config.HardwareConfig):
name, default, unit, range and meaning. Set one for a run with
`kbdebug run SCENARIO --set NAME=VALUE`, or put several in a TOML file (at
its top level or under [hardware]) and give it to `kbdebug run --config`.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "hw",
        help="list the hardware fields with their defaults, units and meaning",
        description=DESCRIPTION,
        epilog="examples:\n"
        "  kbdebug hw\n"
        "  kbdebug hw --config hw.toml        the file's values beside the defaults\n"
        "  kbdebug hw --toml > hw.toml        a file to edit for --config",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--config", metavar="HW.toml", help="also show this file's values (and check it)"
    )
    p.add_argument(
        "--toml", action="store_true", help="print the fields as a commented TOML file instead"
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = HardwareConfig.from_toml(args.config) if args.config else None
    except ConfigError as e:
        raise UserError(str(e)) from None
    fields = HardwareConfig.describe()
    if args.toml:
        print(_toml(fields, config or HardwareConfig()), end="")
        return 0
    ranges = HardwareConfig.ranges()
    header = ["field", "default", "unit", "range", "meaning"]
    rows = [
        [name, _literal(default), unit, _range(ranges.get(name)), meaning]
        for name, _, default, unit, meaning in fields
    ]
    if config is not None:
        print(f"file: {escape(args.config)} (its values in the file column; blank: the default)")
        header.insert(2, "file")
        for row, (name, _, default, _, _) in zip(rows, fields, strict=True):
            value = getattr(config, name)
            row.insert(2, _literal(value) if value != default else "")
    print(_table(header, rows), end="")
    print(
        f"\nRanges include both ends. At most {MAX_TRACE_CHANNELS:,} channels in all (each PE: "
        "DMA read + write, GEMM, MATH, IPCQ links).\n"
        f"A run whose clock would pass 2**53 cycles ({MAX_CYCLES:,}) stops with an error."
    )
    print("Set one for a run: kbdebug run SCENARIO --set hbm_latency=800")
    print(
        "\nShared HBM bandwidth (off while hbm_stack_pes is 0): PEs p with the same "
        "p // hbm_stack_pes share\none HBM stack of hbm_stack_bytes_per_cycle; a DMA transfer "
        "takes the stack's next free\nslot when its channel is granted and holds the channel "
        "until the later of its own time and\nthat slot's end (traces 1.4 record it as "
        "HBM_SHARE). All 64 PEs of a prefill on one stack:\n"
        "  kbdebug run prefill --set pes=64 --set hbm_stack_pes=64 "
        "--set hbm_stack_bytes_per_cycle=192"
    )
    print(
        "\nTiming perturbation (off while perturb_seed is 0): each DMA transfer's and IPCQ "
        "message's\nlatency is drawn within +/- perturb_latency of its own, each DMA command "
        "waits up to the\nHBM latency times perturb_grant_delay before its grant, and a DMA read "
        "channel grants one of\nits perturb_grant_window oldest waiting commands; the "
        "same seed gives the same trace byte for byte\n(its header records the fields). "
        "kbdebug explore runs many seeds:\n"
        "  kbdebug run flawed_prefetch --perturb 7 --perturb-latency 0.25"
    )
    return 0


def _range(bounds: tuple[float, float] | None) -> str:
    """``0..1_000_000_000`` (both ends allowed); '' for a field without one (a bool)."""
    return "" if bounds is None else f"{range_text(bounds[0])}..{range_text(bounds[1])}"


def _literal(value: object) -> str:
    """A value as TOML (and --set) spells it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines) + "\n"


def _toml(fields: list, config: HardwareConfig) -> str:
    lines = [
        "# kbdebug hardware configuration: kbdebug run SCENARIO --config THIS.toml",
        "[hardware]",
    ]
    ranges = HardwareConfig.ranges()
    for name, _, default, unit, meaning in fields:
        unit_note = f" [{unit}]" if unit else ""
        bounds = f", range {_range(ranges[name])}" if name in ranges else ""
        lines.append(f"# {meaning}{unit_note} (default {_literal(default)}{bounds})")
        lines.append(f"{name} = {_literal(getattr(config, name))}")
    return "\n".join(lines) + "\n"
