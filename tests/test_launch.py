"""kbdebug.launch: one wording per mistake for run and sweep, the fields offered, sys.path kept."""

from __future__ import annotations

import dataclasses
import sys
import textwrap

import pytest

from emulator.config import HardwareConfig
from kbdebug.cli import main
from kbdebug.errors import UserError
from kbdebug.launch.launcher import load
from kbdebug.launch.settings import HARDWARE_FIELDS


def error_line(capsys, argv: list[str]) -> str:
    """The one line ``kbdebug ARGV`` prints on stderr, refusing it before anything runs."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert captured.out == ""
    return lines[0]


@pytest.mark.parametrize(
    "setting",
    ["depth=x", "depth=2.5", "dpeth=2", "hbm_latency=-5", "hbm_latency=abc", "mesh_cols=0"],
)
def test_set_and_grid_say_the_same_about_the_same_field(capsys, tmp_path, monkeypatch, setting):
    monkeypatch.chdir(tmp_path)
    run = error_line(capsys, ["run", "decode_prefetch", "--set", setting])
    grid = error_line(capsys, ["sweep", "decode_prefetch", "--grid", setting])
    fixed = error_line(capsys, ["sweep", "decode_prefetch", "--grid", "seed=1", "--set", setting])
    key = setting.split("=")[0]
    assert run.startswith(f"kbdebug run: --set {key}")
    assert grid.replace("kbdebug sweep: --grid ", "") == run.replace("kbdebug run: --set ", "")
    assert fixed.replace("kbdebug sweep: ", "") == run.replace("kbdebug run: ", "")
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_a_mistyped_parameter_says_its_type_default_and_value(capsys):
    line = error_line(capsys, ["sweep", "decode_prefetch", "--grid", "depth=1,x"])
    assert line == (
        "kbdebug sweep: --grid depth=x: decode_prefetch's depth takes an integer (default 2), "
        "got 'x'"
    )


def test_the_valid_fields_are_the_hardware_fields_and_no_constant(capsys):
    line = error_line(capsys, ["sweep", "decode_prefetch", "--grid", "dpeth=1..2"])
    assert "ZERO_ALLOWED" not in line and "ClassVar" not in line
    fields = [f.name for f in dataclasses.fields(HardwareConfig)]
    assert list(HARDWARE_FIELDS) == fields
    assert f"nor a hardware field ({', '.join(fields)})" in line
    assert "of decode_prefetch (depth, head_dim, heads, n_tiles, seed, tile) nor" in line
    assert line.endswith("did you mean depth?")
    with pytest.raises(UserError, match="not a parameter"):
        load("decode_prefetch").is_parameter("--set", "ZERO_ALLOWED")


LAUNCH = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    sys.path.append(str(Path(__file__).parent / "extra"))

    def launch(n_tiles=2):
        import beside  # imported only when the launch is built: from the launch file's folder
        return beside.build(n_tiles)
    """
)
BESIDE = textwrap.dedent(
    """
    from emulator.scenarios import SCENARIOS

    def build(n_tiles):
        import shifted  # and from the folder the file put on sys.path itself
        shifted.ran = True
        return SCENARIOS["decode_prefetch"](n_tiles=n_tiles)
    """
)


@pytest.fixture
def launch_dir(tmp_path, monkeypatch):
    folder = tmp_path / "launch_dir"
    (folder / "extra").mkdir(parents=True)
    (folder / "my_launch.py").write_text(LAUNCH)
    (folder / "beside.py").write_text(BESIDE)
    (folder / "extra" / "shifted.py").write_text("ran = False\n")
    for name in ("beside", "shifted"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.chdir(tmp_path)
    return folder


def test_loading_a_launch_file_leaves_sys_path_as_it_was(launch_dir):
    before = list(sys.path)
    launcher = load("launch_dir/my_launch.py:launch")
    assert sys.path == before
    # Its builder still imports beside it, and from what the file added to sys.path.
    scenario = launcher.build({"n_tiles": 2}, {}, HardwareConfig(), config_given=False)
    assert sys.path == before
    assert sys.modules["shifted"].ran
    assert scenario.launch_file == str(launch_dir / "my_launch.py")
    assert str(launch_dir) not in sys.path


def test_run_of_a_launch_file_leaves_sys_path_as_it_was(launch_dir, capsys):
    before = list(sys.path)
    assert main(["run", "launch_dir/my_launch.py:launch", "-q", "-o", "x.kbt"]) == 0
    assert sys.path == before
