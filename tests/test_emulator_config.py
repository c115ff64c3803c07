"""HardwareConfig: bad values rejected naming the field, TOML loading and its errors."""

from __future__ import annotations

import dataclasses
import math

import pytest

from emulator import ConfigError, EmulatorError, HardwareConfig

INT_FIELDS = [f.name for f in dataclasses.fields(HardwareConfig) if f.type == "int"]
ZERO_OK = {
    "hbm_latency",
    "ipcq_latency",
    "issue_cycles",
    "hbm_stack_pes",
    "perturb_seed",
    "perturb_latency",
    "perturb_grant_delay",
}


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


RANGES = HardwareConfig.ranges()


@pytest.mark.parametrize("name", sorted(RANGES))
def test_both_ends_of_a_field_s_range_are_allowed_and_no_further(name):
    low, high = RANGES[name]
    assert getattr(HardwareConfig(**{name: low}), name) == low
    if name not in ("mesh_rows", "mesh_cols"):  # a mesh that long has too many channels
        assert getattr(HardwareConfig(**{name: high}), name) == high
    step = 1 if isinstance(high, int) else high
    with pytest.raises(ConfigError, match=f'"{name}" must be <= '):
        HardwareConfig(**{name: high + step})
    with pytest.raises(ConfigError, match=f'"{name}" must be >= '):
        HardwareConfig(**{name: low - 1})


def test_every_number_field_has_a_range_the_zero_allowed_ones_from_zero():
    numbers = {f.name for f in dataclasses.fields(HardwareConfig) if f.type != "bool"}
    assert set(RANGES) == numbers
    assert {name for name, (low, _) in RANGES.items() if low == 0} == ZERO_OK
    assert RANGES["hbm_latency"] == (0, 10**9) and RANGES["dma_read_channels"] == (1, 64)
    assert RANGES["scratch_bytes"] == (1, 2**40)


def test_a_huge_integer_is_refused_naming_the_field_in_one_short_line():
    with pytest.raises(ConfigError) as info:
        HardwareConfig(hbm_latency=10**400)
    assert str(info.value).startswith('"hbm_latency" must be <= 1_000_000_000 cycles')
    assert len(str(info.value)) < 200


@pytest.mark.parametrize(
    "mesh", [(1, 1, True), (1, 2, True), (2, 1, False), (3, 4, True), (3, 4, False), (2, 2, True)]
)
@pytest.mark.parametrize("dma", [(1, 1), (3, 2)])
def test_num_channels_is_what_the_mesh_builds(mesh, dma):
    import simpy

    from emulator.hardware.mesh import Mesh
    from emulator.memory import Memory

    rows, cols, wrap = mesh
    config = HardwareConfig(
        mesh_rows=rows,
        mesh_cols=cols,
        mesh_wrap=wrap,
        dma_read_channels=dma[0],
        dma_write_channels=dma[1],
    )
    assert config.num_channels == len(Mesh(simpy.Environment(), None, config, Memory()).channels)


def test_a_mesh_with_more_channels_than_a_trace_holds_is_refused():
    from emulator.trace import wire

    # 8,192 PEs: 4 channels and 4 links each, exactly the table's bound.
    assert HardwareConfig(mesh_rows=64, mesh_cols=128).num_channels == wire.MAX_ARRAY_LEN
    with pytest.raises(ConfigError, match="64x129 mesh"):
        HardwareConfig(mesh_rows=64, mesh_cols=129)
    with pytest.raises(ConfigError, match="256x256 mesh .* 524,288 channels, more than the 65,536"):
        HardwareConfig(mesh_rows=256, mesh_cols=256)


def test_from_toml_round_trips_the_ends_of_every_range(tmp_path):
    path = tmp_path / "hw.toml"
    highs = {name: high for name, (_, high) in RANGES.items() if not name.startswith("mesh_")}
    path.write_text(toml_text(highs))
    assert HardwareConfig.from_toml(path) == HardwareConfig(**highs)
