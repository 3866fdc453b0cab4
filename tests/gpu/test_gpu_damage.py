"""The damage matrix: every damaged chunk ends in a clear error, never a hang, a dead CUDA
context or wrong data for a checksummed frame. Each case runs in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

CASES = [
    "truncated",
    "bad-magic",
    "header-byte",
    "block-header-byte",
    "payload-byte",
    "checksum-byte",
    "zero-length",
    "garbage",
    "trailing-bytes",
    "wrong-content-size",
]
ROOT = Path(__file__).resolve().parents[2]
REPORT = os.environ.get("LINUMPY_GPU_DAMAGE_REPORT")


# A frame without a checksum has no checksum byte to damage.
MATRIX = [(c, True) for c in CASES] + [(c, False) for c in CASES if c != "checksum-byte"]


@pytest.mark.parametrize(
    ("case", "checksum"), MATRIX, ids=[f"{c}-{'checksum' if k else 'plain'}" for c, k in MATRIX]
)
def test_damaged_chunk(tmp_path, case, checksum):
    out = tmp_path / "result.json"
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.gpu.damage_case",
                case,
                "1" if checksum else "0",
                str(out),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: the read hung (no answer in 120 s)")
    assert proc.returncode == 0, f"{case}: process died ({proc.returncode}):\n{proc.stderr[-3000:]}"
    result = json.loads(out.read_text())
    if REPORT:
        with open(REPORT, "a") as f:
            f.write(json.dumps(result) + "\n")
    assert result["gpu_usable_after"], result
    assert "WRONG DATA" not in result["gpu"] or not checksum, result
    if result["cpu"].startswith("error") or "wrong size" in result["cpu"]:
        assert result["gpu"].startswith("ChunkDecodeError"), result
        assert result["names_key"], result
        assert result["zarr_context"].startswith("ChunkDecodeError"), result
