"""Parse OME-NGFF attributes (0.1 to 0.5) into the dataclasses of :mod:`.model`.

Input is the attribute dictionary of one zarr group, as zarr-python returns it; output is
plain data. Schema checks for 0.4 and 0.5 are delegated to ome-zarr-models (the community's
pydantic models of the spec); its complaints are translated into one
:class:`~linumpy_gpu.errors.InvalidMetadataError` that names the store path and the field.
Checks the schema cannot express (lengths that must agree, ...) are made here.
"""

from __future__ import annotations

import importlib
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidMetadataError, MetadataWarning, NotOmeZarrError
from .model import (
    IMPLICIT_AXES,
    SPACE_UNITS,
    TIME_UNITS,
    Acquisition,
    Axis,
    Channel,
    DatasetMeta,
    FieldRef,
    ImageLabelMeta,
    LabelColor,
    MultiscaleMeta,
    PlateMeta,
    WellMeta,
    WellRef,
)

SUPPORTED_VERSIONS = ("0.1", "0.2", "0.3", "0.4", "0.5")

# (version, kind) -> (module, class) of the ome-zarr-models schema for that attribute block.
_SCHEMAS = {
    ("0.4", "image"): ("ome_zarr_models.v04.image", "ImageAttrs"),
    ("0.5", "image"): ("ome_zarr_models.v05.image", "ImageAttrs"),
    ("0.4", "well"): ("ome_zarr_models.v04.well", "WellAttrs"),
    ("0.5", "well"): ("ome_zarr_models.v05.well", "WellAttrs"),
    ("0.4", "labels"): ("ome_zarr_models.v04.labels", "LabelsAttrs"),
    ("0.5", "labels"): ("ome_zarr_models.v05.labels", "LabelsAttrs"),
    ("0.4", "image-label"): ("ome_zarr_models.v04.image_label", "ImageLabelAttrs"),
    ("0.5", "image-label"): ("ome_zarr_models.v05.image_label", "ImageLabelAttrs"),
}


def ome_block(attrs: Mapping[str, Any], zarr_format: int) -> tuple[dict, str | None]:
    """Return the OME attribute block of a group and its declared NGFF version.

    NGFF 0.5 (zarr v3) nests everything under ``attributes["ome"]`` with one ``version``;
    earlier versions put ``multiscales`` / ``plate`` / ``well`` at the top level and a
    ``version`` inside each.
    """
    if isinstance(attrs.get("ome"), Mapping):
        block = dict(attrs["ome"])
        return block, _as_str(block.get("version"))
    block = dict(attrs)
    for key in ("multiscales", "plate", "well"):
        value = block.get(key)
        if isinstance(value, list) and value and isinstance(value[0], Mapping):
            return block, _as_str(value[0].get("version"))
        if isinstance(value, Mapping):
            return block, _as_str(value.get("version"))
    return block, None


def kind_of(block: Mapping[str, Any]) -> str | None:
    """What an OME block describes: 'plate', 'well', 'image', 'bioformats2raw' or None."""
    if "plate" in block:
        return "plate"
    if "well" in block:
        return "well"
    if "multiscales" in block:
        return "image"
    if "bioformats2raw.layout" in block:
        return "bioformats2raw"
    if "labels" in block:
        return "labels"
    return None


def validate_schema(block: Mapping[str, Any], version: str | None, kind: str, where: str) -> None:
    """Check a block against ome-zarr-models' schema, where one exists for that version."""
    target = _SCHEMAS.get((version or "", kind))
    if target is None:
        return
    try:
        model = getattr(importlib.import_module(target[0]), target[1])
    except (ImportError, AttributeError):  # an older ome-zarr-models without that model
        return
    payload = dict(block)
    if version == "0.4":
        payload.pop("version", None)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.model_validate(payload)
    except Exception as exc:  # pydantic.ValidationError, imported lazily
        errors = getattr(exc, "errors", None)
        if not callable(errors):
            raise
        first = errors()[0]
        field = _dotted(first.get("loc", ()))
        raise InvalidMetadataError(where, field or kind, first.get("msg", str(exc))) from None
    for w in caught:
        warnings.warn(f"{where}: {w.message}", MetadataWarning, stacklevel=3)


