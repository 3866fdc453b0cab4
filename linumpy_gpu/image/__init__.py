"""What users hold: multiscale images, their levels and labels, plates, wells and series,
and :func:`open_ome_zarr` that opens them."""

from linumpy_gpu.image.collections import Plate, Scene, SeriesCollection, Well
from linumpy_gpu.image.level import Level
from linumpy_gpu.image.multiscale import Labels, MultiscaleImage
from linumpy_gpu.image.open import open_image, open_ome_zarr

__all__ = [
    "Labels",
    "Level",
    "MultiscaleImage",
    "Plate",
    "Scene",
    "SeriesCollection",
    "Well",
    "open_image",
    "open_ome_zarr",
]
