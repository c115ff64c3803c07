"""A scenario builder to launch: found by name or FILE.py:FUNCTION, its parameters typed, built."""

from __future__ import annotations

import difflib
import inspect
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from emulator.config import HardwareConfig
from emulator.errors import ConfigError
from emulator.scenarios import SCENARIOS, Scenario
from emulator.trace import wire
from kbdebug.errors import UserError
from kbdebug.launch import file as launch_file
from kbdebug.launch.errors import LaunchError, describe
from kbdebug.launch.settings import HARDWARE_FIELDS, brief, parse_setting, shown

#: What a value of a default's type is called in a message.
TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "text"}
#: The parameter a builder takes to receive the hardware (never set by --set).
CONFIG = "config"


def _by_set(key: str) -> str:
    return "--set"


@dataclass(frozen=True)
class Launcher:
    """A scenario builder, the name its traces take, and the parameters it accepts."""

    builder: Callable[..., Scenario]
    #: SCENARIO, or FILE.FUNCTION: two launchers of one file give two trace names.
    name: str
    #: The parameters --set and --grid may give, with their defaults
    #: (``inspect.Parameter.empty`` for none); never ``config``.
    defaults: dict[str, Any]
    #: Whether the builder takes ``config`` (the hardware) itself.
    takes_config: bool
    #: FILE.py (resolved) for a launch file's builder, None for a built-in scenario.
    launch_file: Path | None = None
    #: sys.path while a launch file's builder and kernels run (its directory first).
    search_path: tuple[str, ...] | None = field(default=None, repr=False)
    #: FILE.py:FUNCTION as the user gave it, for a launch file's builder.
    spec: str | None = None

    @property
    def given_name(self) -> str:
        """The launcher as messages name it: FILE.py:FUNCTION as the user gave it (never
        the trace name's FILE.FUNCTION), or the scenario's name."""
        return self.spec or self.name

    def parameters(self) -> list[str]:
        """The builder's parameter names, sorted."""
        return sorted(self.defaults)

    def is_parameter(self, option: str, key: str) -> bool:
        """Whether ``key`` is a parameter (True) or a hardware field (False); UserError if
        neither, listing both kinds and the nearest name."""
        if key in self.defaults:
            return True
        if key in HARDWARE_FIELDS:
            return False
        close = difflib.get_close_matches(key, [*self.defaults, *HARDWARE_FIELDS], n=1)
        guess = f"; did you mean {close[0]}?" if close else ""
        raise UserError(
            f"{option} {shown(key)}: not a parameter of {self.given_name} "
            f"({', '.join(self.parameters()) or 'none'}) nor a hardware field "
            f"({', '.join(HARDWARE_FIELDS)}){guess}"
        )

    def typed(self, option: str, key: str, value: Any) -> Any:
        """``value`` for parameter ``key``, checked against the type of its default.

        An int where a float is expected becomes a float; a parameter without a
        default (or one of another type) takes the value as it is.
        """
        default = self.defaults.get(key, inspect.Parameter.empty)
        kind = type(default)
        if kind not in TYPE_NAMES:
            return value  # no default, None, or a type we do not police: the builder decides
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if type(value) is kind:
            return value
        raise UserError(
            f"{option} {key}={shown(value)}: {self.given_name}'s {key} takes {TYPE_NAMES[kind]} "
            f"(default {default!r}), got {brief(value)}"
        )

    def settings(self, texts: list[str]) -> dict[str, Any]:
        """The --set ``KEY=VALUE`` texts as {key: value}, in order, parameters typed."""
        values = {}
        for text in texts:
            key, value = parse_setting(text)
            values[key] = (
                self.typed("--set", key, value) if self.is_parameter("--set", key) else value
            )
        return values

    def split(self, values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``values`` (checked keys) as (parameters, hardware fields)."""
        params = {k: v for k, v in values.items() if k in self.defaults}
        return params, {k: v for k, v in values.items() if k not in self.defaults}

    @contextmanager
    def importing(self) -> Iterator[None]:
        """The launch file's sys.path, for the time its builder or kernels run."""
        with (
            launch_file.search_path(self.search_path)
            if self.search_path is not None
            else nullcontext()
        ):
            yield

    def _not_a_scenario(self, returned: Any) -> str:
        """The one line for a builder that returned ``returned``, not a Scenario."""
        what = "None" if returned is None else type(returned).__name__
        line = f"{self.given_name} returned {what}, not an emulator.scenarios.Scenario"
        if self.launch_file is None or self.spec is None:
            return line
        shown, _, function = self.spec.rpartition(":")
        return (
            f"{line}: give the function that returns one, "
            f"{launch_file.builder_hint(self.launch_file, shown, function)}"
        )

    def build(
        self,
        params: Mapping[str, Any],
        hw: Mapping[str, Any],
        config: HardwareConfig,
        *,
        config_given: bool,
        option_of: Callable[[str], str] = _by_set,
    ) -> Scenario:
        """The scenario of ``params`` on the hardware ``config`` (with ``hw`` applied).

        A builder that takes ``config`` gets it; otherwise a --config file
        (``config_given``) or a hardware field replaces the scenario's own
        hardware, keeping its mesh unless ``hw`` names it. UserError when the
        builder refuses the values, or sets a field of ``hw`` otherwise itself
        (``option_of`` says which option gave it). The ``perturb_*`` fields of ``hw``
        are set on the hardware the scenario built, whatever it is.
        """
        # The timing perturbation goes on the hardware the scenario chose, never in place
        # of it: a seeded run must be the nominal run with its timing moved, nothing else.
        perturbation = {k: v for k, v in hw.items() if k in HardwareConfig.PERTURB_FIELDS}
        hw = {k: v for k, v in hw.items() if k not in perturbation}
        arguments = dict(params)
        if self.takes_config:
            arguments[CONFIG] = config
        try:
            with self.importing():
                scenario = self.builder(**arguments)
        except Exception as e:  # noqa: BLE001 - the user's code: one line, where and why
            details = "".join(traceback.format_exception(e))
            message = f"{self.given_name}: {describe(e, self.launch_file)}"
            raise LaunchError(message, details) from None
        if not isinstance(scenario, Scenario):
            raise UserError(self._not_a_scenario(scenario))
        if self.launch_file is not None and scenario.launch_file is None:
            # Its trace's source paths are relative to FILE.py's root, whatever the working
            # directory (see Scenario.launch_file).
            scenario.launch_file = str(self.launch_file)
        if not self.takes_config and (hw or config_given):
            # A --config file stands for the hardware, not the launch: the scenario keeps its
            # mesh unless --set names it.
            mesh = {"mesh_rows": scenario.config.mesh_rows, "mesh_cols": scenario.config.mesh_cols}
            try:
                scenario.config = config.replace(**{**mesh, **hw})
            except ConfigError as e:
                raise UserError(f"{self.given_name}: {e}") from None
        for key, value in hw.items():
            own = getattr(scenario.config, key)
            if own != value:
                raise UserError(
                    f"{option_of(key)} {key}={shown(value)}: {self.given_name} sets {key} to "
                    f"{shown(own)} itself; use its own parameters "
                    f"({', '.join(self.parameters()) or 'none'})"
                )
        if perturbation:
            scenario.config = scenario.config.replace(**perturbation)
        return scenario


def load(spec: str) -> Launcher:
    """The launcher ``spec`` names: a built-in scenario or FILE.py:FUNCTION (whose file
    is run, sys.path left as it was); UserError if there is none."""
    if spec in SCENARIOS:
        return _launcher(SCENARIOS[spec], spec)
    if ":" not in spec:
        raise UserError(_unknown_scenario(spec))
    path_text, _, function = spec.rpartition(":")
    path = Path(path_text)
    # Read bounded, compiled before it runs: a file that is not one, or that Python
    # cannot compile, is one line with its line number.
    module, search_path = launch_file.load(path, f"kbdebug_user_{path.stem}")
    builder = getattr(module, function, None)
    if not callable(builder):
        functions = launch_file.scenario_functions(path)
        there = f" (functions there: {launch_file.listed(functions)})" if functions else ""
        raise UserError(f"{path} has no function {function!r}{there}")
    if _first_parameter(builder) == "tl":
        raise UserError(
            f"{spec} looks like a kernel (its first parameter is tl): give the function that "
            f"returns an emulator.scenarios.Scenario, {launch_file.builder_hint(path, path_text)}"
        )
    return _launcher(builder, f"{path.stem}.{function}", path.resolve(), tuple(search_path), spec)


def is_trace(path: Path) -> bool:
    """Whether ``path`` starts with a kbt header: a trace kbdebug wrote, whole or cut short."""
    try:
        with open(path, "rb") as f:
            # The header is the first object; a bounded buffer keeps a big non-trace cheap.
            header = next(msgpack.Unpacker(f, max_buffer_size=1 << 20))
    except (OSError, ValueError, StopIteration, msgpack.UnpackException):
        return False
    return isinstance(header, dict) and header.get("format") == wire.FORMAT_NAME


def _launcher(
    builder: Callable[..., Scenario],
    name: str,
    path: Path | None = None,
    search_path: tuple[str, ...] | None = None,
    spec: str | None = None,
) -> Launcher:
    try:
        signature = inspect.signature(builder)
    except (TypeError, ValueError):
        signature = None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = [] if signature is None else list(signature.parameters.values())
    defaults = {p.name: p.default for p in parameters if p.kind in named and p.name != CONFIG}
    takes_config = any(p.name == CONFIG and p.kind in named for p in parameters)
    return Launcher(builder, name, defaults, takes_config, path, search_path, spec)


def _first_parameter(function: Callable[..., Any]) -> str | None:
    """The name of ``function``'s first positional parameter, None if it has none."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return parameters[0].name if parameters and parameters[0].kind in positional else None


def _unknown_scenario(spec: str) -> str:
    """The one line for a SCENARIO that is neither built in nor FILE.py:FUNCTION."""
    path = Path(spec)
    if spec.endswith(".py") or path.is_file():
        if not path.is_file():
            return str(launch_file.problem(path) or f"{path}: no such file")
        if is_trace(path):
            return f"{path} is a trace already: open it with kbdebug {path}"
        broken = launch_file.syntax_error(path)
        if broken is not None:
            return f"{path}: does not parse ({broken}); fix it, then: kbdebug run {path}:FUNCTION"
        return f"{path}: which function builds the Scenario? {launch_file.run_hint(path)}"
    close = difflib.get_close_matches(spec, SCENARIOS, n=1)
    guess = f"did you mean {close[0]}? " if close else ""
    return (
        f"unknown scenario {spec!r}: {guess}use one of {', '.join(SCENARIOS)} or FILE.py:FUNCTION"
    )
