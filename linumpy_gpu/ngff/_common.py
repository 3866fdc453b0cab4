"""What every NGFF version parses the same way: the OME block, type checks, units, axes
layout, omero, image-label, labels, plate, well and bioformats2raw blocks.

Version modules call these with the options their spec version sets (how strict the
``omero`` block is, which well paths are allowed, ...). Every failure is an
:class:`~linumpy_gpu.errors.InvalidMetadataError` naming the store, the field (a dotted
path such as ``multiscales[0].axes[1].unit``) and what the spec expects there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from linumpy_gpu.errors import InvalidMetadataError, MetadataWarning, NotOmeZarrError, warn
from linumpy_gpu.ngff.model import (
    SPACE_UNITS,
    TIME_UNITS,
    Acquisition,
    Axis,
    Channel,
    FieldRef,
    ImageLabelMeta,
    LabelColor,
    PlateMeta,
    WellMeta,
    WellRef,
)

SUPPORTED_VERSIONS = ("0.1", "0.2", "0.3", "0.4", "0.5", "0.6")
# Pre-release tags of 0.6 read as 0.6: release candidates as they are, development tags
# (whose metadata may differ from the release) with a warning.
_RC_06 = re.compile(r"0\.6rc\d+")
_DEV_06 = re.compile(r"0\.6\.dev\d+")
ALPHANUMERIC = re.compile(r"[A-Za-z0-9]+")
# Well field paths from NGFF 0.6 on: zarr node names limited to these characters, not made
# of dots only and not starting with the reserved "__".
NODE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
WINDOW_KEYS = ("start", "end", "min", "max")


# -- versions -----------------------------------------------------------------------------------


def release_of(declared: Any) -> str | None:
    """The version of :data:`SUPPORTED_VERSIONS` that ``declared`` names (a 0.6 pre-release
    tag names 0.6), or None."""
    if declared in SUPPORTED_VERSIONS:
        return declared
    if isinstance(declared, str) and (_RC_06.fullmatch(declared) or _DEV_06.fullmatch(declared)):
        return "0.6"
    return None


def spec_version(declared: Any, where: str, field: str = "version") -> str:
    """The version of :data:`SUPPORTED_VERSIONS` that ``declared`` names; a warning for a
    0.6 development tag, an :class:`~linumpy_gpu.errors.InvalidMetadataError` naming
    ``field`` for anything else unknown."""
    release = release_of(declared)
    if release is None:
        raise InvalidMetadataError(
            where, field, f"one of {', '.join(SUPPORTED_VERSIONS)}", declared
        )
    if isinstance(declared, str) and _DEV_06.fullmatch(declared):
        warn(
            f"{where}: NGFF pre-release '{declared}' is read as 0.6; metadata written before "
            "the 0.6 release may not follow it",
            MetadataWarning,
        )
    return release


# -- the OME block ------------------------------------------------------------------------------


def ome_block(attrs: Mapping[str, Any], zarr_format: int) -> tuple[dict, str | None]:
    """Return the OME attribute block of a group and its declared NGFF version.

    From NGFF 0.5 (zarr v3) everything nests under ``attributes["ome"]`` with one
    ``version``; earlier versions put ``multiscales`` / ``plate`` / ``well`` at the top
    level and a ``version`` inside each. ``zarr_format`` is accepted for symmetry with the
    writers; the layout of the attributes alone decides.
    """
    if isinstance(attrs.get("ome"), Mapping):
        block = dict(attrs["ome"])
        return block, as_str(block.get("version"))
    block = dict(attrs)
    for key in ("multiscales", "plate", "well"):
        value = block.get(key)
        if isinstance(value, list) and value and isinstance(value[0], Mapping):
            return block, as_str(value[0].get("version"))
        if isinstance(value, Mapping):
            return block, as_str(value.get("version"))
    return block, None


def kind_of(block: Mapping[str, Any]) -> str | None:
    """What an OME block describes: 'plate', 'well', 'image', 'scene', 'bioformats2raw',
    'labels' or None."""
    if "plate" in block:
        return "plate"
    if "well" in block:
        return "well"
    if "multiscales" in block:
        return "image"
    if "scene" in block:
        return "scene"
    if "bioformats2raw.layout" in block:
        return "bioformats2raw"
    if "labels" in block:
        return "labels"
    return None


def require_ome(block: Mapping[str, Any], where: str) -> str:
    """The kind of an OME block (see :func:`kind_of`); raises
    :class:`~linumpy_gpu.errors.NotOmeZarrError` when it holds no OME-NGFF metadata."""
    kind = kind_of(block)
    if kind is None:
        raise NotOmeZarrError(
            where,
            "multiscales",
            "OME-NGFF attributes (multiscales, plate, well, scene or bioformats2raw.layout)",
            sorted(block) or "no attributes",
        )
    return kind


def parse_bioformats2raw(block: Mapping[str, Any], where: str) -> int:
    """The ``bioformats2raw.layout`` version, which must be 3."""
    layout = block.get("bioformats2raw.layout")
    if layout != 3 or isinstance(layout, bool):
        raise InvalidMetadataError(where, "bioformats2raw.layout", "the layout version 3", layout)
    return 3


# -- values -------------------------------------------------------------------------------------


def as_str(v: Any) -> str | None:
    """``v`` when it is a string, else None."""
    return v if isinstance(v, str) else None


def is_number(v: Any) -> bool:
    """A finite JSON number that fits a float (booleans are not numbers)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer beyond the float range
        return False


