"""Loading the corpus: its modules, their expectations and marked lines, recorded traces.

Shared by tests/test_corpus.py and benchmarks/diagnosis_quality.py. A corpus
module exports either ``PAIR`` (``rule``, ``params``, ``pes``) with
``launch_bug`` / ``launch_fixed``, or ``CLEAN`` (``params``) with ``launch``.
The bug kernel marks the line its finding must name with ``# expect: RULE``
and, when that line is inside a helper, the kernel line calling the helper
with ``# expect-call``.

``PAIR`` and ``CLEAN`` may also give ``sizes``: a list of parameter sets, a
small one (2 to 8 tiles) first and a large one (32 to 64 tiles) second;
``params`` stays the default (the large one). ``entries()`` gives one
``Entry`` per size, labelled ``small`` and ``large`` (a third and later size
``size2``, ...); a module without ``sizes`` has one size, its ``params``,
labelled ``default``. Every size of a pair must show its bug, with the same
marked line and affected PEs.
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


#: Labels of a module's sizes, in the order ``sizes`` lists them.
SIZE_LABELS = ("small", "large")
#: Label of the one size of a module that gives no ``sizes``.
DEFAULT_SIZE = "default"


@dataclass
class Entry:
    """One corpus module at one of its sizes."""

    name: str
    path: Path
    module: ModuleType
    rule: str | None = None  # None for a clean kernel
    params: dict = field(default_factory=dict)
    pes: list[int] = field(default_factory=list)
    line: int | None = None
    call_line: int | None = None
    #: Which of the module's sizes ``params`` is: "small", "large" or "default".
    size: str = DEFAULT_SIZE

    @property
    def is_pair(self) -> bool:
        return self.rule is not None

    @property
    def id(self) -> str:
        """The module's name, with its size when the module gives several."""
        return self.name if self.size == DEFAULT_SIZE else f"{self.name}-{self.size}"


def size_label(i: int) -> str:
    return SIZE_LABELS[i] if i < len(SIZE_LABELS) else f"size{i}"


def sizes(spec: dict) -> list[tuple[str, dict]]:
    """(label, params) of every size a ``PAIR`` or ``CLEAN`` dict gives."""
    listed = spec.get("sizes")
    if not listed:
        return [(DEFAULT_SIZE, dict(spec.get("params", {})))]
    return [(size_label(i), dict(p)) for i, p in enumerate(listed)]


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
            for label, params in sizes(pair):
                out.append(
                    Entry(
                        path.stem,
                        path,
                        module,
                        rule=pair["rule"],
                        params=params,
                        pes=list(pair["pes"]),
                        line=expects[0][0],
                        call_line=calls[0] if calls else None,
                        size=label,
                    )
                )
        elif hasattr(module, "CLEAN"):
            for label, params in sizes(module.CLEAN):
                out.append(Entry(path.stem, path, module, params=params, size=label))
    return out


def record(entry: Entry, variant: str, directory: Path):
    """Run ``launch_<variant>`` (or ``launch`` for a clean kernel) into a trace; check its output.

    Returns (trace path, RunResult).
    """
    launch = getattr(entry.module, "launch" if variant == "clean" else f"launch_{variant}")
    scenario = launch(**entry.params)
    trace = directory / f"{entry.id}.{variant}.kbt"
    result = scenario.run(trace=trace)
    if scenario.check is not None:
        scenario.check(scenario.memory)
    return trace, result


def same_place(loc, path: Path, line: int | None) -> bool:
    """Whether a SourceLoc names ``line`` of the corpus file ``path``."""
    if loc is None or line is None:
        return False
    return Path(loc.file).name == path.name and loc.line == line
