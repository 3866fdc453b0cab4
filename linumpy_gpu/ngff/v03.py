"""The legacy versions NGFF 0.1, 0.2 and 0.3 (zarr v2).

0.1 and 0.2 images carry no axes: they are always 5-D, ``t, c, z, y, x``. 0.3 names its
axes as strings, unique and each one of ``t, c, z, y, x``. Levels have no transformations
(a ``coordinateTransformations`` list, where a writer added one, is read with the 0.4
rules): a level's scale is then what its shape says, level 0's size over its own on each
spatial axis, rounded to a whole factor (:func:`scales_from_shapes`), as viewers of these
versions place levels. Display, plate and well blocks are read leniently: these versions
predate most of the rules of 0.4.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from linumpy_gpu.errors import InvalidMetadataError
from linumpy_gpu.ngff import _common as c
from linumpy_gpu.ngff.model import (
    IMPLICIT_AXES,
    Axis,
    Channel,
    ImageLabelMeta,
    MultiscaleMeta,
    PlateMeta,
    WellMeta,
)
from linumpy_gpu.ngff.v04 import compose_level

VERSIONS = ("0.1", "0.2", "0.3")
AXIS_TYPES = {"t": "time", "c": "channel", "z": "space", "y": "space", "x": "space"}


def parse_multiscales(
    block: Mapping[str, Any], version: str, where: str, index: int = 0
) -> MultiscaleMeta:
    """``multiscales[index]`` of a 0.1 / 0.2 / 0.3 image (with ``omero`` and
    ``image-label``)."""
    ms, prefix = c.multiscale_entry(block, where, index)
    axes = parse_axes(ms.get("axes"), version, where, f"{prefix}.axes")
    ndim = len(axes)
    levels = []
    for field, ds, path in c.dataset_entries(ms, where, prefix):
        scale, translation = c.scale_translation_list(
            ds.get("coordinateTransformations"),
            ndim,
            where,
            f"{field}.coordinateTransformations",
            required=False,
        )
        levels.append((path, scale, translation))
    c.check_scales_grow([s for _, s, _ in levels], where, prefix, strict=False)
    return MultiscaleMeta(
        version=version,
        axes=axes,
        datasets=tuple(compose_level(p, ndim, s, t) for p, s, t in levels),
        name=c.as_str(ms.get("name")),
        type=c.as_str(ms.get("type")),
        metadata=c.method_metadata(ms.get("metadata"), where, f"{prefix}.metadata"),
        channels=parse_omero(block.get("omero"), where),
        image_label=parse_image_label(block.get("image-label"), version, where),
    )


def parse_axes(raw: Any, version: str, where: str, field: str) -> tuple[Axis, ...]:
    """Implicit ``t, c, z, y, x`` when a 0.1 / 0.2 image has no axes; otherwise a list of
    axis names (or, as some writers of 0.3 did, axis objects)."""
    if raw is None:
        if version in ("0.1", "0.2"):
            return tuple(Axis(n, AXIS_TYPES[n]) for n in IMPLICIT_AXES)
        raise InvalidMetadataError(where, field, "a list of axes (required since NGFF 0.3)")
    if not isinstance(raw, list) or not 2 <= len(raw) <= 5:
        raise InvalidMetadataError(where, field, "a list of 2 to 5 axes", raw)
    axes = []
    for i, a in enumerate(raw):
        if isinstance(a, str):
            if a not in AXIS_TYPES:
                raise InvalidMetadataError(
                    where, f"{field}[{i}]", "one of 't', 'c', 'z', 'y', 'x'", a
                )
            axes.append(Axis(a, AXIS_TYPES[a]))
        else:
            axes.append(c.parse_axis(a, where, f"{field}[{i}]"))
    c.check_unique_names(axes, where, field)
    return tuple(axes)


def parse_omero(raw: Any, where: str) -> tuple[Channel, ...]:
    """The ``omero`` block, every part optional."""
    return c.parse_omero(raw, where, mode="legacy")


def parse_image_label(raw: Any, version: str, where: str) -> ImageLabelMeta | None:
    """The ``image-label`` block (numeric label values, unique among the colors)."""
    return c.parse_image_label(raw, version, where, integers=False, non_empty=False)


def parse_plate(block: Mapping[str, Any], version: str, where: str) -> PlateMeta:
    """The ``plate`` block: rows, columns and wells whose paths name them."""
    return c.parse_plate(block, version, where, strict=False)


def parse_well(block: Mapping[str, Any], version: str, where: str) -> WellMeta:
    """The ``well`` block: a non-empty list of fields with string paths."""
    return c.parse_well(block, version, where, path_rule="any")


def scales_from_shapes(meta: MultiscaleMeta, shapes: list[tuple[int, ...]]) -> MultiscaleMeta:
    """For a 0.1 / 0.2 / 0.3 image whose levels carry no transformations (every scale ones,
    every translation zeros): each level's scale on its spatial axes from the level shapes,
    the level before's scale times their ratio of sizes rounded to a whole factor (so a
    pyramid halved with rounding up, 89 -> 45 -> 23 -> 12, gets 2, 4, 8). Any other image
    as it is."""
    if meta.version not in VERSIONS or len(shapes) < 2:
        return meta
    if any(
        any(v != 1.0 for v in ds.scale) or any(v != 0.0 for v in ds.translation)
        for ds in meta.datasets
    ):
        return meta
    spatial = [a.type == "space" for a in meta.axes]
    datasets = []
    scale = (1.0,) * len(shapes[0])
    previous = shapes[0]
    for ds, shape in zip(meta.datasets, shapes, strict=True):
        scale = tuple(
            s * max(1, round(n0 / max(1, n))) if space else 1.0
            for s, n0, n, space in zip(scale, previous, shape, spatial, strict=True)
        )
        previous = shape
        datasets.append(compose_level(ds.path, len(shape), scale, None))
    return dataclasses.replace(meta, datasets=tuple(datasets))
