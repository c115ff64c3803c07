"""`kbdebug run --values`: the tensors kept beside the trace, their limit, and what is refused."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from emulator.scenarios import decode_prefetch
from emulator.trace.digests import digest_of
from kbdebug.cli import main
from kbdebug.replay import Replay
from kbdebug.replay.values import Values
from kbdebug.replay.values_file import ValueKeeper, ValuesFileError, read_kept_values

TILE = 64 * 128 * 2  # bytes of one K or V tile of decode_prefetch


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """A decode run of 4 tiles recorded with --values, and its Values."""
    out = tmp_path_factory.mktemp("values") / "decode.kbt"
    assert (
        main(["run", "decode_prefetch", "--set", "n_tiles=4", "-q", "-o", str(out), "--values"])
        == 0
    )
    return out, Values.of(Replay.open(out))


def test_values_round_trip_to_what_the_kernel_waited_for(kept):
    out, values = kept
    assert (out.parent / "decode.kbt.values.npz").is_file()
    scenario = decode_prefetch(n_tiles=4)
    k_def = scenario.memory.tensors[1]
    assert k_def.name == "K"
    k = scenario.memory.get(k_def.addr, k_def.shape, "f16")
    waited = {w.where: w for w in values.waited()}
    tile = values.array(waited["K[64:128, :]"].future)
    assert tile.dtype == np.float16 and np.array_equal(tile, k[64:128])
    for w in values.waited() + values.stores():
        array = values.array(w.future)
        assert array is not None and array.shape == w.shape
        assert digest_of(w.future, array) == w.digest
    assert values.kept.note == ""


def test_the_limit_cuts_with_a_note_that_says_what(tmp_path, capsys):
    out = tmp_path / "long.kbt"
    args = ["run", "decode_prefetch", "--set", "n_tiles=40", "-q", "-o", str(out)]
    assert main([*args, "--values", "--values-limit", "1"]) == 0
    printed = capsys.readouterr().out
    assert "past the 1 MiB total limit (--values-limit keeps more)" in printed
    values = Values.of(Replay.open(out))
    kept = [w for w in values.waited() if values.array(w.future) is not None]
    assert 0 < len(kept) < len(values.waited())
    assert sum(values.array(w.future).nbytes for w in kept) <= 1 << 20
    assert "not kept:" in values.kept.note


def test_a_tensor_over_the_per_tensor_limit_is_not_kept():
    keeper = ValueKeeper(tensor_limit=TILE - 1, total_limit=1 << 20)
    keeper.keep(0, np.zeros(TILE // 2, np.float16))
    keeper.keep(1, np.zeros(TILE // 2 - 1, np.float16))
    assert list(keeper.arrays) == [1]
    assert keeper.note() == (
        "values kept for 1 tensors; not kept: 1 tensor(s) over the 16,383 bytes per-tensor limit"
    )


def test_another_file_where_the_values_go_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "t.kbt"
    theirs = tmp_path / "t.kbt.values.npz"
    theirs.write_bytes(b"my notes")
    args = ["run", "decode_prefetch", "--set", "n_tiles=2", "-q", "-o", str(out), "--values"]
    assert main(args) == 2
    assert "is not a kbdebug values file; --force replaces it" in capsys.readouterr().err
    assert theirs.read_bytes() == b"my notes" and not out.exists()


def test_values_of_another_run_are_not_read(kept, tmp_path):
    out, _ = kept
    other = tmp_path / "other.kbt"
    assert main(["run", "decode_prefetch", "--set", "n_tiles=2", "-q", "-o", str(other)]) == 0
    assert read_kept_values(out.parent / "decode.kbt.values.npz", other) is None


def test_a_member_whose_header_claims_more_than_its_bytes_is_refused(kept, tmp_path):
    out, values = kept
    forged = tmp_path / "forged.npz"
    with zipfile.ZipFile(out.parent / "decode.kbt.values.npz") as source:
        with zipfile.ZipFile(forged, "w") as target:
            for info in source.infolist():
                data = source.read(info)
                if info.filename == "f1.npy":
                    buffer = io.BytesIO()
                    np.lib.format.write_array_header_1_0(
                        buffer, {"descr": "<f2", "fortran_order": False, "shape": (1 << 40,)}
                    )
                    data = buffer.getvalue() + b"\0" * 64
                target.writestr(info, data)
    hostile = read_kept_values(forged, out)
    with pytest.raises(ValuesFileError, match="more than its bytes"):
        hostile.array(1)
