"""The layers of the design only look down: checked on every module's imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imports_of(package: str) -> dict[str, set[str]]:
    """Every module under ``package`` with the top-level names it imports."""
    found = {}
    for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
        found[str(path.relative_to(ROOT))] = names
    return found


def offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{module} imports {name}"
        for module, names in imports_of(package).items()
        for name in sorted(names)
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


@pytest.mark.parametrize(
    "package, forbidden",
    [
        (
            "emulator.hardware",
            (
                "greenlet",
                "msgpack",
                "emulator.trace.writer",
                "emulator.trace.reader",
                "emulator.kernel",
                "kbdebug",
            ),
        ),
        ("emulator.kernel", ("kbdebug", "textual")),
        ("emulator.trace", ("emulator.kernel", "emulator.hardware", "kbdebug", "textual")),
        (
            "kbdebug.replay",
            (
                "textual",
                "rich",
                "kbdebug.ui",
                "emulator.kernel",
                "emulator.hardware",
                "greenlet",
                "simpy",
                "kbdebug.analysis",
                "kbdebug.commands",
                "kbdebug.export",
            ),
        ),
        (
            "kbdebug.analysis",
            (
                "textual",
                "rich",
                "kbdebug.ui",
                "kbdebug.commands",
                "kbdebug.export",
                "emulator.kernel",
                "emulator.hardware",
                "greenlet",
                "simpy",
            ),
        ),
        (
            "kbdebug.ui",
            (
                "emulator.kernel",
                "emulator.hardware",
                "emulator.trace.writer",
                "kbdebug.export",
                "kbdebug.commands",
            ),
        ),
        ("kbdebug.export", ("textual", "kbdebug.ui")),
        # Sweeps run in worker processes and on Ray nodes: no terminal UI there.
        ("kbdebug.sweep", ("textual", "rich", "kbdebug.ui")),
    ],
)
def test_layer_does_not_import_what_lies_above_it(package, forbidden):
    assert offenders(package, forbidden) == []
