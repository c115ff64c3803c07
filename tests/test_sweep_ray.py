"""kbdebug sweep --cluster: the same rows from Ray tasks as from local worker processes."""

from __future__ import annotations

import io
import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip(
    "ray", reason="Ray is not installed (the [test] extra brings it: pip install -e '.[test]')"
)

from test_sweep import USER_KERNELS  # noqa: E402

from kbdebug.cli import main  # noqa: E402

GRID = ["--grid", "mode='ok','raise','crash','deadlock'", "--grid", "n=1,2", "-q", "--json"]


def _sweep(*argv: str) -> tuple[int, dict]:
    buf = io.StringIO()
    stdout, sys.stdout = sys.stdout, buf
    try:
        status = main(["sweep", *argv])
    finally:
        sys.stdout = stdout
    return status, json.loads(buf.getvalue())


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> dict[str, dict]:
    """One sweep on a Ray instance started by --cluster local (2 CPUs), one at -j 2; and
    what the Ray workers left in their temporary folder (TMPDIR, short: Ray's sockets
    live under it)."""
    path = tmp_path_factory.mktemp("user") / "my_kernels.py"
    path.write_text(USER_KERNELS)
    out = {}
    workers_tmp = tempfile.mkdtemp(prefix="kbr", dir="/tmp")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", workers_tmp)
        for name, extra in {"ray": ["--cluster", "local", "-j", "2"], "local": ["-j", "2"]}.items():
            status, doc = _sweep(f"{path}:launch", *GRID, *extra)
            assert status == 0
            out[name] = doc
    out["left"] = sorted(p.name for p in Path(workers_tmp).glob("kbdebug-sweep-*"))
    shutil.rmtree(workers_tmp, ignore_errors=True)
    return out


def test_ray_rows_are_the_local_rows(docs):
    ray_rows, local_rows = docs["ray"]["rows"], docs["local"]["rows"]
    assert [r["index"] for r in ray_rows] == list(range(8))

    def comparable(rows):
        return [r for r in rows if r["outcome"] != "crashed"]

    assert comparable(ray_rows) == comparable(local_rows)
    assert {r["outcome"] for r in comparable(ray_rows)} == {"ok", "kernel error", "deadlock"}
    assert docs["ray"]["best"] == docs["local"]["best"] == 0


def test_a_ray_worker_that_dies_is_a_crashed_row_and_leaves_no_trace(docs):
    crashed = [r for r in docs["ray"]["rows"] if r["params"]["mode"] == "crash"]
    assert [r["outcome"] for r in crashed] == ["crashed", "crashed"]
    assert all("Ray task failed" in r["message"] for r in crashed)
    # Its header-only temporary trace went with the sweep's scratch folder.
    assert docs["left"] == []


def test_the_ray_instance_it_started_is_gone():
    import ray

    assert not ray.is_initialized()