def parse_multiscales(
    block: Mapping[str, Any], version: str | None, where: str, index: int = 0
) -> MultiscaleMeta:
    """Parse ``multiscales[index]`` (plus ``omero`` and ``image-label``) of an image group."""
    multiscales = block.get("multiscales")
    if not isinstance(multiscales, list) or not multiscales:
        raise InvalidMetadataError(
            where, "multiscales", "a non-empty list of multiscale images", multiscales
        )
    if not 0 <= index < len(multiscales):
        raise InvalidMetadataError(
            where, "multiscales", f"at least {index + 1} multiscale entries", len(multiscales)
        )
    ms = multiscales[index]
    prefix = f"multiscales[{index}]"
    if not isinstance(ms, Mapping):
        raise InvalidMetadataError(where, prefix, "an object", ms)
    version = version or _as_str(ms.get("version"))
    if version not in SUPPORTED_VERSIONS:
        raise InvalidMetadataError(
            where, f"{prefix}.version", f"one of {', '.join(SUPPORTED_VERSIONS)}", version
        )
    validate_schema(block, version, "image", where)

    datasets_raw = ms.get("datasets")
    if not isinstance(datasets_raw, list) or not datasets_raw:
        raise InvalidMetadataError(where, f"{prefix}.datasets", "a non-empty list", datasets_raw)
    axes = _parse_axes(ms.get("axes"), version, where, f"{prefix}.axes")
    ndim = len(axes) if axes is not None else None

    global_scale, global_translation = _parse_transforms(
        ms.get("coordinateTransformations"),
        ndim,
        where,
        f"{prefix}.coordinateTransformations",
        required=False,
    )
    datasets = []
    for i, ds in enumerate(datasets_raw):
        field = f"{prefix}.datasets[{i}]"
        if not isinstance(ds, Mapping) or not isinstance(ds.get("path"), str) or not ds["path"]:
            raise InvalidMetadataError(where, f"{field}.path", "a non-empty string", ds)
        needs_transform = version in ("0.4", "0.5")
        scale, translation = _parse_transforms(
            ds.get("coordinateTransformations"),
            ndim,
            where,
            f"{field}.coordinateTransformations",
            required=needs_transform,
        )
        datasets.append((ds["path"], scale, translation))

    if axes is None:  # 0.1 / 0.2: implicit 5-D axes
        axes = tuple(
            Axis(n, "channel" if n == "c" else "time" if n == "t" else "space")
            for n in IMPLICIT_AXES
        )
    ndim = len(axes)
    composed = []
    for path, scale, translation in datasets:
        scale = scale or (1.0,) * ndim
        translation = translation or (0.0,) * ndim
        if global_scale or global_translation:
            gs = global_scale or (1.0,) * ndim
            gt = global_translation or (0.0,) * ndim
            # Dataset transforms apply first, then the multiscale-level ones.
            translation = tuple(t * s + g for t, s, g in zip(translation, gs, gt, strict=True))
            scale = tuple(a * b for a, b in zip(scale, gs, strict=True))
        composed.append(DatasetMeta(path, scale, translation))
    _check_scales_grow(composed, where, prefix)

    return MultiscaleMeta(
        version=version,
        axes=axes,
        datasets=tuple(composed),
        name=_as_str(ms.get("name")),
        type=_as_str(ms.get("type")),
        metadata=dict(ms.get("metadata") or {}),
        channels=parse_omero(block.get("omero"), where),
        image_label=parse_image_label(block.get("image-label"), version, where),
    )


def parse_omero(omero: Any, where: str) -> tuple[Channel, ...]:
    """The ``omero.channels`` list (transitional metadata, read leniently)."""
    if omero is None:
        return ()
    if not isinstance(omero, Mapping):
        raise InvalidMetadataError(where, "omero", "an object", omero)
    channels = omero.get("channels") or []
    if not isinstance(channels, list):
        raise InvalidMetadataError(where, "omero.channels", "a list", channels)
    out = []
    for i, ch in enumerate(channels):
        if not isinstance(ch, Mapping):
            raise InvalidMetadataError(where, f"omero.channels[{i}]", "an object", ch)
        color = ch.get("color")
        if color is not None and not (
            isinstance(color, str) and len(color) == 6 and _is_hex(color)
        ):
            raise InvalidMetadataError(
                where, f"omero.channels[{i}].color", "a 6-digit RGB hex string", color
            )
        window = ch.get("window")
        if window is not None and not isinstance(window, Mapping):
            raise InvalidMetadataError(where, f"omero.channels[{i}].window", "an object", window)
        out.append(
            Channel(
                label=_as_str(ch.get("label")),
                color=color.upper() if isinstance(color, str) else None,
                window={k: float(v) for k, v in window.items() if _is_number(v)}
                if window
                else None,
                active=ch.get("active"),
            )
        )
    return tuple(out)


