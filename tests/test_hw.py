"""`kbdebug hw`: each hardware field with default, unit and meaning; a file's values; TOML out."""

from __future__ import annotations

import dataclasses
import tomllib

from emulator.config import HardwareConfig
from kbdebug.cli import main


def test_every_field_is_listed_with_its_default_unit_and_meaning(capsys):
    assert main(["hw"]) == 0
    lines = capsys.readouterr().out.splitlines()
    by_name = {line.split()[0]: line for line in lines if line.strip()}
    for field in dataclasses.fields(HardwareConfig):
        line = by_name[field.name]
        default = field.default
        shown = ("true" if default else "false") if isinstance(default, bool) else repr(default)
        assert line.split()[1] == shown
        assert field.metadata["unit"] and field.metadata["unit"] in line
        assert field.metadata["meaning"] and line.rstrip().endswith(field.metadata["meaning"])
    assert by_name["hbm_latency"].split()[1:3] == ["500", "cycles"]


def test_a_config_file_s_values_show_beside_the_defaults(tmp_path, capsys):
    path = tmp_path / "hw.toml"
    path.write_text("[hardware]\nhbm_latency = 800\n")
    assert main(["hw", "--config", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert str(path) in lines[0] and "file" in lines[1].split()
    latency = next(line for line in lines if line.startswith("hbm_latency "))
    assert latency.split()[1:4] == ["500", "800", "cycles"]
    rows = next(line for line in lines if line.startswith("mesh_rows "))
    assert rows.split()[1:3] == ["1", "PEs"]  # unchanged: no value column entry


def test_toml_output_loads_back_as_the_config_it_shows(tmp_path, capsys):
    path = tmp_path / "hw.toml"
    path.write_text("dma_read_channels = 2\nmesh_wrap = false\n")
    assert main(["hw", "--config", str(path), "--toml"]) == 0
    text = capsys.readouterr().out
    loaded = HardwareConfig.from_dict(tomllib.loads(text)["hardware"])
    assert loaded == HardwareConfig(dma_read_channels=2, mesh_wrap=False)


def test_a_bad_config_file_is_one_line_naming_the_field(tmp_path, capsys):
    path = tmp_path / "hw.toml"
    path.write_text('hbm_latency = "slow"\n')
    assert main(["hw", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hbm_latency" in err[0] and str(path) in err[0]


def test_every_number_field_shows_its_range_and_the_footer_the_limits(capsys):
    assert main(["hw"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["field", "default", "unit", "range", "meaning"]
    by_name = {line.split()[0]: line for line in lines if line.strip()}
    assert by_name["hbm_latency"].split()[1:4] == ["500", "cycles", "0..1_000_000_000"]
    assert by_name["dma_read_channels"].split()[1:4] == ["1", "channels", "1..64"]
    assert by_name["scratch_bytes"].split()[3] == "1..1_099_511_627_776"
    assert by_name["clock_mhz"].split()[3] == "1.0..1_000_000.0"
    assert "65,536 channels" in "\n".join(lines) and "2**53 cycles" in "\n".join(lines)


def test_toml_output_names_each_range_and_stays_valid(capsys):
    assert main(["hw", "--toml"]) == 0
    text = capsys.readouterr().out
    assert "(default 500, range 0..1_000_000_000)" in text
    assert HardwareConfig.from_dict(tomllib.loads(text)["hardware"]) == HardwareConfig()
