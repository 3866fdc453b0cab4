"""Shared fixtures: the ../shared test data, GPU detection, and stores written by peers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent  # the repository
SHARED_DATA = Path(os.environ.get("LINUMPY_GPU_SHARED_DATA", ROOT.parent / "shared" / "data"))


def gpu_available() -> bool:
    try:
        from linumpy_gpu.gpu.deps import missing_pieces

        return not missing_pieces()
    except Exception:
        return False


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared test data not present at {SHARED_DATA} (a user's clone has none)")
    return SHARED_DATA


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def device(request) -> str:
    """Each device a test should pass on: the CPU always, the GPU where one is present."""
    return request.param


@pytest.fixture
def xp(device):
    """The array module reads on ``device`` return: numpy or cupy."""
    if device == "cpu":
        import numpy

        return numpy
    import cupy

    return cupy


def to_numpy(array):
    """A read's result as numpy, whatever device it came from."""
    return array.get() if hasattr(array, "__cuda_array_interface__") else array


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
    if gpu_available():
        return
    from linumpy_gpu.gpu.deps import missing_pieces

    reason = "no usable GPU stack here: needs " + "; ".join(missing_pieces())
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
