"""The benchmark scripts end to end on a tiny volume (``--quick``, on the CPU): each reader
they compare reads what zarr-python reads, and the JSON records every case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the other readers the scripts compare, by the module each needs (zarr-python: always)
PEER_MODULES = {"tensorstore": "tensorstore", "zarrs": "zarrs"}


def _run(script: str, layout: str, tmp_path: Path) -> list[dict]:
    out = tmp_path / f"{script}.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / f"{script}.py"),
            "--quick",
            "--device",
            "cpu",
            "--layouts",
            layout,
            "--dir",
            str(tmp_path / "stores"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())["results"]


def _installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("layout", ["zstd-64-sharded", "v2-blosc-lz4-shuffle"])
def test_tiles_benchmark_compares_every_installed_reader_on_equal_results(tmp_path, layout):
    records = _run("tiles", layout, tmp_path)
    libraries = ["linumpy_gpu", "zarr-python"] + [
        name for name, module in PEER_MODULES.items() if _installed(module)
    ]
    readers = [r["reader"] for r in records]
    for library in libraries:
        for kind in ("one by one", "small read"):
            assert any(r.startswith(f"{library} {kind}") for r in readers), (library, readers)
    assert any(r.startswith("linumpy_gpu read_regions") for r in readers), readers
    if _installed("tensorstore"):
        assert any(r.startswith("tensorstore all at once") for r in readers), readers
    for record in records:
        assert record.get("error") is None, record
        assert record["equal_to_reference"] is True, record
        assert record["gbps"] > 0, record
        assert record["layout"] == layout and record["device"] == "cpu"


def test_peers_benchmark_reads_whole_levels_equal_to_zarr_python(tmp_path):
    records = _run("peers", "zstd-128", tmp_path)
    by_reader = {r["reader"]: r for r in records}
    assert {"linumpy_gpu", "zarr-python"} <= set(by_reader), list(by_reader)
    for name, record in by_reader.items():
        if record.get("note") == "not installed":
            assert name in PEER_MODULES and not _installed(PEER_MODULES[name]), name
            continue
        assert record.get("error") is None, record
        assert record["equal_to_reference"] is True, record
        assert record["gbps"] > 0, record
