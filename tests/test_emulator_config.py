"""HardwareConfig: bad values rejected naming the field, TOML loading and its errors."""

from __future__ import annotations

import dataclasses
import math

import pytest

from emulator import ConfigError, EmulatorError, HardwareConfig

INT_FIELDS = [f.name for f in dataclasses.fields(HardwareConfig) if f.type == "int"]
ZERO_OK = {"hbm_latency", "ipcq_latency", "issue_cycles"}


def toml_text(values: dict) -> str:
    def literal(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        return repr(v)

    return "".join(f"{k} = {literal(v)}\n" for k, v in values.items())


def test_defaults_are_valid_and_round_trip_through_a_dict():
    config = HardwareConfig()
    assert HardwareConfig.from_dict(config.to_dict()) == config
    assert config.num_pes == 1


@pytest.mark.parametrize("name", INT_FIELDS)
def test_integer_below_its_minimum_is_rejected_naming_the_field(name):
    bad = -1 if name in ZERO_OK else 0
    with pytest.raises(ConfigError, match=f'"{name}" must be >= {bad + 1}, got {bad}'):
        HardwareConfig(**{name: bad})


@pytest.mark.parametrize("name", sorted(ZERO_OK))
def test_zero_latency_and_issue_cost_are_allowed(name):
    assert getattr(HardwareConfig(**{name: 0}), name) == 0


@pytest.mark.parametrize("name", INT_FIELDS)
def test_fraction_for_an_integer_field_is_rejected_naming_the_field(name):
    with pytest.raises(ConfigError, match=f'"{name}" must be an integer, got 2.5'):
        HardwareConfig(**{name: 2.5})


@pytest.mark.parametrize("value", ["64", None, [1], True])
def test_non_number_is_rejected_naming_the_field(value):
    with pytest.raises(ConfigError, match='"hbm_bytes_per_cycle" must be a number'):
        HardwareConfig(hbm_bytes_per_cycle=value)


def test_mesh_wrap_must_be_a_bool():
    with pytest.raises(ConfigError, match='"mesh_wrap" must be true or false, got 1'):
        HardwareConfig(mesh_wrap=1)


@pytest.mark.parametrize("value", [0, -5.0, math.inf, math.nan])
def test_clock_must_be_positive_and_finite(value):
    with pytest.raises(ConfigError, match='"clock_mhz"'):
        HardwareConfig(clock_mhz=value)


def test_clock_may_be_fractional():
    assert HardwareConfig(clock_mhz=1312.5).clock_mhz == 1312.5


def test_config_error_is_a_value_error_and_an_emulator_error():
    assert issubclass(ConfigError, ValueError)
    assert issubclass(ConfigError, EmulatorError)


def test_replace_changes_fields_and_rejects_unknown_ones():
    config = HardwareConfig().replace(mesh_rows=2, mesh_cols=3)
    assert (config.mesh_rows, config.mesh_cols, config.num_pes) == (2, 3, 6)
    with pytest.raises(ConfigError, match='unknown hardware field "hbm_speed"'):
        HardwareConfig().replace(hbm_speed=3)
    with pytest.raises(ConfigError, match='"mesh_cols" must be >= 1'):
        HardwareConfig().replace(mesh_cols=0)


def test_from_toml_round_trips_every_field(tmp_path):
    config = HardwareConfig(
        mesh_rows=2,
        mesh_cols=4,
        mesh_wrap=False,
        clock_mhz=1500.0,
        hbm_bytes_per_cycle=64,
        hbm_latency=100,
        dma_read_channels=2,
        issue_cycles=0,
        gemm_macs_per_cycle=1024,
        scratch_bytes=65536,
    )
    path = tmp_path / "hw.toml"
    path.write_text(toml_text(config.to_dict()))
    assert HardwareConfig.from_toml(path) == config


def test_from_toml_reads_a_hardware_table_and_keeps_other_defaults(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[run]\nname = "x"\n\n[hardware]\nhbm_latency = 7\nmesh_wrap = false\n')
    config = HardwareConfig.from_toml(str(path))
    assert config == HardwareConfig(hbm_latency=7, mesh_wrap=False)


def test_from_toml_bad_value_names_the_file_and_field(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("hbm_latency = 100\ndma_read_channels = 0\n")
    with pytest.raises(ConfigError) as info:
        HardwareConfig.from_toml(path)
    assert str(info.value) == f'{path}: "dma_read_channels" must be >= 1, got 0'


def test_from_toml_unknown_field_names_the_file_and_field(tmp_path):
    path = tmp_path / "typo.toml"
    path.write_text("hbm_latencey = 100\n")
    with pytest.raises(ConfigError) as info:
        HardwareConfig.from_toml(path)
    assert str(info.value) == f'{path}: unknown hardware field "hbm_latencey"'


def test_from_toml_wrong_type_names_the_file_and_field(tmp_path):
    path = tmp_path / "types.toml"
    path.write_text('scratch_bytes = "1MiB"\n')
    with pytest.raises(
        ConfigError, match=f"{path}: \"scratch_bytes\" must be a number, got '1MiB'"
    ):
        HardwareConfig.from_toml(path)


def test_from_toml_invalid_syntax_names_the_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("hbm_latency = \n")
    with pytest.raises(ConfigError, match=f"{path}: not valid TOML"):
        HardwareConfig.from_toml(path)


def test_from_toml_missing_file_names_it(tmp_path):
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError, match=f"{path}: cannot read"):
        HardwareConfig.from_toml(path)


def test_every_field_has_a_unit_and_a_meaning_in_declaration_order():
    described = HardwareConfig.describe()
    assert [name for name, *_ in described] == [f.name for f in dataclasses.fields(HardwareConfig)]
    for name, _kind, default, unit, meaning in described:
        assert unit and meaning, name
        assert getattr(HardwareConfig(), name) == default
    assert HardwareConfig.ZERO_ALLOWED == set(ZERO_OK)