def parse_image_label(block: Any, version: str | None, where: str) -> ImageLabelMeta | None:
    if block is None:
        return None
    if not isinstance(block, Mapping):
        raise InvalidMetadataError(where, "image-label", "an object", block)
    colors = []
    for i, c in enumerate(block.get("colors") or []):
        if not isinstance(c, Mapping) or not _is_number(c.get("label-value")):
            raise InvalidMetadataError(where, f"image-label.colors[{i}].label-value", "a number", c)
        rgba = c.get("rgba")
        if rgba is not None:
            if not (
                isinstance(rgba, list)
                and len(rgba) == 4
                and all(isinstance(v, int) and 0 <= v <= 255 for v in rgba)
            ):
                raise InvalidMetadataError(
                    where, f"image-label.colors[{i}].rgba", "four integers in 0..255", rgba
                )
            rgba = tuple(rgba)
        colors.append(LabelColor(c["label-value"], rgba))
    values = [c.label_value for c in colors]
    if len(set(values)) != len(values):
        raise InvalidMetadataError(
            where, "image-label.colors", "unique label-value entries", values
        )
    source = block.get("source")
    return ImageLabelMeta(
        version=_as_str(block.get("version")) or version,
        colors=tuple(colors),
        properties=tuple(
            dict(p) for p in (block.get("properties") or []) if isinstance(p, Mapping)
        ),
        source_image=_as_str(source.get("image")) if isinstance(source, Mapping) else None,
    )


def parse_labels_group(block: Mapping[str, Any], where: str) -> tuple[str, ...]:
    labels = block.get("labels")
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise InvalidMetadataError(where, "labels", "a list of label image paths", labels)
    return tuple(labels)


def parse_plate(block: Mapping[str, Any], version: str | None, where: str) -> PlateMeta:
    plate = block.get("plate")
    if not isinstance(plate, Mapping):
        raise InvalidMetadataError(where, "plate", "an object", plate)
    version = version or _as_str(plate.get("version")) or "0.4"
    rows = _names(plate.get("rows"), where, "plate.rows")
    columns = _names(plate.get("columns"), where, "plate.columns")
    wells_raw = plate.get("wells")
    if not isinstance(wells_raw, list):
        raise InvalidMetadataError(where, "plate.wells", "a list of wells", wells_raw)
    wells = []
    for i, w in enumerate(wells_raw):
        field = f"plate.wells[{i}]"
        if not isinstance(w, Mapping) or not isinstance(w.get("path"), str):
            raise InvalidMetadataError(where, f"{field}.path", "a 'row/column' path", w)
        parts = w["path"].split("/")
        if len(parts) != 2:
            raise InvalidMetadataError(where, f"{field}.path", "a 'row/column' path", w["path"])
        row_name, col_name = parts
        if row_name not in rows or col_name not in columns:
            raise InvalidMetadataError(
                where,
                f"{field}.path",
                "a row and column declared in plate.rows/columns",
                w["path"],
            )
        row_index = rows.index(row_name)
        col_index = columns.index(col_name)
        declared = (w.get("rowIndex"), w.get("columnIndex"))
        if declared != (None, None) and declared != (row_index, col_index):
            warnings.warn(
                f"{where}: {field} has rowIndex/columnIndex {declared} but its path "
                f"'{w['path']}' is row {row_index}, column {col_index}; using the path",
                MetadataWarning,
                stacklevel=2,
            )
        wells.append(WellRef(w["path"], row_name, col_name, row_index, col_index))
    acquisitions = tuple(
        Acquisition(int(a["id"]), _as_str(a.get("name")), a.get("maximumfieldcount"))
        for a in plate.get("acquisitions") or []
        if isinstance(a, Mapping) and isinstance(a.get("id"), int)
    )
    return PlateMeta(
        version=version,
        name=_as_str(plate.get("name")),
        rows=tuple(rows),
        columns=tuple(columns),
        wells=tuple(wells),
        acquisitions=acquisitions,
        field_count=plate.get("field_count"),
    )


def parse_well(block: Mapping[str, Any], version: str | None, where: str) -> WellMeta:
    well = block.get("well")
    if not isinstance(well, Mapping):
        raise InvalidMetadataError(where, "well", "an object", well)
    version = version or _as_str(well.get("version")) or "0.4"
    validate_schema(block, version, "well", where)
    images = well.get("images")
    if not isinstance(images, list) or not images:
        raise InvalidMetadataError(where, "well.images", "a non-empty list of fields", images)
    fields = []
    for i, im in enumerate(images):
        if not isinstance(im, Mapping) or not isinstance(im.get("path"), str):
            raise InvalidMetadataError(where, f"well.images[{i}].path", "a string", im)
        fields.append(FieldRef(im["path"], im.get("acquisition")))
    return WellMeta(version, tuple(fields))


def parse_bioformats2raw(block: Mapping[str, Any], where: str) -> int:
    layout = block.get("bioformats2raw.layout")
    if layout != 3:
        raise InvalidMetadataError(where, "bioformats2raw.layout", "the layout version 3", layout)
    return layout


