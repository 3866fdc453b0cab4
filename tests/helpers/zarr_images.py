"""OME-Zarr images written with zarr-python alone (any store or URL zarr takes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import zarr


def write_image_with_zarr(
    store: Any,
    data: np.ndarray,
    *,
    zarr_format: int,
    chunks: tuple[int, ...],
    shards: tuple[int, ...] | None = None,
    compressors: Any = "auto",
    storage_options: dict[str, Any] | None = None,
) -> zarr.Group:
    """A one-level OME-Zarr image (NGFF 0.5 on zarr v3, 0.4 on v2) of ``data`` at
    ``store``, written by zarr-python; its level "0" has fill value 0."""
    root = zarr.open_group(
        store, mode="w", zarr_format=zarr_format, storage_options=storage_options
    )
    array = root.create_array(
        "0",
        shape=data.shape,
        dtype=data.dtype,
        chunks=chunks,
        shards=shards,
        compressors=compressors,
        fill_value=0,
    )
    array[...] = data
    names = "tczyx"[-data.ndim :]
    axes = [
        {"name": n, "type": "space", "unit": "micrometer"}
        if n in "zyx"
        else {"name": n, "type": "channel" if n == "c" else "time"}
        for n in names
    ]
    transforms = [{"type": "scale", "scale": [1.0] * data.ndim}]
    multiscale: dict[str, Any] = {
        "axes": axes,
        "datasets": [{"path": "0", "coordinateTransformations": transforms}],
        "name": "by-zarr-python",
    }
    if zarr_format == 3:
        root.attrs["ome"] = {"version": "0.5", "multiscales": [multiscale]}
    else:
        root.attrs["multiscales"] = [{"version": "0.4", **multiscale}]
    return root
