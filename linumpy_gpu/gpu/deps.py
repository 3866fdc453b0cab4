"""Find the GPU stack without importing it eagerly, and say exactly what is missing."""

from __future__ import annotations

import importlib.util
from functools import lru_cache

from linumpy_gpu.errors import GpuUnavailableError

# linumpy-gpu is not on PyPI: the extras install from a clone of the repository
INSTALL_HINT = (
    "install the GPU extra that matches your CUDA driver, in the folder of your clone of "
    'linumpy_gpu: pip install -e ".[cu13]" (CUDA 13) or pip install -e ".[cu12]" (CUDA 12)'
)


@lru_cache(maxsize=1)
def missing_pieces() -> tuple[str, ...]:
    """Human-readable names of what the GPU path lacks; empty when all is there."""
    missing = []
    if importlib.util.find_spec("cupy") is None:
        missing.append("cupy (cupy-cuda13x or cupy-cuda12x)")
    else:
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() < 1:
                missing.append("a visible CUDA device")
        except Exception as exc:  # no driver, no device, broken install
            missing.append(f"a usable CUDA device ({type(exc).__name__}: {exc})")
    try:
        from linumpy_gpu.gpu.nvcomp.lib import find_libnvcomp, zstd_api

        find_libnvcomp()
        if not missing:  # with a working CUDA runtime, also load it and check its API
            zstd_api()
    except Exception as exc:
        missing.append(f"nvCOMP (nvidia-nvcomp-cu13 / -cu12): {exc}")
    return tuple(missing)


def require_gpu() -> None:
    """Raise :class:`~linumpy_gpu.GpuUnavailableError` naming what the GPU path lacks, if
    anything."""
    missing = missing_pieces()
    if missing:
        raise GpuUnavailableError("the GPU path needs " + "; ".join(missing) + ". " + INSTALL_HINT)
