"""Backends (the interface, the CPU backend) and the choice of one by device name; the GPU
backend lives in :mod:`linumpy_gpu.gpu.backend`."""

from __future__ import annotations

from typing import Any

from linumpy_gpu.backends.base import Backend, BatchMemory
from linumpy_gpu.backends.cpu import CpuBackend
from linumpy_gpu.errors import (
    DeviceFallbackWarning,
    GpuUnavailableError,
    InvalidArgumentError,
    warn,
)


def resolve_backend(device: Any = "auto") -> Backend:
    """``"cpu"``, ``"gpu"`` / ``"cuda"`` / ``"cuda:N"`` / an int N, or ``"auto"``.

    ``"auto"`` takes the GPU when cupy, nvCOMP and a CUDA device are all usable and
    otherwise falls back to the CPU with a :class:`DeviceFallbackWarning` saying why.
    """
    if isinstance(device, Backend):
        return device
    if device is None or (isinstance(device, str) and device == "cpu"):
        return CpuBackend()
    if isinstance(device, str) and device == "auto":
        try:
            return _gpu_backend(None)
        except GpuUnavailableError as exc:
            warn(f"reading on the CPU: {exc}", DeviceFallbackWarning)
            return CpuBackend()
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return _gpu_backend(device)
    if isinstance(device, str) and device in ("gpu", "cuda"):
        return _gpu_backend(None)
    if isinstance(device, str) and device.startswith("cuda:") and device[5:].isdigit():
        return _gpu_backend(int(device[5:]))
    raise InvalidArgumentError(
        f"device must be 'cpu', 'gpu', 'cuda:N', a GPU number or 'auto', got {device!r}"
    )


def _gpu_backend(ordinal: int | None) -> Backend:
    from linumpy_gpu.gpu.deps import require_gpu

    require_gpu()
    import cupy

    from linumpy_gpu.gpu.backend import GpuBackend

    count = cupy.cuda.runtime.getDeviceCount()
    if ordinal is not None and ordinal >= count:
        raise InvalidArgumentError(
            f"there is no GPU {ordinal}: {count} visible (cuda:0..cuda:{count - 1}); "
            "CUDA_VISIBLE_DEVICES decides which GPUs a process sees"
        )
    return GpuBackend(ordinal)


__all__ = ["Backend", "BatchMemory", "CpuBackend", "resolve_backend"]