def is_int(v: Any) -> bool:
    """A JSON integer (booleans are not integers)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_integral(v: Any) -> bool:
    """An integer, or a finite float with no fractional part."""
    return is_int(v) or (is_number(v) and float(v).is_integer())


def numbers(raw: Any, where: str, field: str, *, positive: bool = False) -> tuple[float, ...]:
    """A list of finite numbers (positive ones when asked) as floats."""
    if not isinstance(raw, list) or not all(is_number(v) for v in raw):
        raise InvalidMetadataError(where, field, "a list of numbers", raw)
    if positive and any(v <= 0 for v in raw):
        raise InvalidMetadataError(where, field, "positive values", raw)
    return tuple(float(v) for v in raw)


def indices(raw: Any, where: str, field: str) -> tuple[int, ...]:
    """A list of unique non-negative integers."""
    if not isinstance(raw, list) or not all(is_int(v) and v >= 0 for v in raw):
        raise InvalidMetadataError(where, field, "a list of non-negative integers", raw)
    if len(set(raw)) != len(raw):
        raise InvalidMetadataError(where, field, "indices that each appear once", raw)
    return tuple(raw)


def optional_str(obj: Mapping[str, Any], key: str, where: str, field: str) -> str | None:
    """``obj[key]`` when it is a string, None when absent; anything else is invalid."""
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidMetadataError(where, f"{field}.{key}", "a string", value)
    return value


def mapping(raw: Any, where: str, field: str) -> Mapping[str, Any]:
    """``raw`` when it is a JSON object."""
    if not isinstance(raw, Mapping):
        raise InvalidMetadataError(where, field, "an object", raw)
    return raw


def non_empty_list(raw: Any, where: str, field: str, expected: str = "a non-empty list") -> list:
    """``raw`` when it is a non-empty JSON list (``expected`` says what the error expects)."""
    if not isinstance(raw, list) or not raw:
        raise InvalidMetadataError(where, field, expected, raw)
    return raw


def method_metadata(raw: Any, where: str, field: str) -> dict:
    """The free-form ``metadata`` object of a multiscale image (a warning, and nothing
    kept, when it is not an object)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        warn(f"{where}: {field} is not an object and is ignored: {raw!r}", MetadataWarning)
        return {}
    return dict(raw)


# -- axes ---------------------------------------------------------------------------------------