def require_ome(block: Mapping[str, Any], where: str) -> str:
    kind = kind_of(block)
    if kind is None:
        raise NotOmeZarrError(
            where,
            "multiscales",
            "OME-NGFF attributes (multiscales, plate, well or bioformats2raw.layout)",
            sorted(block) or "no attributes",
        )
    return kind


# --- helpers -------------------------------------------------------------------------------


def _parse_axes(raw: Any, version: str, where: str, field: str) -> tuple[Axis, ...] | None:
    if raw is None:
        if version in ("0.1", "0.2"):
            return None
        raise InvalidMetadataError(where, field, "a list of axes (required since NGFF 0.3)")
    if not isinstance(raw, list) or not raw:
        raise InvalidMetadataError(where, field, "a non-empty list of axes", raw)
    axes = []
    for i, a in enumerate(raw):
        if isinstance(a, str) and version == "0.3":
            axes.append(Axis(a, "space" if a in "zyx" else {"c": "channel", "t": "time"}.get(a)))
            continue
        if not isinstance(a, Mapping) or not isinstance(a.get("name"), str):
            raise InvalidMetadataError(where, f"{field}[{i}].name", "a string", a)
        unit = a.get("unit")
        axis = Axis(a["name"], _as_str(a.get("type")), _as_str(unit))
        if unit is not None:
            known = (
                SPACE_UNITS if axis.type == "space" else TIME_UNITS if axis.type == "time" else None
            )
            if known is not None and unit not in known:
                warnings.warn(
                    f"{where}: {field}[{i}].unit {unit!r} is not a UDUNITS-2 {axis.type} unit "
                    "that NGFF recommends",
                    MetadataWarning,
                    stacklevel=3,
                )
        axes.append(axis)
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise InvalidMetadataError(where, field, "unique axis names", names)
    return tuple(axes)


def _parse_transforms(
    raw: Any, ndim: int | None, where: str, field: str, *, required: bool
) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    if raw is None:
        if required:
            raise InvalidMetadataError(where, field, "a list holding a 'scale' transform")
        return None, None
    if not isinstance(raw, list):
        raise InvalidMetadataError(where, field, "a list of transforms", raw)
    scale = translation = None
    for i, t in enumerate(raw):
        kind = t.get("type") if isinstance(t, Mapping) else None
        if kind == "identity":
            continue
        if kind not in ("scale", "translation"):
            raise InvalidMetadataError(
                where, f"{field}[{i}].type", "'scale' or 'translation'", kind
            )
        if kind not in t:
            if "path" in t:
                raise InvalidMetadataError(
                    where,
                    f"{field}[{i}]",
                    f"an inline '{kind}' (binary 'path' transforms are not supported)",
                    t["path"],
                )
            raise InvalidMetadataError(where, f"{field}[{i}].{kind}", "a list of numbers")
        values = t[kind]
        if not isinstance(values, list) or not all(_is_number(v) for v in values):
            raise InvalidMetadataError(where, f"{field}[{i}].{kind}", "a list of numbers", values)
        if ndim is not None and len(values) != ndim:
            raise InvalidMetadataError(
                where, f"{field}[{i}].{kind}", f"{ndim} values, one per axis", len(values)
            )
        if kind == "scale":
            if scale is not None or translation is not None:
                raise InvalidMetadataError(
                    where,
                    field,
                    "one scale, then at most one translation",
                    [x.get("type") for x in raw],
                )
            if any(v <= 0 for v in values):
                raise InvalidMetadataError(where, f"{field}[{i}].scale", "positive values", values)
            scale = tuple(float(v) for v in values)
        else:
            if translation is not None or scale is None:
                raise InvalidMetadataError(
                    where,
                    field,
                    "one scale, then at most one translation",
                    [x.get("type") for x in raw],
                )
            translation = tuple(float(v) for v in values)
    if required and scale is None:
        raise InvalidMetadataError(where, field, "a 'scale' transform")
    return scale, translation


def _check_scales_grow(datasets: Sequence[DatasetMeta], where: str, prefix: str) -> None:
    for i in range(1, len(datasets)):
        prev, cur = datasets[i - 1].scale, datasets[i].scale
        if any(c < p for c, p in zip(cur, prev, strict=False)):
            warnings.warn(
                f"{where}: {prefix}.datasets[{i}] has a finer scale than level {i - 1}; "
                "NGFF orders levels from highest to lowest resolution",
                MetadataWarning,
                stacklevel=3,
            )


def _names(raw: Any, where: str, field: str) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(x, Mapping) and "name" in x for x in raw):
        raise InvalidMetadataError(where, field, "a list of {'name': ...} objects", raw)
    return [str(x["name"]) for x in raw]


def _dotted(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _as_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _is_hex(s: str) -> bool:
    try:
        int(s, 16)
    except ValueError:
        return False
    return True
