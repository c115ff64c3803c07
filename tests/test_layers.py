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
        # Sweeps run in worker processes and on Ray nodes: no terminal UI there, and the
        # launch they share with `run` is the library's, not a command's.
        ("kbdebug.sweep", ("textual", "rich", "kbdebug.ui", "kbdebug.commands")),
        # Launching lies below every command that launches (run, sweep, a sweep's worker).
        (
            "kbdebug.launch",
            ("textual", "rich", "kbdebug.ui", "kbdebug.commands", "kbdebug.sweep"),
        ),
    ],
)
def test_layer_does_not_import_what_lies_above_it(package, forbidden):
    assert offenders(package, forbidden) == []


COMMANDS = "kbdebug.commands"


def private_uses(path: Path) -> list[str]:
    """The ``_private`` names the command module ``path`` takes from another command:
    imported by name, or read as an attribute of another command module it imported."""
    own = f"{COMMANDS}.{path.stem}"
    found = []
    modules = set()  # local names bound to another command module
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                source = f"{node.module}.{alias.name}"
                if node.module == COMMANDS and source != own:
                    modules.add(alias.asname or alias.name)
                elif node.module.startswith(COMMANDS + ".") and node.module != own:
                    if alias.name.startswith("_"):
                        found.append(f"{alias.name} from {node.module}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(COMMANDS + ".") and alias.name != own and alias.asname:
                    modules.add(alias.asname)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
        ):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_no_command_uses_another_commands_privates():
    offending = {
        str(path.relative_to(ROOT)): uses
        for path in sorted((ROOT / "kbdebug" / "commands").glob("*.py"))
        if (uses := private_uses(path))
    }
    assert offending == {}


def test_the_private_use_check_sees_both_spellings(tmp_path):
    commands = tmp_path / "commands"
    commands.mkdir()
    (commands / "sweep.py").write_text(
        "from kbdebug.commands.run import _builder, add_parser\n"
        "from kbdebug.commands import run as r\n"
        "from kbdebug.commands.sweep import _own\n"
        "r._typed(1)\n"
        "r.add_parser\n"
    )
    assert private_uses(commands / "sweep.py") == ["_builder from kbdebug.commands.run", "r._typed"]
