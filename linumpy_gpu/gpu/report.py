"""``info()``: what the GPU path will run on."""

from __future__ import annotations

from typing import Any


def info() -> dict[str, Any]:
    """GPU, CUDA driver/runtime, cupy, nvCOMP, kvikio and the GDS mode, as a dict.
    Raises :class:`~linumpy_gpu.GpuUnavailableError` naming what is missing where there
    is no GPU stack."""
    try:
        import cupy
    except ImportError:
        from linumpy_gpu.gpu.deps import require_gpu

        require_gpu()  # names what the GPU path lacks
        raise

    from linumpy_gpu.gpu.nvcomp.lib import find_libnvcomp, nvcomp_version

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    free, total = dev.mem_info

    def cuda_version(v: int) -> str:
        return f"{v // 1000}.{(v % 1000) // 10}"

    result: dict[str, Any] = {
        "gpu": f"{props['name'].decode()} (cuda:{dev.id}, compute {dev.compute_capability[0]}.{dev.compute_capability[1]})",
        "gpu memory": f"{total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free)",
        "gpus visible": cupy.cuda.runtime.getDeviceCount(),
        "cuda driver": cuda_version(cupy.cuda.runtime.driverGetVersion()),
        "cuda runtime": cuda_version(cupy.cuda.runtime.runtimeGetVersion()),
        "cupy": cupy.__version__,
        "nvcomp": f"{nvcomp_version()} ({find_libnvcomp()})",
    }
    try:
        import kvikio

        from linumpy_gpu.gpu.gds_store import gds_mode

        result["kvikio"] = kvikio.__version__
        result["gds mode"] = gds_mode()
    except ImportError:
        result["kvikio"] = "not installed (GDSStore unavailable; the engine reads with POSIX)"
    return result
