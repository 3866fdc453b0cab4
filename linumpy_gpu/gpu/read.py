"""``read_zarr_to_gpu``: one call from a path to a cupy array, for scripts that want data
and no objects."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from linumpy_gpu.errors import InvalidArgumentError

if TYPE_CHECKING:
    import cupy


def read_zarr_to_gpu(
    path: Any,
    region: Any = None,
    *,
    level: int | str = 0,
    device: int = 0,
    storage_options: dict[str, Any] | None = None,
) -> cupy.ndarray:
    """Read ``region`` (numpy basic indexing; None: everything) of an OME-Zarr image's
    ``level``, or of a plain zarr array, into a cupy array on GPU ``device``.

    ``path``: an OME-Zarr image (its ``level`` is read), a zarr array, or a path or URL to
    either. Decoded on the GPU in nvCOMP batches where the codecs allow (zstd, Blosc with
    LZ4 or zstd inside, LZ4), on host cores and copied otherwise."""
    import zarr

    from linumpy_gpu.backends import resolve_backend
    from linumpy_gpu.engine import ChunkedArrayReader
    from linumpy_gpu.image import MultiscaleImage, open_ome_zarr
    from linumpy_gpu.io.stores import locate, translated_errors

    if isinstance(path, zarr.Array):
        array, where = path, str(path.store_path)
    else:
        location = locate(path, storage_options=storage_options)
        with translated_errors(location.where, metadata=True):
            node = zarr.open(store=location.store, mode="r")
        if isinstance(node, zarr.Array):
            array, where = node, location.where
        else:
            image = open_ome_zarr(node, device=device)
            if not isinstance(image, MultiscaleImage):
                raise InvalidArgumentError(
                    f"'{location.where}' holds a {type(image).__name__}, not an image: open it "
                    "with open_ome_zarr_gpu and pick an image"
                )
            return image[level].read(region)
    reader = ChunkedArrayReader(array, resolve_backend(device), name=where)
    return reader.read(() if region is None else region)