def parse_axis(raw: Any, where: str, field: str, *, rfc5: bool = False) -> Axis:
    """One axis object: ``name`` (a string; non-empty from 0.6), optional string ``type`` and
    ``unit`` (a warning for units UDUNITS-2 does not list for space and time axes), and from
    0.6 optional boolean ``discrete`` and string ``longName``."""
    if not isinstance(raw, Mapping):
        raise InvalidMetadataError(where, f"{field}.name", "an axis object with a name", raw)
    name = raw.get("name")
    if not isinstance(name, str) or (rfc5 and not name):
        raise InvalidMetadataError(where, f"{field}.name", "a non-empty string", name)
    kind = optional_str(raw, "type", where, field)
    unit = optional_str(raw, "unit", where, field)
    discrete = long_name = None
    if rfc5:
        discrete = raw.get("discrete")
        if discrete is not None and not isinstance(discrete, bool):
            raise InvalidMetadataError(where, f"{field}.discrete", "true or false", discrete)
        long_name = optional_str(raw, "longName", where, field)
    if unit is not None:
        known = SPACE_UNITS if kind == "space" else TIME_UNITS if kind == "time" else None
        if known is not None and unit not in known:
            warn(
                f"{where}: {field}.unit {unit!r} is not a UDUNITS-2 {kind} unit that NGFF "
                "recommends",
                MetadataWarning,
            )
    return Axis(name, kind, unit, discrete, long_name)


def check_unique_names(axes: Sequence[Axis], where: str, field: str) -> None:
    """Axis names are unique."""
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise InvalidMetadataError(where, field, "unique axis names", names)


def check_image_axes(axes: Sequence[Axis], where: str, field: str, *, rfc5: bool = False) -> None:
    """The axes of a multiscale image: 2 to 5 of them with unique names, 2 or 3 of type
    'space', at most one of type 'time', at most one more of type 'channel' or a custom
    (or no) type, ordered time, then channel or custom, then space. From NGFF 0.6 a
    coordinate system may instead be made of axes of type 'array' (at least two)."""
    if not 2 <= len(axes) <= 5:
        raise InvalidMetadataError(where, field, "2 to 5 axes", len(axes))
    check_unique_names(axes, where, field)
    types = [a.type for a in axes]
    n_space = types.count("space")
    if rfc5 and n_space == 0 and types.count("array") >= 2:
        return
    if n_space not in (2, 3):
        raise InvalidMetadataError(where, field, "2 or 3 axes of type 'space'", types)
    if types.count("time") > 1:
        raise InvalidMetadataError(where, field, "at most one axis of type 'time'", types)
    others = [t for t in types if t not in ("space", "time")]
    if len(others) > 1:
        raise InvalidMetadataError(
            where, field, "at most one axis of type 'channel' or of a custom type", types
        )
    rank = [0 if t == "time" else 2 if t == "space" else 1 for t in types]
    if rank != sorted(rank):
        raise InvalidMetadataError(
            where, field, "axes ordered by type: time, then channel or custom, then space", types
        )


def check_coordinate_system_axes(axes: Sequence[Axis], where: str, field: str) -> None:
    """The axes of any NGFF 0.6 coordinate system: 1 to 5 with unique names, and either 2
    or 3 of type 'space' or at least 2 of type 'array' (not both)."""
    if not 1 <= len(axes) <= 5:
        raise InvalidMetadataError(where, field, "1 to 5 axes", len(axes))
    check_unique_names(axes, where, field)
    types = [a.type for a in axes]
    spatial = types.count("space") in (2, 3)
    array = types.count("array") >= 2
    if spatial == array:
        raise InvalidMetadataError(
            where, field, "2 or 3 axes of type 'space', or at least 2 of type 'array'", types
        )


# -- multiscale entries -------------------------------------------------------------------------


def multiscale_entry(
    block: Mapping[str, Any], where: str, index: int
) -> tuple[Mapping[str, Any], str]:
    """``multiscales[index]`` of an image block, and its field prefix."""
    multiscales = non_empty_list(
        block.get("multiscales"), where, "multiscales", "a non-empty list of multiscale images"
    )
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(multiscales):
        raise InvalidMetadataError(
            where, "multiscales", f"at least {index + 1} multiscale entries", len(multiscales)
        )
    prefix = f"multiscales[{index}]"
    return mapping(multiscales[index], where, prefix), prefix


