"""OME-NGFF metadata (0.1 to 0.6): parse, check and build it. Pure Python: no array access.

Each spec version has its own module (:mod:`.v03` for the legacy 0.1 to 0.3, :mod:`.v04`,
:mod:`.v05`, :mod:`.v06`) that parses that version's blocks into the dataclasses of
:mod:`.model` and checks that version's rules; the functions here pick the module from the
declared version. Our own model is the single source of truth for reading; ome-zarr-models
is consulted only through :func:`validate_with_ome_zarr_models`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from linumpy_gpu.errors import InvalidMetadataError, MetadataWarning, warn
from linumpy_gpu.ngff import _common, v03, v04, v05, v06
from linumpy_gpu.ngff._common import (
    SUPPORTED_VERSIONS,
    kind_of,
    ome_block,
    parse_bioformats2raw,
    require_ome,
    spec_version,
)
from linumpy_gpu.ngff.model import (
    Acquisition,
    Affine,
    Axis,
    Bijection,
    ByDimension,
    ByDimensionItem,
    Channel,
    Coordinates,
    CoordinateSystem,
    CoordinateSystemRef,
    DatasetMeta,
    Displacements,
    FieldRef,
    Identity,
    ImageLabelMeta,
    LabelColor,
    MapAxis,
    MultiscaleMeta,
    PlateMeta,
    ProjectAxis,
    Rotation,
    Scale,
    Scene,
    SceneImage,
    Transformation,
    TransformSequence,
    Translation,
    WellMeta,
    WellRef,
)
from linumpy_gpu.ngff.transforms import (
    UnresolvedParametersError,
    affine_parts,
    inverse,
    resolve_parameters,
    scene_images,
    to_matrix,
)
from linumpy_gpu.ngff.validate import validate_with_ome_zarr_models


def parse_multiscales(
    block: Mapping[str, Any], version: str | None, where: str, index: int = 0
) -> MultiscaleMeta:
    """Parse ``multiscales[index]`` (plus ``omero`` and ``image-label``) of an image group.

    ``block`` and ``version`` are what :func:`ome_block` returns. Without a declared version
    the layout decides (coordinate systems: 0.6; axis objects: 0.4; axis names: 0.3; no
    axes: 0.2), with a :class:`~linumpy_gpu.errors.MetadataWarning`.
    """
    entry, prefix = _common.multiscale_entry(block, where, index)
    own = block.get("version")
    if version is None and own is not None and not isinstance(own, str):
        raise InvalidMetadataError(where, "version", "a version string such as '0.5'", own)
    declared = version if version is not None else entry.get("version")
    if declared is None:
        declared = _layout_version(entry)
        warn(
            f"{where}: no NGFF version is declared; read as {declared} from the layout of {prefix}",
            MetadataWarning,
        )
    v = spec_version(declared, where, f"{prefix}.version")
    if v == "0.6":
        return v06.parse_multiscales(block, where, index)
    if v == "0.5":
        return v05.parse_multiscales(block, where, index)
    if v == "0.4":
        return v04.parse_multiscales(block, where, index)
    return v03.parse_multiscales(block, v, where, index)


def scales_from_shapes(meta: MultiscaleMeta, shapes: list[tuple[int, ...]]) -> MultiscaleMeta:
    """``meta`` with each level's scale taken from the level shapes where the version has
    no transformations to give it (0.1 to 0.3, see :func:`.v03.scales_from_shapes`)."""
    return v03.scales_from_shapes(meta, shapes)


def states_scales(version: str) -> bool:
    """Whether images of this NGFF version store their levels' scales (0.4 on); before,
    :func:`scales_from_shapes` infers them, so shapes cannot contradict them."""
    return version not in v03.VERSIONS


def parse_plate(block: Mapping[str, Any], version: str | None, where: str) -> PlateMeta:
    """Parse the ``plate`` block of a plate group (version 0.4 when none is declared)."""
    plate = block.get("plate")
    declared = version or (plate.get("version") if isinstance(plate, Mapping) else None)
    v = spec_version(declared or "0.4", where, "plate.version")
    if v == "0.6":
        return v06.parse_plate(block, where)
    if v == "0.5":
        return v05.parse_plate(block, where)
    if v == "0.4":
        return v04.parse_plate(block, where)
    return v03.parse_plate(block, v, where)


def parse_well(block: Mapping[str, Any], version: str | None, where: str) -> WellMeta:
    """Parse the ``well`` block of a well group (version 0.4 when none is declared)."""
    well = block.get("well")
    declared = version or (well.get("version") if isinstance(well, Mapping) else None)
    v = spec_version(declared or "0.4", where, "well.version")
    if v == "0.6":
        return v06.parse_well(block, where)
    if v == "0.5":
        return v05.parse_well(block, where)
    if v == "0.4":
        return v04.parse_well(block, where)
    return v03.parse_well(block, v, where)


def parse_labels_group(
    block: Mapping[str, Any], where: str, version: str | None = None
) -> tuple[str, ...]:
    """The ``labels`` list of a labels group: the paths of its label images (the same in
    every version; ``version`` is accepted for symmetry with the other parsers)."""
    return _common.parse_labels_group(block, where)


def parse_image_label(raw: Any, version: str | None, where: str) -> ImageLabelMeta | None:
    """Parse an ``image-label`` block (the value of the key), None when ``raw`` is None."""
    if raw is None:
        return None
    own = raw.get("version") if isinstance(raw, Mapping) else None
    v = spec_version(version or own or "0.4", where, "image-label.version")
    if v == "0.6":
        return v06.parse_image_label(raw, where)
    if v in ("0.4", "0.5"):
        return v04.parse_image_label(raw, where, version=v)
    return v03.parse_image_label(raw, v, where)


def parse_omero(omero: Any, where: str, version: str | None = None) -> tuple[Channel, ...]:
    """The ``omero.channels`` list (transitional metadata). Without a version, colors and
    windows are optional and checked when present, as 0.5 and 0.6 have them."""
    v = spec_version(version, where) if version is not None else "0.5"
    if v == "0.6":
        return v06.parse_omero(omero, where)
    if v in ("0.4", "0.5"):
        return v04.parse_omero(omero, where, version=v)
    return v03.parse_omero(omero, where)


def parse_scene(block: Mapping[str, Any], version: str | None, where: str) -> Scene:
    """Parse the ``scene`` block of a scene group (NGFF 0.6 on)."""
    v = spec_version(version, where)
    if v != "0.6":
        raise InvalidMetadataError(where, "version", "0.6 or later for a 'scene' block", version)
    return v06.parse_scene(block, where)


def _layout_version(entry: Mapping[str, Any]) -> str:
    if "coordinateSystems" in entry:
        return "0.6"
    axes = entry.get("axes")
    if axes is None:
        return "0.2"
    if isinstance(axes, list) and axes and all(isinstance(a, str) for a in axes):
        return "0.3"
    return "0.4"


__all__ = [
    "scene_images",
    "scales_from_shapes",
    "states_scales",
    "SUPPORTED_VERSIONS",
    "Acquisition",
    "Affine",
    "Axis",
    "Bijection",
    "ByDimension",
    "ByDimensionItem",
    "Channel",
    "CoordinateSystem",
    "CoordinateSystemRef",
    "Coordinates",
    "DatasetMeta",
    "Displacements",
    "FieldRef",
    "Identity",
    "ImageLabelMeta",
    "LabelColor",
    "MapAxis",
    "MultiscaleMeta",
    "PlateMeta",
    "ProjectAxis",
    "Rotation",
    "Scale",
    "Scene",
    "SceneImage",
    "TransformSequence",
    "Transformation",
    "Translation",
    "UnresolvedParametersError",
    "WellMeta",
    "WellRef",
    "affine_parts",
    "inverse",
    "kind_of",
    "ome_block",
    "parse_bioformats2raw",
    "parse_image_label",
    "parse_labels_group",
    "parse_multiscales",
    "parse_omero",
    "parse_plate",
    "parse_scene",
    "parse_well",
    "require_ome",
    "resolve_parameters",
    "spec_version",
    "to_matrix",
    "validate_with_ome_zarr_models",
]
