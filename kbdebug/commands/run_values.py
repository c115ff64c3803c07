"""`kbdebug run --values`: keep the tensors themselves beside the trace, within a size limit."""

from __future__ import annotations

import argparse
from pathlib import Path

from kbdebug.errors import UserError
from kbdebug.outputs import Output
from kbdebug.replay.values_file import (
    TENSOR_LIMIT,
    TOTAL_LIMIT,
    ValueKeeper,
    is_values_file,
    values_path,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--values and --values-limit."""
    parser.add_argument(
        "--values",
        action="store_true",
        help="also keep the tensors waited, stored and sent (up to --values-limit) in "
        "OUT.values.npz beside the trace: p in the app prints their first rows",
    )
    parser.add_argument(
        "--values-limit",
        type=_mib,
        default=TOTAL_LIMIT >> 20,
        metavar="MiB",
        help=f"the most --values keeps, in MiB (default {TOTAL_LIMIT >> 20}; a tensor over "
        f"{TENSOR_LIMIT >> 20} MiB is never kept)",
    )


def _mib(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of MiB: {text!r:.40}") from None
    if not 1 <= value <= 1 << 20:
        raise argparse.ArgumentTypeError(f"must be 1 to {1 << 20} MiB, got {value}")
    return value


def argv(args: argparse.Namespace) -> list[str]:
    """The flags that ask for this again (for the app's re-run)."""
    if not getattr(args, "values", False):
        return []
    flags = ["--values"]
    if args.values_limit != TOTAL_LIMIT >> 20:
        flags += ["--values-limit", str(args.values_limit)]
    return flags


class ValuesOutput:
    """Where --values writes, checked before the run, and the keeper the run fills."""

    def __init__(self, args: argparse.Namespace, out: Output) -> None:
        self.keeper: ValueKeeper | None = None
        self.path: Path | None = None
        if not getattr(args, "values", False):
            return
        if out.stream:
            raise UserError(f"--values needs a trace file; {out.name} is a device or a pipe")
        self.path = values_path(out.target)
        if (
            (self.path.exists() or self.path.is_symlink())
            and not args.force
            and not is_values_file(self.path)
        ):
            raise UserError(
                f"{self.path} exists and is not a kbdebug values file; --force replaces it"
            )
        limit = args.values_limit << 20
        self.keeper = ValueKeeper(tensor_limit=min(TENSOR_LIMIT, limit), total_limit=limit)

    def save(self, trace: Path) -> None:
        """Write the kept tensors beside ``trace`` and say so (with what the limit cut)."""
        if self.keeper is None or self.path is None:
            return
        try:
            self.keeper.save(self.path, trace)
        except OSError as e:
            raise UserError(f"cannot write {self.path}: {e.strerror or e}", status=1) from None
        kept = self.keeper
        print(f"values: {self.path} ({len(kept.arrays):,} tensors, {kept.total:,} bytes)")
        if kept.note():
            print(f"values: {kept.note()} (--values-limit keeps more)")