def dataset_entries(
    ms: Mapping[str, Any], where: str, prefix: str
) -> list[tuple[str, Mapping[str, Any], str]]:
    """The ``datasets`` of a multiscale entry as ``(field, dataset, path)``: a non-empty list
    of objects with unique non-empty paths."""
    raw = non_empty_list(ms.get("datasets"), where, f"{prefix}.datasets")
    out = []
    seen: set[str] = set()
    for i, ds in enumerate(raw):
        field = f"{prefix}.datasets[{i}]"
        path = ds.get("path") if isinstance(ds, Mapping) else None
        if not is_child_path(path):
            raise InvalidMetadataError(
                where, f"{field}.path", "a non-empty path inside the image's group", ds
            )
        node = path.strip("/")  # as zarr resolves it: '0', '0/' and '/0' are one node
        if node in seen:
            raise InvalidMetadataError(
                where, f"{field}.path", "a path no other level of the pyramid uses", path
            )
        seen.add(node)
        out.append((field, ds, path))
    return out


def check_scales_grow(
    scales: Sequence[tuple[float, ...] | None], where: str, prefix: str, *, strict: bool
) -> None:
    """Levels go from the highest resolution to the lowest: no scale of a level is
    smaller than the same axis's scale one level up. An error for NGFF 0.4 on, a warning
    before (None skips a level whose scale is not known)."""
    known = [(i, s) for i, s in enumerate(scales) if s is not None]
    for (_, prev), (i, cur) in zip(known, known[1:], strict=False):
        if any(c < p for c, p in zip(cur, prev, strict=False)):
            if strict:
                raise InvalidMetadataError(
                    where,
                    f"{prefix}.datasets[{i}].coordinateTransformations",
                    "a scale no finer than the previous level's (levels go from the highest "
                    "resolution to the lowest)",
                    list(cur),
                )
            warn(
                f"{where}: {prefix}.datasets[{i}] has a finer scale than the level before; "
                "NGFF orders levels from highest to lowest resolution",
                MetadataWarning,
            )


def scale_translation_list(
    raw: Any, ndim: int | None, where: str, field: str, *, required: bool
) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    """The NGFF 0.4 / 0.5 form of ``coordinateTransformations``: one inline ``scale``
    (positive, one value per axis), then at most one inline ``translation``."""
    if raw is None:
        if required:
            raise InvalidMetadataError(where, field, "a list holding a 'scale' transformation")
        return None, None
    order = "one 'scale', then at most one 'translation'"
    raw = non_empty_list(raw, where, field, f"a list of {order}")
    kinds = [t.get("type") if isinstance(t, Mapping) else None for t in raw]
    for i, kind in enumerate(kinds):
        if kind not in ("scale", "translation"):
            raise InvalidMetadataError(
                where, f"{field}[{i}].type", "'scale' or 'translation'", kind
            )
    if kinds not in (["scale"], ["scale", "translation"]):
        raise InvalidMetadataError(where, field, order, kinds)
    values = []
    for i, (t, kind) in enumerate(zip(raw, kinds, strict=True)):
        if kind not in t and "path" in t:
            raise InvalidMetadataError(
                where,
                f"{field}[{i}]",
                f"an inline '{kind}' (values stored at a 'path' are not supported)",
                t["path"],
            )
        vec = numbers(t.get(kind), where, f"{field}[{i}].{kind}", positive=kind == "scale")
        if ndim is not None and len(vec) != ndim:
            raise InvalidMetadataError(
                where, f"{field}[{i}].{kind}", f"{ndim} values, one per axis", len(vec)
            )
        values.append(vec)
    return values[0], values[1] if len(values) > 1 else None


# -- omero --------------------------------------------------------------------------------------


