"""Choose the backend that a device name asks for."""

from __future__ import annotations

import warnings
from typing import Any

from .engine.backend import Backend, CpuBackend
from .errors import DeviceFallbackWarning, GpuUnavailableError


def resolve_backend(device: Any = "auto") -> Backend:
    """``"cpu"``, ``"gpu"`` / ``"cuda"`` / ``"cuda:N"`` / an int N, or ``"auto"``.

    ``"auto"`` takes the GPU when cupy, nvCOMP and a CUDA device are all usable and
    otherwise falls back to the CPU with a :class:`DeviceFallbackWarning` saying why.
    """
    if isinstance(device, Backend):
        return device
    if device in ("cpu", None):
        return CpuBackend()
    if device == "auto":
        try:
            return _gpu_backend(None)
        except GpuUnavailableError as exc:
            warnings.warn(f"reading on the CPU: {exc}", DeviceFallbackWarning, stacklevel=3)
            return CpuBackend()
    if isinstance(device, int) and not isinstance(device, bool):
        return _gpu_backend(device)
    if isinstance(device, str) and device in ("gpu", "cuda"):
        return _gpu_backend(None)
    if isinstance(device, str) and device.startswith("cuda:") and device[5:].isdigit():
        return _gpu_backend(int(device[5:]))
    raise ValueError(f"device must be 'cpu', 'gpu', 'cuda:N', an int or 'auto', got {device!r}")


def _gpu_backend(ordinal: int | None) -> Backend:
    from .gpu.deps import require_gpu

    require_gpu()
    from .gpu.backend import GpuBackend

    return GpuBackend(ordinal)
