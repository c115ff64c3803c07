"""Loading the corpus: its modules, their expectations and marked lines, recorded traces.

Shared by tests/test_corpus.py and benchmarks/diagnosis_quality.py. A corpus
module exports either ``PAIR`` (``rule``, ``params``, ``pes``) with
``launch_bug`` / ``launch_fixed``, or ``CLEAN`` (``params``) with ``launch``.
The bug kernel marks the line its finding must name with ``# expect: RULE``
and, when that line is inside a helper, the kernel line calling the helper
with ``# expect-call``.
"""

from __future__ import annotations

import importlib.util
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

CORPUS = Path(__file__).resolve().parent
_EXPECT = re.compile(r"#\s*expect:\s*(KB\d{3})\b")
_CALL = re.compile(r"#\s*expect-call\b")


@dataclass
class Entry:
    name: str
    path: Path
    module: ModuleType
    rule: str | None = None  # None for a clean kernel
    params: dict = field(default_factory=dict)
    pes: list[int] = field(default_factory=list)
    line: int | None = None
    call_line: int | None = None

    @property
    def is_pair(self) -> bool:
        return self.rule is not None


def markers(path: Path) -> tuple[list[tuple[int, str]], list[int]]:
    """(line, rule) of every ``# expect:`` comment and the lines of ``# expect-call``."""
    expects, calls = [], []
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        if m := _EXPECT.search(tok.string):
            expects.append((tok.start[0], m.group(1)))
        elif _CALL.search(tok.string):
            calls.append(tok.start[0])
    return expects, calls


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kb_corpus_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def entries() -> list[Entry]:
    out = []
    for path in sorted(CORPUS.glob("*.py")):
        if path.name.startswith("_") or path.name == "conftest.py":
            continue
        module = load_module(path)
        if hasattr(module, "PAIR"):
            pair = module.PAIR
            expects, calls = markers(path)
            if len(expects) != 1 or expects[0][1] != pair["rule"] or len(calls) > 1:
                raise ValueError(
                    f"{path.name}: needs exactly one '# expect: {pair['rule']}' marker "
                    f"and at most one '# expect-call', found {expects} and {calls}"
                )
            out.append(
                Entry(
                    path.stem,
                    path,
                    module,
                    rule=pair["rule"],
                    params=dict(pair.get("params", {})),
                    pes=list(pair["pes"]),
                    line=expects[0][0],
                    call_line=calls[0] if calls else None,
                )
            )
        elif hasattr(module, "CLEAN"):
            out.append(Entry(path.stem, path, module, params=dict(module.CLEAN.get("params", {}))))
    return out


def record(entry: Entry, variant: str, directory: Path):
    """Run ``launch_<variant>`` (or ``launch`` for a clean kernel) into a trace; check its output.

    Returns (trace path, RunResult).
    """
    launch = getattr(entry.module, "launch" if variant == "clean" else f"launch_{variant}")
    scenario = launch(**entry.params)
    trace = directory / f"{entry.name}.{variant}.kbt"
    result = scenario.run(trace=trace)
    if scenario.check is not None:
        scenario.check(scenario.memory)
    return trace, result


def same_place(loc, path: Path, line: int | None) -> bool:
    """Whether a SourceLoc names ``line`` of the corpus file ``path``."""
    if loc is None or line is None:
        return False
    return Path(loc.file).name == path.name and loc.line == line