def parse_omero(omero: Any, where: str, *, mode: str) -> tuple[Channel, ...]:
    """The transitional ``omero.channels`` list.

    ``mode``: "legacy" (NGFF 0.1-0.3: ``channels`` may be missing), "complete" (0.4: each
    channel has a ``color`` and a ``window`` with start, end, min and max) or "typed" (0.5
    and 0.6: ``color`` and ``window`` optional, a window complete when present). In every
    mode a color is 6 hex digits and window bounds are numbers.
    """
    if omero is None:
        return ()
    omero = mapping(omero, where, "omero")
    channels = omero.get("channels")
    if channels is None and mode == "legacy":
        return ()
    if not isinstance(channels, list):
        raise InvalidMetadataError(where, "omero.channels", "a list of channels", channels)
    out = []
    for i, ch in enumerate(channels):
        field = f"omero.channels[{i}]"
        ch = mapping(ch, where, field)
        color = ch.get("color")
        if color is None and mode == "complete":
            raise InvalidMetadataError(where, f"{field}.color", "a 6-digit RGB hex string")
        if color is not None and not (
            isinstance(color, str) and re.fullmatch(r"[0-9A-Fa-f]{6}", color)
        ):
            raise InvalidMetadataError(where, f"{field}.color", "a 6-digit RGB hex string", color)
        window = ch.get("window")
        if window is None and mode == "complete":
            raise InvalidMetadataError(
                where, f"{field}.window", "an object with start, end, min and max"
            )
        if window is not None:
            window = mapping(window, where, f"{field}.window")
            for key in WINDOW_KEYS:
                value = window.get(key)
                if value is None and mode != "legacy":
                    raise InvalidMetadataError(where, f"{field}.window.{key}", "a number")
                if value is not None and not is_number(value):
                    raise InvalidMetadataError(where, f"{field}.window.{key}", "a number", value)
        active = ch.get("active")
        if active is not None and not isinstance(active, bool):
            raise InvalidMetadataError(where, f"{field}.active", "true or false", active)
        label = ch.get("label")
        if label is not None and not isinstance(label, str):
            raise InvalidMetadataError(where, f"{field}.label", "a string", label)
        out.append(
            Channel(
                label=label,
                color=color.upper() if color is not None else None,
                window={k: float(v) for k, v in window.items() if is_number(v)}
                if window is not None
                else None,
                active=active,
            )
        )
    return tuple(out)


# -- labels ---------------------------------------------------------------------------------------


def is_child_path(path: Any) -> TypeGuard[str]:
    """Whether ``path`` names a node below the group whose metadata holds it: a non-empty
    path without empty, ``.`` or ``..`` parts (which zarr refuses, or which name a node
    outside the group); slashes at its ends are ignored, as zarr ignores them."""
    parts = path.strip("/").split("/") if isinstance(path, str) else [""]
    return all(part not in ("", ".", "..") for part in parts)


