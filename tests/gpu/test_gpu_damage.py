"""The damage matrix: every damaged chunk ends in a clear error, never a hang, a dead CUDA
context or wrong data for a checksummed frame (zstd), or data other than the CPU codec
decodes (Blosc and LZ4, whose chunks carry no checksum). Each case runs in its own process
(a dead CUDA context must not take the test run with it); the processes run a few at a
time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.gpu import stream_damage_case

pytestmark = pytest.mark.gpu

CASES = [
    "truncated",
    "bad-magic",
    "header-byte",
    "block-header-byte",
    "payload-byte",
    "last-block-byte",
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
STREAM_MATRIX = [(c, case) for c in ("lz4", "zstd") for case in stream_damage_case.CASES] + [
    ("numcodecs-lz4", case) for case in stream_damage_case.LZ4_CASES
]

# every case in its own process, several processes at once (each spends most of its time
# starting CUDA): (module, arguments) -> (return code, stderr, result or None)
_ALL_CASES = [("tests.gpu.damage_case", [c, "1" if k else "0"]) for c, k in MATRIX] + [
    ("tests.gpu.stream_damage_case", [c, case]) for c, case in STREAM_MATRIX
]
TIMEOUT_S = 120


def _run_one(module: str, args: list[str], folder: Path) -> tuple[int | None, str, dict | None]:
    out = folder / f"{module.rsplit('.', 1)[-1]}-{'-'.join(args)}.json"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", module, *args, str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None, "", None
    result = json.loads(out.read_text()) if proc.returncode == 0 and out.exists() else None
    if result is not None and REPORT:
        with open(REPORT, "a") as f:
            f.write(json.dumps(result) + "\n")
    return proc.returncode, proc.stderr[-3000:], result


@pytest.fixture(scope="module")
def case_results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("damage")
    workers = max(1, min(8, (os.cpu_count() or 2) // 2))
    with ThreadPoolExecutor(workers) as pool:
        futures = {
            (module, tuple(args)): pool.submit(_run_one, module, args, folder)
            for module, args in _ALL_CASES
        }
        return {key: future.result() for key, future in futures.items()}


def result_of(case_results: dict, module: str, args: list[str]) -> dict:
    code, stderr, result = case_results[(module, tuple(args))]
    if code is None:
        pytest.fail(f"{args}: the read hung (no answer in {TIMEOUT_S} s)")
    assert code == 0, f"{args}: process died ({code}):\n{stderr}"
    assert result is not None
    return result


@pytest.mark.parametrize(
    ("case", "checksum"),
    MATRIX,
    ids=[f"{c}-{'checksum' if k else 'plain'}" for c, k in MATRIX],
)
def test_damaged_chunk(case_results, case, checksum):
    result = result_of(case_results, "tests.gpu.damage_case", [case, "1" if checksum else "0"])
    assert result["gpu_usable_after"], result
    assert "WRONG DATA" not in result["gpu"] or not checksum, result
    if result["cpu"].startswith("error") or "wrong size" in result["cpu"]:
        assert result["gpu"].startswith("ChunkDecodeError"), result
        assert result["names_key"], result
        assert result["zarr_context"].startswith("ChunkDecodeError"), result


@pytest.mark.parametrize(("cname", "case"), STREAM_MATRIX)
def test_damaged_blosc_or_lz4_chunk(case_results, cname, case):
    result = result_of(case_results, "tests.gpu.stream_damage_case", [cname, case])
    assert result["gpu_usable_after"], result
    assert "WRONG DATA" not in result["gpu"], result
    assert "WRONG DATA" not in result["zarr_context"], result
    if result["cpu"].startswith("error"):
        assert result["gpu"].startswith("ChunkDecodeError"), result
        assert result["names_key"], result
        assert result["zarr_context"].startswith("ChunkDecodeError"), result
