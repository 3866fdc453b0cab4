"""Turn decoded chunk bytes into arrays and place them in the output (numpy or cupy)."""

from __future__ import annotations

from typing import Any

import numpy as np

from linumpy_gpu.core.layout import ChunkFormat


def chunk_array(raw: Any, fmt: ChunkFormat, dtype: np.dtype) -> Any:
    """View 1-D uint8 ``raw`` (numpy or cupy) as the decoded chunk, native byte order."""
    if fmt.needs_byteswap:
        # cupy has no non-native dtypes: reverse each element's bytes explicitly (each
        # half of a complex number: its real and imaginary parts are swapped apart)
        unit = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
        raw = raw.reshape(-1, unit)[:, ::-1].copy().reshape(-1)
    arr = raw.view(dtype)
    if fmt.transpose is not None:
        stored_shape = tuple(fmt.shape[i] for i in fmt.transpose)
        return arr.reshape(stored_shape).transpose(tuple(np.argsort(fmt.transpose)))
    return arr.reshape(fmt.shape, order=fmt.order)


def place(
    out: Any, out_region: tuple[slice, ...], chunk: Any, chunk_region: tuple[slice, ...]
) -> None:
    """Copy ``chunk[chunk_region]`` into ``out[out_region]``."""
    out[out_region] = chunk[chunk_region]


def fill(out: Any, out_region: tuple[slice, ...], value: Any) -> None:
    """Set ``out[out_region]`` to ``value`` (a missing or damaged chunk's place)."""
    out[out_region] = value