def parse_labels_group(block: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The ``labels`` list of a labels group: paths of its label images."""
    labels = block.get("labels")
    if not isinstance(labels, list) or not all(is_child_path(x) for x in labels):
        raise InvalidMetadataError(
            where, "labels", "a list of label image paths inside the labels group", labels
        )
    return tuple(labels)


def parse_image_label(
    raw: Any, version: str, where: str, *, integers: bool, non_empty: bool
) -> ImageLabelMeta | None:
    """The ``image-label`` block of a label image.

    ``colors`` entries have a ``label-value`` (an integer when ``integers``; from NGFF 0.4
    on) that no other entry has, and optionally ``rgba``, four integers in 0..255;
    ``properties`` entries have a ``label-value`` too; with ``non_empty`` (NGFF 0.6) the
    two lists, when present, are not empty. Colors and properties may describe different
    label values: the spec does not ask them to agree.
    """
    if raw is None:
        return None
    block = mapping(raw, where, "image-label")

    def entries(key: str) -> list:
        found = block.get(key)
        if found is not None and (not isinstance(found, list) or (non_empty and not found)):
            raise InvalidMetadataError(where, f"image-label.{key}", "a non-empty list", found)
        return found or []

    def label_value(entry: Any, field: str) -> Any:
        value = entry.get("label-value") if isinstance(entry, Mapping) else None
        if not (is_integral(value) if integers else is_number(value)):
            kind = "an integer" if integers else "a number"
            raise InvalidMetadataError(where, f"{field}.label-value", kind, entry)
        return value

    colors = []
    for i, c in enumerate(entries("colors")):
        field = f"image-label.colors[{i}]"
        value = label_value(c, field)
        rgba = c.get("rgba")
        if rgba is not None:
            if not (
                isinstance(rgba, list)
                and len(rgba) == 4
                and all(is_int(v) and 0 <= v <= 255 for v in rgba)
            ):
                raise InvalidMetadataError(where, f"{field}.rgba", "four integers in 0..255", rgba)
            rgba = tuple(rgba)
        colors.append(LabelColor(int(value) if integers else value, rgba))
    values = [c.label_value for c in colors]
    if len(set(values)) != len(values):
        raise InvalidMetadataError(
            where, "image-label.colors", "unique label-value entries", values
        )
    properties = []
    for i, p in enumerate(entries("properties")):
        value = label_value(p, f"image-label.properties[{i}]")
        # the same value as its colour entry's: an integer written as 1.0 is 1 in both
        properties.append({**p, "label-value": int(value)} if integers else dict(p))
    source = block.get("source")
    if source is not None:
        source = mapping(source, where, "image-label.source")
        optional_str(source, "image", where, "image-label.source")
    own_version = optional_str(block, "version", where, "image-label")
    return ImageLabelMeta(
        version=own_version or version,
        colors=tuple(colors),
        properties=tuple(properties),
        source_image=as_str(source.get("image")) if source is not None else None,
    )


# -- plates and wells -----------------------------------------------------------------------------


def parse_plate(
    block: Mapping[str, Any], version: str, where: str, *, strict: bool, non_empty: bool = False
) -> PlateMeta:
    """The ``plate`` block.

    Always: rows and columns are lists of ``{"name": ...}``, wells a list of
    ``{"path": "row/column"}`` naming a declared row and column. With ``strict`` (NGFF 0.4
    on): row and column names are unique and alphanumeric, every well has integer
    ``rowIndex`` and ``columnIndex``, well paths are unique, acquisitions have unique
    non-negative integer ids, counts are positive integers. With ``non_empty`` (NGFF 0.6)
    rows, columns and wells are non-empty lists. Indices that disagree with the path give
    a warning and the path wins, as readers of existing plates expect.
    """
    plate = mapping(block.get("plate"), where, "plate")
    rows = _plate_names(plate.get("rows"), where, "plate.rows", strict=strict, non_empty=non_empty)
    columns = _plate_names(
        plate.get("columns"), where, "plate.columns", strict=strict, non_empty=non_empty
    )
    wells_raw = plate.get("wells")
    if not isinstance(wells_raw, list) or (non_empty and not wells_raw):
        raise InvalidMetadataError(where, "plate.wells", "a list of wells", wells_raw)
    wells = []
    seen: set[str] = set()
    for i, w in enumerate(wells_raw):
        field = f"plate.wells[{i}]"
        raw_path = w.get("path") if isinstance(w, Mapping) else None
        parts = raw_path.split("/") if isinstance(raw_path, str) else []
        if len(parts) != 2 or not is_child_path(raw_path):
            raise InvalidMetadataError(where, f"{field}.path", "a 'row/column' path", raw_path)
        path = str(raw_path)
        row_name, col_name = parts
        if row_name not in rows or col_name not in columns:
            raise InvalidMetadataError(
                where, f"{field}.path", "a row and column declared in plate.rows/columns", path
            )
        if strict and path in seen:
            raise InvalidMetadataError(where, f"{field}.path", "a path no other well uses", path)
        seen.add(path)
        row_index, col_index = rows.index(row_name), columns.index(col_name)
        declared = (w.get("rowIndex"), w.get("columnIndex"))
        for key, value in zip(("rowIndex", "columnIndex"), declared, strict=True):
            if (value is None and strict) or (
                value is not None and not (is_int(value) and value >= 0)
            ):
                raise InvalidMetadataError(where, f"{field}.{key}", "a non-negative integer", value)
        if declared != (None, None) and declared != (row_index, col_index):
            warn(
                f"{where}: {field} has rowIndex/columnIndex {declared} but its path "
                f"'{path}' is row {row_index}, column {col_index}; using the path",
                MetadataWarning,
            )
        wells.append(WellRef(path, row_name, col_name, row_index, col_index))
    acquisitions = _acquisitions(plate.get("acquisitions"), where, strict=strict)
    field_count = plate.get("field_count")
    if field_count is not None and not (is_int(field_count) and field_count > 0):
        if strict:
            raise InvalidMetadataError(
                where, "plate.field_count", "a positive integer", field_count
            )
        field_count = None
    name = plate.get("name")
    if strict and name is not None and not isinstance(name, str):
        raise InvalidMetadataError(where, "plate.name", "a string", name)
    return PlateMeta(
        version=version,
        name=as_str(name),
        rows=tuple(rows),
        columns=tuple(columns),
        wells=tuple(wells),
        acquisitions=acquisitions,
        field_count=field_count,
    )


def parse_well(block: Mapping[str, Any], version: str, where: str, *, path_rule: str) -> WellMeta:
    """The ``well`` block: a non-empty list of fields of view with string paths and
    optional integer acquisitions.

    ``path_rule``: "any" (NGFF 0.1-0.3), "alphanumeric" (0.4, 0.5: letters and digits,
    unique) or "node-name" (0.6: letters, digits, '_', '.', '-', not only dots, not
    starting with '__', unique).
    """
    well = mapping(block.get("well"), where, "well")
    images = non_empty_list(well.get("images"), where, "well.images", "a non-empty list of fields")
    fields = []
    seen: set[str] = set()
    for i, im in enumerate(images):
        field = f"well.images[{i}]"
        path = im.get("path") if isinstance(im, Mapping) else None
        if not is_child_path(path):
            raise InvalidMetadataError(where, f"{field}.path", "a path inside the well", im)
        if path_rule == "alphanumeric" and not ALPHANUMERIC.fullmatch(path):
            raise InvalidMetadataError(where, f"{field}.path", "letters and digits only", path)
        if path_rule == "node-name" and (
            not NODE_NAME.fullmatch(path) or set(path) == {"."} or path.startswith("__")
        ):
            raise InvalidMetadataError(
                where,
                f"{field}.path",
                "a zarr node name: letters, digits, '_', '.', '-', not only dots, "
                "not starting with '__'",
                path,
            )
        if path_rule != "any" and path in seen:
            raise InvalidMetadataError(where, f"{field}.path", "a path no other field uses", path)
        seen.add(path)
        acquisition = im.get("acquisition")
        if acquisition is not None and not is_int(acquisition):
            if path_rule != "any":
                raise InvalidMetadataError(where, f"{field}.acquisition", "an integer", acquisition)
            acquisition = None
        fields.append(FieldRef(path, acquisition))
    return WellMeta(version, tuple(fields))


def _plate_names(raw: Any, where: str, field: str, *, strict: bool, non_empty: bool) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(x, Mapping) and "name" in x for x in raw):
        raise InvalidMetadataError(where, field, "a list of {'name': ...} objects", raw)
    names = []
    for i, x in enumerate(raw):
        name = x["name"]
        if strict and not (isinstance(name, str) and ALPHANUMERIC.fullmatch(name)):
            raise InvalidMetadataError(where, f"{field}[{i}].name", "letters and digits only", name)
        names.append(str(name))
    if non_empty and not names:
        raise InvalidMetadataError(where, field, "a non-empty list", raw)
    if strict and len(set(names)) != len(names):
        raise InvalidMetadataError(where, field, "unique names", names)
    return names


def _acquisitions(raw: Any, where: str, *, strict: bool) -> tuple[Acquisition, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        if strict:
            raise InvalidMetadataError(where, "plate.acquisitions", "a list", raw)
        return ()
    out = []
    for i, a in enumerate(raw):
        field = f"plate.acquisitions[{i}]"
        if not isinstance(a, Mapping) or not (is_int(a.get("id")) and a["id"] >= 0):
            if strict:
                raise InvalidMetadataError(where, f"{field}.id", "a non-negative integer", a)
            continue
        count = a.get("maximumfieldcount")
        if count is not None and not (is_int(count) and count > 0):
            if strict:
                raise InvalidMetadataError(
                    where, f"{field}.maximumfieldcount", "a positive integer", count
                )
            count = None
        if strict:
            optional_str(a, "name", where, field)
            optional_str(a, "description", where, field)
            for key in ("starttime", "endtime"):
                value = a.get(key)
                if value is not None and not (is_int(value) and value >= 0):
                    raise InvalidMetadataError(
                        where, f"{field}.{key}", "a non-negative integer epoch time", value
                    )
        out.append(Acquisition(a["id"], as_str(a.get("name")), count))
    ids = [a.id for a in out]
    if strict and len(set(ids)) != len(ids):
        raise InvalidMetadataError(where, "plate.acquisitions", "unique acquisition ids", ids)
    return tuple(out)
