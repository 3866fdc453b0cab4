"""NGFF 0.4 (zarr v2): typed axes, one scale then at most one translation per level.

The rules checked here are the spec's MUST rules for images (axes count, types and order,
unique names; datasets with unique paths, each with exactly one ``scale`` and at most one
``translation`` after it, one value per axis, positive scales, levels from the highest
resolution to the lowest; optional multiscale-level transformations of the same form,
applied after the level's), the ``omero`` block (every channel with a color and a complete
window), ``image-label``, labels, plate and well blocks. NGFF 0.5 keeps these rules under
the ``ome`` key (see :mod:`.v05`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from linumpy_gpu.ngff import _common as c
from linumpy_gpu.ngff.model import (
    Axis,
    Channel,
    CoordinateSystemRef,
    DatasetMeta,
    ImageLabelMeta,
    MultiscaleMeta,
    PlateMeta,
    Scale,
    TransformSequence,
    Translation,
    WellMeta,
)

VERSION = "0.4"


def parse_multiscales(
    block: Mapping[str, Any], where: str, index: int = 0, *, version: str = VERSION
) -> MultiscaleMeta:
    """``multiscales[index]`` of an image block (with its ``omero`` and ``image-label``)."""
    ms, prefix = c.multiscale_entry(block, where, index)
    axes = parse_axes(ms.get("axes"), where, f"{prefix}.axes")
    ndim = len(axes)
    datasets = c.dataset_entries(ms, where, prefix)
    global_scale, global_translation = c.scale_translation_list(
        ms.get("coordinateTransformations"),
        ndim,
        where,
        f"{prefix}.coordinateTransformations",
        required=False,
    )
    levels = []
    for field, ds, path in datasets:
        scale, translation = c.scale_translation_list(
            ds.get("coordinateTransformations"),
            ndim,
            where,
            f"{field}.coordinateTransformations",
            required=True,
        )
        levels.append((path, scale, translation))
    c.check_scales_grow([s for _, s, _ in levels], where, prefix, strict=True)
    return MultiscaleMeta(
        version=version,
        axes=axes,
        datasets=tuple(
            compose_level(path, ndim, scale, translation, global_scale, global_translation)
            for path, scale, translation in levels
        ),
        name=c.as_str(ms.get("name")),
        type=c.as_str(ms.get("type")),
        metadata=c.method_metadata(ms.get("metadata"), where, f"{prefix}.metadata"),
        channels=parse_omero(block.get("omero"), where, version=version),
        image_label=parse_image_label(block.get("image-label"), where, version=version),
    )


def parse_axes(raw: Any, where: str, field: str) -> tuple[Axis, ...]:
    """The ``axes`` list of a 0.4 / 0.5 multiscale image, with the image layout rules."""
    raw = c.non_empty_list(raw, where, field, "a non-empty list of axes")
    axes = tuple(c.parse_axis(a, where, f"{field}[{i}]") for i, a in enumerate(raw))
    c.check_image_axes(axes, where, field)
    return axes


def compose_level(
    path: str,
    ndim: int,
    scale: tuple[float, ...] | None,
    translation: tuple[float, ...] | None,
    global_scale: tuple[float, ...] | None = None,
    global_translation: tuple[float, ...] | None = None,
) -> DatasetMeta:
    """A level's scale and translation with the multiscale-level ones applied after them
    (missing ones are ones and zeros), and the same as a scale-then-translation
    transformation from the level's array."""
    scale = scale or (1.0,) * ndim
    translation = translation or (0.0,) * ndim
    if global_scale or global_translation:
        gs = global_scale or (1.0,) * ndim
        gt = global_translation or (0.0,) * ndim
        translation = tuple(t * s + g for t, s, g in zip(translation, gs, gt, strict=True))
        scale = tuple(a * b for a, b in zip(scale, gs, strict=True))
    transform = TransformSequence(
        transformations=(Scale(scale=scale), Translation(translation=translation)),
        input=CoordinateSystemRef(path=path),
    )
    return DatasetMeta(path, scale, translation, transform, True)


def parse_omero(raw: Any, where: str, *, version: str = VERSION) -> tuple[Channel, ...]:
    """The ``omero`` block: in 0.4 every channel has a color and a complete window; 0.5
    leaves both optional but checks them when present."""
    return c.parse_omero(raw, where, mode="complete" if version == VERSION else "typed")


def parse_image_label(raw: Any, where: str, *, version: str = VERSION) -> ImageLabelMeta | None:
    """The ``image-label`` block: integer label values, unique among the colors; colors
    and properties non-empty lists when present."""
    return c.parse_image_label(raw, version, where, integers=True, non_empty=True)


def parse_plate(block: Mapping[str, Any], where: str, *, version: str = VERSION) -> PlateMeta:
    """The ``plate`` block, with the 0.4 rules (see :func:`._common.parse_plate`)."""
    return c.parse_plate(block, version, where, strict=True)


def parse_well(block: Mapping[str, Any], where: str, *, version: str = VERSION) -> WellMeta:
    """The ``well`` block: alphanumeric, unique field paths."""
    return c.parse_well(block, version, where, path_rule="alphanumeric")
